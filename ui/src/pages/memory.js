import { get } from '../api.js';
import { errorBox, fmt, h, memoryLink, when } from '../dom.js';

// One memory: its content and metadata, the supersede chain it belongs to, every version of it (and
// of the memories before and after it on the chain), what it rests on and what rests on it, and
// every raw-log record behind it (the records `hypermnesia why` lists, from the same API).
export async function memoryPage(root, { arg }) {
  const id = arg;
  root.append(h('h1', { id: 'page-title' }, 'Memory'));
  const memory = await get(`/memories/${encodeURIComponent(id)}`);
  if (!memory) {
    root.append(h('p', { class: 'error', role: 'alert' }, `No memory ${id} in your scopes.`));
    return;
  }
  root.querySelector('h1').textContent = memory.description || 'Memory';
  const [lineage, evidence, record, provenance] = await Promise.allSettled([
    get(`/memories/${encodeURIComponent(id)}/lineage`),
    get(`/memories/${encodeURIComponent(id)}/evidence`),
    // A memory made from a raw record shares its id; others answer 404, which is not an error here.
    get(`/records/${encodeURIComponent(id)}`),
    get(`/memories/${encodeURIComponent(id)}/provenance`),
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
        : h('p', { class: 'muted' }, 'Never superseded: no other memory is on its chain (its versions are below).');
    }),
    section('Versions', 'Every version along the chain, oldest first: how it was written and each change in place (an update, a save merged into it), with its text then.',
      lineage, (data) => versions(data.versions || [], memory.id)),
    section('Evidence', 'What this memory rests on (premises) and what rests on it (derived conclusions).', evidence, (data) => h('div', { class: 'two' },
      h('div', {}, h('h3', {}, `Premises (${(data.premises || []).length})`), related(data.premises)),
      h('div', {}, h('h3', {}, `Derived (${(data.derived || []).length})`), related(data.derived)))),
    rawRecords(record, provenance));
}

// What a version shows in place of a text it cannot show.
const NO_TEXT = {
  purged: 'text purged',
  deleted: 'memory deleted: its text is kept for audit only',
};

function versions(rows, currentId) {
  if (!rows.length) return h('p', { class: 'muted' }, 'No versions in the raw log.');
  return h('table', { class: 'grid versions' },
    h('thead', {}, h('tr', {}, ['#', 'When', 'Author', 'How', 'Memory', 'Description', 'Content'].map((t) => h('th', { scope: 'col' }, t)))),
    h('tbody', {}, rows.map((v) => {
      const unreadable = v.text !== 'present' ? NO_TEXT[v.text] || v.text : 'not readable: carried over from a purged version';
      const text = (value) => (value === null ? h('em', { class: 'muted' }, unreadable) : value);
      const how = [v.operation, v.reason ? ` (${v.reason})` : '', v.changed.length ? ` · changed ${v.changed.join(', ')}` : ''];
      return h('tr', { class: v.text === 'present' ? null : v.text, dataset: { version: v.version, seq: v.seq, memory: v.memory_id, text: v.text } },
        h('td', {}, v.version), h('td', {}, when(v.at)), h('td', {}, v.author), h('td', {}, how),
        h('td', {}, v.memory_id === currentId ? 'this one' : h('a', { href: `#/memory/${encodeURIComponent(v.memory_id)}` }, v.memory_id.slice(0, 8))),
        h('td', { class: 'description' }, text(v.description)), h('td', { class: 'content' }, text(v.content)));
    })));
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

function rawRecords(record, provenance) {
  const parts = [];
  if (record.status === 'fulfilled' && record.value) {
    parts.push(h('h3', {}, 'The record this memory was made from'), h('pre', { class: 'json' }, JSON.stringify(record.value, null, 2)));
  }
  if (provenance.status === 'fulfilled') {
    const data = provenance.value;
    const rows = data.records || [];
    parts.push(h('h3', {}, `Raw-log records (${rows.length})`), recordTable(rows, 'records'));
    if ((data.mentioned_by || []).length) {
      parts.push(h('h3', {}, `Records of other memories that name it (${data.mentioned_by.length})`), recordTable(data.mentioned_by, 'mentions'));
    }
    parts.push(h('p', { class: data.all_verify ? 'muted' : 'error' }, data.all_verify ? 'Every record verifies.' : 'Some records do not verify.'));
  } else {
    parts.push(errorBox(provenance.reason));
  }
  return h('section', { class: 'panel' }, h('h2', {}, 'Raw log'),
    h('p', { class: 'muted' }, 'Every record about this memory, as hypermnesia why lists them; each record hash chains to the one before.'), parts);
}

function recordTable(rows, name) {
  if (!rows.length) return h('p', { class: 'muted' }, 'No records.');
  return h('table', { class: `grid ${name}` },
    h('thead', {}, h('tr', {}, ['Seq', 'Operation', 'Kind', 'Author', 'When', 'Hash', 'Verifies', 'Text'].map((t) => h('th', { scope: 'col' }, t)))),
    h('tbody', {}, rows.map((r) => h('tr', { dataset: { seq: r.seq, id: r.id } },
      h('td', {}, r.seq), h('td', {}, r.operation), h('td', {}, r.kind), h('td', {}, r.author), h('td', {}, when(r.created_at)),
      h('td', {}, h('code', { title: r.record_hash }, r.record_hash.slice(0, 16))), h('td', {}, r.verifies ? 'yes' : 'NO'),
      h('td', {}, r.text_purged ? 'purged' : 'present')))));
}
