// A tiny element builder: h('div', {class: 'x', onclick: f}, child, 'text', [more]). Text is always
// set as text (never parsed as HTML), so memory content cannot inject markup.
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith('on') && typeof value === 'function') el.addEventListener(key.slice(2), value);
    else if (key === 'dataset') Object.assign(el.dataset, value);
    else if (key === 'value') el.value = value;
    else if (key === 'checked') el.checked = Boolean(value);
    else el.setAttribute(key, value === true ? '' : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

const SVG = 'http://www.w3.org/2000/svg';
export function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value !== undefined && value !== null) el.setAttribute(key, String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export function errorBox(err) {
  // Only the API's message: never a stack trace.
  const message = err && err.message ? err.message : String(err);
  return h('p', { class: 'error', role: 'alert' }, message);
}

export function when(iso) {
  if (!iso) return '';
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? iso : d.toLocaleString();
}

export function fmt(n, digits = 3) {
  return typeof n === 'number' ? Number(n.toFixed(digits)).toString() : String(n ?? '');
}

export function memoryLink(m) {
  return h('a', { href: `#/memory/${encodeURIComponent(m.id)}` }, m.description || (m.content || m.id).slice(0, 80));
}

export function field(label, input, hint) {
  const id = input.id || `f-${Math.random().toString(36).slice(2, 9)}`;
  input.id = id;
  return h('div', { class: 'field' }, h('label', { for: id }, label), input, hint ? h('small', {}, hint) : null);
}

// Splits "a, b  c" into ['a', 'b', 'c'].
export function words(text) {
  return (text || '').split(/[\s,]+/).map((w) => w.trim()).filter(Boolean);
}

export const KINDS = ['episodic', 'semantic', 'working', 'document', 'procedural', 'core'];

// Element.replaceChildren with h's rules (null, false and nested arrays skipped; the native one
// would print "null").
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}
