import { get, patch, post, remove } from '../api.js';
import { errorBox, field, fill, fmt, h, memoryLink, when } from '../dom.js';

// One memory: its content and metadata, what can be done to it (edit, archive or restore, delete),
// the supersede chain it belongs to, every version of it (and of the memories before and after it
// on the chain), what it rests on and what rests on it, and every raw-log record behind it (the
// records `hypermnesia why` lists, from the same API). After a change the page is read again, so
// what it shows is what the API now answers, with the change's result above it.
export async function memoryPage(root, { arg }) {
  const id = arg;
  const render = async (note) => {
    const memory = await load(id);
    fill(root, h('h1', { id: 'page-title' }, memory.description || 'Memory'));
    const path = `/memories/${encodeURIComponent(id)}`;
    const [lineage, evidence, record, provenance] = await Promise.allSettled([
      get(`${path}/lineage`),
      get(`${path}/evidence`),
      // A memory made from a raw record shares its id; others answer 404, which is not an error here.
      get(`/records/${encodeURIComponent(id)}`),
      get(`${path}/provenance`),
    ]);
    root.append(
      h('article', { class: 'memory', dataset: { id: memory.id, archived: memory.archived_at ? '1' : '0' } },
        h('p', { class: 'content big' }, memory.content),
        h('dl', { class: 'meta-grid' }, metadata(memory).map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]))),
      changePanel(root, memory, render, note),
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
  };
  await render(null);
}

// GET /memories/{id} answers live memories only; an archived or superseded one is still on its
// lineage (every stored memory of the chain), so its page can show it and restore it.
async function load(id) {
  const path = `/memories/${encodeURIComponent(id)}`;
  try {
    return await get(path);
  } catch (err) {
    if (err.status !== 404) throw err;
    let chain;
    try { chain = await get(`${path}/lineage`); } catch { throw err; }
    const found = (chain.lineage || []).find((m) => m.id === id);
    if (!found) throw err;
    return found;
  }
}

// Comma-separated tags: a tag may hold spaces.
function parseTags(text) {
  return text.split(',').map((t) => t.trim()).filter(Boolean);
}

// Edit (PATCH /memories/{id}), archive or restore, and delete after a confirmation. Each action
// shows its result or the API's error in the status line; a change re-reads the page.
function changePanel(root, memory, render, note) {
  const path = `/memories/${encodeURIComponent(memory.id)}`;
  const status = h('div', { class: 'action-status', 'aria-live': 'polite' }, note);
  const content = h('textarea', { name: 'content', rows: 4, required: true }, memory.content);
  const description = h('input', { type: 'text', name: 'description', value: memory.description || '' });
  const tags = h('input', { type: 'text', name: 'tags', value: (memory.tags || []).join(', ') });
  const importance = h('input', { type: 'number', name: 'importance', min: 0, max: 10, step: 0.1, value: memory.importance });
  const save = h('button', { type: 'submit', class: 'primary' }, 'Save changes');
  const edit = h('form', { class: 'edit' },
    field('Content', content),
    field('Description', description, 'A one-line summary, used for ranking and listing.'),
    h('div', { class: 'row' },
      field('Tags', tags, 'Comma-separated; empty clears them.'),
      field('Importance', importance, '0 (trivial) to 10 (critical).')),
    save);
  const buttons = [];

  const run = async (button, work) => {
    for (const b of [save, ...buttons]) b.disabled = true;
    fill(status, h('p', { class: 'muted' }, 'Working…'));
    try {
      await work();
    } catch (err) {
      fill(status, errorBox(err));
      for (const b of [save, ...buttons]) b.disabled = false;
      button.focus();
    }
  };
  const done = (...message) => h('p', { class: 'ok', role: 'status' }, ...message);

  edit.addEventListener('submit', (event) => {
    event.preventDefault();
    const changes = {};
    if (content.value !== memory.content) changes.content = content.value;
    if (description.value !== (memory.description || '')) changes.description = description.value;
    const newTags = parseTags(tags.value);
    if (JSON.stringify(newTags) !== JSON.stringify(memory.tags || [])) changes.tags = newTags;
    if (importance.value === '' || Number.isNaN(Number(importance.value))) {
      fill(status, h('p', { class: 'error', role: 'alert' }, 'Importance must be a number from 0 to 10.'));
      return;
    }
    if (Number(importance.value) !== memory.importance) changes.importance = Number(importance.value);
    const names = Object.keys(changes);
    if (!names.length) { fill(status, h('p', { class: 'muted' }, 'Nothing to save: no field changed.')); return; }
    run(save, async () => {
      const answer = await patch(path, changes);
      const stale = answer.description_may_be_stale
        ? h('p', { class: 'warning' }, 'The description was written for the old content: check that it still holds.')
        : null;
      await render([done(`Saved: changed ${names.join(', ')}. The earlier text stays readable as a version below.`), stale]);
    });
  });

  const archived = Boolean(memory.archived_at);
  const toggle = archived
    ? h('button', { type: 'button', class: 'restore' }, 'Restore')
    : h('button', { type: 'button', class: 'archive' }, 'Archive');
  toggle.addEventListener('click', () => run(toggle, async () => {
    await post(`${path}/${archived ? 'restore' : 'archive'}`);
    await render(done(archived
      ? 'Restored: it is back in search and lists.'
      : 'Archived: it has left search and lists (Browse shows it with “archived”); Restore brings it back.'));
  }));

  const confirmBox = h('div', { class: 'confirm', role: 'group', 'aria-label': 'Confirm the delete', hidden: true });
  const askDelete = h('button', { type: 'button', class: 'delete danger' }, 'Delete…');
  const reallyDelete = h('button', { type: 'button', class: 'confirm-delete danger' }, 'Delete for good');
  const cancel = h('button', { type: 'button', class: 'cancel' }, 'Cancel');
  fill(confirmBox,
    h('p', {}, 'Delete this memory for good? It leaves every read and cannot be restored; only the audit log keeps a tombstone. Archive it instead to keep it restorable.'),
    reallyDelete, ' ', cancel);
  askDelete.addEventListener('click', () => { confirmBox.hidden = false; askDelete.hidden = true; cancel.focus(); });
  cancel.addEventListener('click', () => { confirmBox.hidden = true; askDelete.hidden = false; askDelete.focus(); });
  reallyDelete.addEventListener('click', () => run(reallyDelete, async () => {
    const answer = await remove(path);
    fill(root, h('h1', { id: 'page-title' }, 'Memory deleted'),
      h('div', { class: 'action-status', 'aria-live': 'polite' }, answer.deleted
        ? done(`Deleted ${memory.id}. `, h('a', { href: '#/browse' }, 'Back to browsing'))
        : h('p', { class: 'error', role: 'alert' }, `Nothing was deleted: no memory ${memory.id} is in your scopes any more (deleted already?).`)));
  }));
  buttons.push(toggle, askDelete, reallyDelete, cancel);

  return h('section', { class: 'panel changes' }, h('h2', {}, 'Change it'),
    memory.superseded_by
      ? h('p', { class: 'warning' }, 'Superseded: ', h('a', { href: `#/memory/${memory.superseded_by}` }, 'the current version'), ' is the one to change.')
      : null,
    status, edit,
    h('div', { class: 'buttons' }, toggle, ' ', askDelete),
    confirmBox);
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
