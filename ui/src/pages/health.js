import { get } from '../api.js';
import { errorBox, field, h, fill } from '../dom.js';
import { barChart, lineChart } from '../plots.js';

// Search health from the search log (GET /stats). The API reports rolling windows of N days, so the
// per-day series are differences of consecutive windows (day 0 = the last 24 hours).
export async function healthPage(root, { params, replaceParams }) {
  const days = h('select', { name: 'days' }, [7, 14].map((d) => h('option', { value: d, selected: Number(params.get('days') || 7) === d }, `${d} days`)));
  const scope = h('input', { type: 'text', name: 'scope', value: params.get('scope') || '', placeholder: 'default: this project + shared' });
  const out = h('div', { 'aria-live': 'polite' });
  const form = h('form', { class: 'toolbar' }, field('Window', days), field('Scope', scope), h('button', { type: 'submit' }, 'Show'));

  async function load() {
    const next = new URLSearchParams();
    if (days.value !== '7') next.set('days', days.value);
    if (scope.value) next.set('scope', scope.value);
    replaceParams('health', next);
    fill(out, h('p', { class: 'muted' }, 'Loading…'));
    const n = Number(days.value);
    let windows;
    try {
      windows = await Promise.all(Array.from({ length: n }, (_, i) => get('/stats', { days: i + 1, scope: scope.value.trim() })));
    } catch (err) {
      fill(out, errorBox(err));
      return;
    }
    const whole = windows[n - 1];
    const perDay = windows.map((w, i) => {
      const before = i ? windows[i - 1] : { searches: 0, empty_rate: 0 };
      const searches = Math.max(0, w.searches - before.searches);
      const empties = Math.max(0, w.searches * w.empty_rate - before.searches * before.empty_rate);
      return { label: i === 0 ? 'today' : `-${i}d`, searches, emptyRate: searches ? empties / searches : 0 };
    }).reverse();
    const lat = whole.latency_ms || {};
    const scopes = whole.scopes || [];
    fill(out,
      h('div', { class: 'stats-row' },
        stat('Searches', whole.searches || 0), stat('Empty rate', `${(100 * (whole.empty_rate || 0)).toFixed(1)}%`),
        stat('Average hits', Number(whole.avg_hits || 0).toFixed(1)), stat('Average top score', Number(whole.avg_top_score || 0).toFixed(3)),
        stat('Degraded', `${(100 * (whole.degraded_rate || 0)).toFixed(1)}%`),
        stat('Memories', scopes.reduce((a, c) => a + c.live, 0))),
      h('div', { class: 'plots' },
        barChart('Search volume per day', perDay.map((d) => ({ label: d.label, value: d.searches }))),
        lineChart('Empty-result rate per day', perDay.map((d) => ({ label: d.label, value: d.emptyRate })), { fmt: (v) => `${Math.round(100 * v)}%`, max: 1 }),
        barChart(`Latency percentiles (${n} days)`, [['p50', lat.p50], ['p95', lat.p95], ['p99', lat.p99]].map(([label, value]) => ({ label, value: value || 0, cls: label })), { fmt: (v) => v.toFixed(0), unit: ' ms' }),
        barChart('Live memories per scope', scopes.slice(0, 12).map((c) => ({ label: c.scope.length > 14 ? `${c.scope.slice(0, 13)}…` : c.scope, value: c.live })))),
      h('section', { class: 'panel' }, h('h2', {}, 'Recent misses'), h('p', { class: 'muted' }, 'Queries that found nothing: memories your agents looked for and did not have.'),
        (whole.recent_misses || []).length
          ? h('ol', { class: 'misses' }, whole.recent_misses.map((q) => h('li', {}, h('a', { href: `#/search?q=${encodeURIComponent(q)}` }, q))))
          : h('p', { class: 'muted' }, 'None in this window.')),
      scopes.length ? h('table', { class: 'grid' },
        h('thead', {}, h('tr', {}, ['Scope', 'Live', 'Archived', 'Superseded'].map((t) => h('th', { scope: 'col' }, t)))),
        h('tbody', {}, scopes.map((c) => h('tr', {}, h('td', {}, c.scope), h('td', {}, c.live), h('td', {}, c.archived), h('td', {}, c.superseded))))) : null);
  }

  form.addEventListener('submit', (event) => { event.preventDefault(); load(); });
  root.append(h('h1', { id: 'page-title' }, 'Search health'), form, out);
  await load();
}

function stat(label, value) {
  return h('div', { class: 'stat' }, h('div', { class: 'stat-value' }, value), h('div', { class: 'stat-label' }, label));
}
