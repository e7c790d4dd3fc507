import { get } from '../api.js';
import { errorBox, fmt, h, memoryLink, when } from '../dom.js';

// One memory: its content and metadata, the supersede chain it belongs to, what it rests on and
// what rests on it, and the raw-log records behind it.
export async function memoryPage(root, { arg }) {
  const id = arg;
  root.append(h('h1', { id: 'page-title' }, 'Memory'));
  const memory = await get(`/memories/${encodeURIComponent(id)}`);
  if (!memory) {
    root.append(h('p', { class: 'error', role: 'alert' }, `No memory ${id} in your scopes.`));
    return;
  }
  root.querySelector('h1').textContent = memory.description || 'Memory';
  const [lineage, evidence, record, records] = await Promise.allSettled([
    get(`/memories/${encodeURIComponent(id)}/lineage`),
    get(`/memories/${encodeURIComponent(id)}/evidence`),
    // A memory made from a raw record shares its id; others answer 404, which is not an error here.
    get(`/records/${encodeURIComponent(id)}`),
    get(`/records/${encodeURIComponent(id)}/lineage`),
  ]);
  root.append(
    h('article', { class: 'memory', dataset: { id: memory.id } },
      h('p', { class: 'content big' }, memory.content),
      h('dl', { class: 'meta-grid' }, metadata(memory).map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]))),
    section('Lineage', 'The supersede chain through this memory, oldest first.', lineage, (data) => {
      const chain = data.lineage || [];
      return chain.length > 1
        ? h('ol', { class: 'chain' }, chain.map((m) => h('li', { class: m.id === memory.id ? 'current' : null },
          m.id === memory.id ? h('strong', {}, m.description || m.id) : memoryLink(m), ` · ${when(m.created_at)}`,
          m.superseded_by ? ' · superseded' : ' · current')))
        : h('p', { class: 'muted' }, 'No other versions: this memory was never superseded.');
    }),
    section('Evidence', 'What this memory rests on (premises) and what rests on it (derived conclusions).', evidence, (data) => h('div', { class: 'two' },
      h('div', {}, h('h3', {}, `Premises (${(data.premises || []).length})`), related(data.premises)),
      h('div', {}, h('h3', {}, `Derived (${(data.derived || []).length})`), related(data.derived)))),
    rawRecords(record, records));
}

function metadata(m) {
  const rows = [
    ['id', h('code', {}, m.id)], ['kind', m.kind], ['type', m.type], ['scope', m.scope], ['owner', m.owner_id],
    ['importance', fmt(m.importance)], ['decay class', m.decay_class], ['tags', (m.tags || []).join(', ') || '—'],
    ['created', when(m.created_at)], ['updated', when(m.updated_at)], ['last accessed', when(m.last_accessed_at)],
  ];
  if (m.archived_at) rows.push(['archived', when(m.archived_at)]);
  if (m.supersedes) rows.push(['supersedes', h('a', { href: `#/memory/${m.supersedes}` }, m.supersedes)]);
  if (m.superseded_by) rows.push(['superseded by', h('a', { href: `#/memory/${m.superseded_by}` }, m.superseded_by)]);
  if (m.stale) rows.push(['stale', m.stale_because || 'yes']);
  if (m.metadata && Object.keys(m.metadata).length) rows.push(['metadata', h('pre', {}, JSON.stringify(m.metadata, null, 2))]);
  return rows;
}

function section(title, about, settled, render) {
  const body = settled.status === 'fulfilled' ? render(settled.value) : errorBox(settled.reason);
  return h('section', { class: 'panel' }, h('h2', {}, title), h('p', { class: 'muted' }, about), body);
}

function related(rows) {
  if (!rows || !rows.length) return h('p', { class: 'muted' }, 'None.');
  return h('ul', {}, rows.map((m) => h('li', {}, memoryLink(m), m.hops > 1 ? ` (${m.hops} hops)` : '',
    m.stale ? h('span', { class: 'flag stale' }, ` stale: ${m.stale_because || ''}`) : null)));
}

function rawRecords(record, records) {
  const parts = [];
  if (record.status === 'fulfilled' && record.value) {
    parts.push(h('h3', {}, 'The record this memory was made from'), h('pre', { class: 'json' }, JSON.stringify(record.value, null, 2)));
  }
  if (records.status === 'fulfilled') {
    const rows = records.value.records || [];
    parts.push(h('h3', {}, `Raw-log records (${rows.length})`), rows.length
      ? h('table', { class: 'grid' },
        h('thead', {}, h('tr', {}, ['#', 'Operation', 'Type', 'Author', 'When', 'Payload'].map((t) => h('th', { scope: 'col' }, t)))),
        h('tbody', {}, rows.map((r) => h('tr', {},
          h('td', {}, r.seq), h('td', {}, r.operation), h('td', {}, r.type), h('td', {}, r.author), h('td', {}, when(r.created_at)),
          h('td', {}, h('details', {}, h('summary', {}, 'show'), h('pre', { class: 'json' }, JSON.stringify(r.payload, null, 2))))))))
      : h('p', { class: 'muted' }, 'No records.'));
  } else if (records.reason && records.reason.status !== 404) {
    parts.push(errorBox(records.reason));
  }
  return h('section', { class: 'panel' }, h('h2', {}, 'Raw log'), parts);
}
