// Small SVG plots with labelled axes; each has a title and a text alternative for screen readers.
import { h, s } from './dom.js';

const W = 520;
const H = 200;
const PAD = { l: 48, r: 12, t: 12, b: 36 };

function frame(title, description, ...content) {
  return h('figure', { class: 'plot' },
    s('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': description, width: '100%' }, content),
    h('figcaption', {}, title));
}

function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  return [1, 2, 5, 10].map((m) => m * p).find((m) => m >= v);
}

function yAxis(max, fmt) {
  const ticks = [0, 0.5, 1].map((f) => f * max);
  return ticks.map((t) => {
    const y = PAD.t + (H - PAD.t - PAD.b) * (1 - t / max);
    return [s('line', { x1: PAD.l, x2: W - PAD.r, y1: y, y2: y, class: 'gridline' }),
      s('text', { x: PAD.l - 6, y: y + 4, 'text-anchor': 'end', class: 'tick' }, fmt(t))];
  });
}

// bars: [{label, value, cls?}]
export function barChart(title, bars, { fmt = (v) => String(Math.round(v)), unit = '' } = {}) {
  const max = niceMax(Math.max(0, ...bars.map((b) => b.value)));
  const plotW = W - PAD.l - PAD.r;
  const plotH = H - PAD.t - PAD.b;
  const bw = plotW / Math.max(1, bars.length);
  const description = `${title}: ${bars.map((b) => `${b.label} ${fmt(b.value)}${unit}`).join(', ')}`;
  return frame(title, description, yAxis(max, fmt), bars.map((b, i) => {
    const bh = plotH * (b.value / max);
    const x = PAD.l + i * bw + bw * 0.15;
    return [s('rect', { x, y: PAD.t + plotH - bh, width: bw * 0.7, height: Math.max(0, bh), class: `bar ${b.cls || ''}` },
      s('title', {}, `${b.label}: ${fmt(b.value)}${unit}`)),
    s('text', { x: x + bw * 0.35, y: H - PAD.b + 16, 'text-anchor': 'middle', class: 'tick' }, b.label)];
  }));
}

// points: [{label, value}] joined by a line.
export function lineChart(title, points, { fmt = (v) => v.toFixed(2), unit = '', max: fixedMax } = {}) {
  const max = fixedMax || niceMax(Math.max(0, ...points.map((p) => p.value)));
  const plotW = W - PAD.l - PAD.r;
  const plotH = H - PAD.t - PAD.b;
  const step = plotW / Math.max(1, points.length - 1);
  const xy = points.map((p, i) => [PAD.l + (points.length === 1 ? plotW / 2 : i * step), PAD.t + plotH * (1 - p.value / max)]);
  const description = `${title}: ${points.map((p) => `${p.label} ${fmt(p.value)}${unit}`).join(', ')}`;
  return frame(title, description, yAxis(max, fmt),
    s('polyline', { points: xy.map(([x, y]) => `${x},${y}`).join(' '), class: 'line' }),
    xy.map(([x, y], i) => [s('circle', { cx: x, cy: y, r: 3.5, class: 'dot' }, s('title', {}, `${points[i].label}: ${fmt(points[i].value)}${unit}`)),
      s('text', { x, y: H - PAD.b + 16, 'text-anchor': 'middle', class: 'tick' }, points[i].label)]));
}
