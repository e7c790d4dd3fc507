import { get } from '../api.js';
import { errorBox, field, h, KINDS, memoryLink, when, words, fill } from '../dom.js';

const PAGE = 50;

// The index of memories (GET /memories), filtered the way the API can: scope, kind, type, tags,
// archived and stale ones included or not.
export function browsePage(root, { params, replaceParams }) {
  const scope = h('input', { type: 'text', name: 'scope', value: params.get('scope') || '', placeholder: 'default: this project + shared' });
  const kind = h('select', { name: 'kind' }, h('option', { value: '' }, 'any'), KINDS.map((k) => h('option', { value: k, selected: params.get('kind') === k }, k)));
  const type = h('input', { type: 'text', name: 'type', value: params.get('type') || '', placeholder: 'e.g. fact, preference' });
  const tags = h('input', { type: 'text', name: 'tags', value: params.get('tags') || '', placeholder: 'all of these' });
  const archived = h('input', { type: 'checkbox', name: 'archived', checked: params.get('archived') === '1' });
  const stale = h('input', { type: 'checkbox', name: 'stale', checked: params.get('stale') === '1' });
  const list = h('div', { 'aria-live': 'polite' });
  let offset = Number(params.get('offset')) || 0;
  const form = h('form', { class: 'toolbar' },
    field('Scope', scope), field('Kind', kind), field('Type', type), field('Tags', tags),
    h('div', { class: 'field check' }, h('label', {}, archived, ' include archived')),
    h('div', { class: 'field check' }, h('label', {}, stale, ' include stale')),
    h('button', { type: 'submit' }, 'Filter'));

  async function load() {
    const next = new URLSearchParams();
    for (const [name, el] of [['scope', scope], ['kind', kind], ['type', type], ['tags', tags]]) if (el.value) next.set(name, el.value);
    if (archived.checked) next.set('archived', '1');
    if (stale.checked) next.set('stale', '1');
    if (offset) next.set('offset', String(offset));
    replaceParams('browse', next);
    fill(list, h('p', { class: 'muted' }, 'Loading…'));
    let answer;
    try {
      answer = await get('/memories', {
        scope: scope.value.trim(), kind: kind.value || null, type: words(type.value), tags: words(tags.value),
        include_archived: archived.checked, include_stale: stale.checked, limit: PAGE, offset,
      });
    } catch (err) {
      fill(list, errorBox(err));
      return;
    }
    const rows = answer.memories || [];
    const prev = h('button', { type: 'button', disabled: offset === 0 }, '← Newer');
    const more = h('button', { type: 'button', disabled: offset + rows.length >= (answer.total || 0) }, 'Older →');
    prev.addEventListener('click', () => { offset = Math.max(0, offset - PAGE); load(); });
    more.addEventListener('click', () => { offset += PAGE; load(); });
    fill(list,
      h('p', { class: 'muted' }, `${answer.total ?? rows.length} memories${rows.length ? `, showing ${offset + 1}-${offset + rows.length}` : ''}`),
      h('table', { class: 'grid' },
        h('thead', {}, h('tr', {}, ['Description', 'Kind', 'Type', 'Scope', 'Tags', 'Created', 'State'].map((t) => h('th', { scope: 'col' }, t)))),
        h('tbody', {}, rows.map((m) => h('tr', { dataset: { id: m.id } },
          h('td', {}, memoryLink(m)), h('td', {}, h('span', { class: `kind kind-${m.kind}` }, m.kind)), h('td', {}, m.type),
          h('td', {}, m.scope), h('td', {}, (m.tags || []).join(', ')), h('td', {}, when(m.created_at)),
          h('td', {}, [m.archived_at ? 'archived' : '', m.stale ? 'stale' : '', m.superseded_by ? 'superseded' : ''].filter(Boolean).join(', ')))))),
      h('div', { class: 'pager' }, prev, more));
  }

  form.addEventListener('submit', (event) => { event.preventDefault(); offset = 0; load(); });
  root.append(h('h1', { id: 'page-title' }, 'Browse memories'), form, list);
  load();
}
