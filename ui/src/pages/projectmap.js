import { get, session } from '../api.js';
import { errorBox, field, h, when, fill } from '../dom.js';

// A repository's hand-curated map (components, relationships, invariants) and the rules that
// apply to a path in it, each with why it applies.
export function projectMapPage(root, { params, replaceParams }) {
  const repo = h('input', { type: 'text', name: 'repo', value: params.get('repo') || session.project || '', required: true, placeholder: 'e.g. my-repo' });
  const path = h('input', { type: 'text', name: 'path', value: params.get('path') || '', required: true, placeholder: 'e.g. src/app.py' });
  const mapOut = h('div', { 'aria-live': 'polite' });
  const rulesOut = h('div', { 'aria-live': 'polite' });
  const mapForm = h('form', { class: 'toolbar' }, field('Repository', repo), h('button', { type: 'submit' }, 'Show map'));
  const rulesForm = h('form', { class: 'toolbar' }, field('Path in the repository', path), h('button', { type: 'submit' }, 'Rules for this path'));

  function remember() {
    const next = new URLSearchParams();
    if (repo.value) next.set('repo', repo.value);
    if (path.value) next.set('path', path.value);
    replaceParams('project', next);
  }

  async function loadMap() {
    remember();
    fill(mapOut, h('p', { class: 'muted' }, 'Loading…'));
    try {
      fill(mapOut, renderMap(await get(`/map/${encodeURIComponent(repo.value.trim())}`)));
    } catch (err) {
      fill(mapOut, errorBox(err));
    }
  }

  async function loadRules() {
    remember();
    fill(rulesOut, h('p', { class: 'muted' }, 'Loading…'));
    try {
      fill(rulesOut, renderRules(await get(`/map/${encodeURIComponent(repo.value.trim())}/resolve`, { path: path.value.trim() })));
    } catch (err) {
      fill(rulesOut, errorBox(err));
    }
  }

  mapForm.addEventListener('submit', (event) => { event.preventDefault(); loadMap(); });
  rulesForm.addEventListener('submit', (event) => { event.preventDefault(); if (!repo.value.trim()) { repo.focus(); return; } loadRules(); });
  root.append(h('h1', { id: 'page-title' }, 'Project map'), mapForm, mapOut,
    h('section', { class: 'panel' }, h('h2', {}, 'Rules for this path'), rulesForm, rulesOut));
  if (repo.value) loadMap();
  if (repo.value && path.value) loadRules();
}

function renderMap(map) {
  const children = new Map();
  for (const c of map.components || []) {
    const key = c.parent || '';
    if (!children.has(key)) children.set(key, []);
    children.get(key).push(c);
  }
  const tree = (parent) => {
    const rows = children.get(parent) || [];
    if (!rows.length) return null;
    return h('ul', { class: 'tree' }, rows.map((c) => h('li', {},
      h('strong', {}, c.name || c.slug), ` (${c.slug})`, c.responsibility ? ` — ${c.responsibility}` : '',
      h('div', { class: 'muted' }, `globs: ${(c.globs || []).join(', ') || '—'}`, (c.depends_on || []).length ? ` · depends on: ${c.depends_on.join(', ')}` : ''),
      tree(c.slug))));
  };
  return h('div', {},
    h('p', { class: 'muted' }, map.source ? `Loaded ${when(map.source.loaded_at)}${map.source.loaded_by ? ` by ${map.source.loaded_by}` : ''} from ${map.source.name}` : ''),
    h('h2', {}, 'Components'), tree('') || h('p', { class: 'muted' }, 'No components.'),
    h('h2', {}, 'Global invariants'), constraints(map.invariants),
    (map.relationships || []).length ? [h('h2', {}, 'Relationships'),
      h('ul', {}, map.relationships.map((r) => h('li', {}, `${r.from} → ${r.to} (${r.kind})`)))] : null);
}

function constraints(rows, withReason) {
  if (!rows || !rows.length) return h('p', { class: 'muted' }, 'None.');
  return h('ul', { class: 'rules' }, rows.map((c) => h('li', { class: `sev-${c.severity}` },
    h('span', { class: 'badge' }, c.severity), ' ', c.text, h('span', { class: 'muted' }, ` [${c.id}, ${c.kind}]`),
    c.rationale ? h('div', { class: 'muted' }, `why: ${c.rationale}`) : null,
    withReason && c.applies_because ? h('div', { class: 'muted' }, `applies because: ${c.applies_because}`) : null)));
}

function renderRules(answer) {
  return h('div', {},
    h('p', {}, answer.matched
      ? ['Component ', h('strong', {}, answer.component.name || answer.component.slug), ` — ${answer.reason}`]
      : (answer.note || answer.reason || 'No component matches this path; only the global invariants apply.')),
    constraints(answer.constraints, true));
}
