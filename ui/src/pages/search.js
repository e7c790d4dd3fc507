import { post } from '../api.js';
import { errorBox, field, fmt, h, KINDS, memoryLink, when, words, fill } from '../dom.js';

// Recall by meaning, showing why each hit ranked where it did: the blended score, the cosine
// similarity, the signals in the blend, and what was degraded (e.g. lexical-only without the embedder).
export function searchPage(root, { params, replaceParams }) {
  const query = h('input', { type: 'search', name: 'q', value: params.get('q') || '', required: true, placeholder: 'What do you want to recall?' });
  const scope = h('input', { type: 'text', name: 'scope', value: params.get('scope') || '', placeholder: 'default: this project + shared' });
  const kind = h('select', { name: 'kind' }, h('option', { value: '' }, 'any'), KINDS.map((k) => h('option', { value: k, selected: params.get('kind') === k }, k)));
  const tags = h('input', { type: 'text', name: 'tags', value: params.get('tags') || '', placeholder: 'all of these' });
  const k = h('input', { type: 'number', name: 'k', min: 1, max: 100, value: params.get('k') || '10' });
  const results = h('div', { class: 'results', 'aria-live': 'polite' });
  const form = h('form', { class: 'toolbar', role: 'search' },
    field('Query', query), field('Scope', scope), field('Kind', kind), field('Tags', tags), field('Results', k),
    h('button', { type: 'submit' }, 'Search'));

  async function run() {
    const next = new URLSearchParams();
    for (const [name, el] of [['q', query], ['scope', scope], ['kind', kind], ['tags', tags], ['k', k]]) if (el.value) next.set(name, el.value);
    replaceParams('search', next);
    fill(results, h('p', { class: 'muted' }, 'Searching…'));
    const body = { query: query.value, k: Number(k.value) || 10 };
    if (scope.value.trim()) body.scope = scope.value.trim();
    if (kind.value) body.kinds = [kind.value];
    if (words(tags.value).length) body.tags = words(tags.value);
    let answer;
    try {
      answer = await post('/memories/search', body);
    } catch (err) {
      fill(results, errorBox(err));
      return;
    }
    const hits = answer.results || [];
    fill(results,
      answer.degraded && answer.degraded.length
        ? h('p', { class: 'warning', role: 'status' }, `Degraded search: ${answer.degraded.join(', ')}`) : null,
      h('p', { class: 'muted' }, `${hits.length} result${hits.length === 1 ? '' : 's'}`,
        answer.degraded && answer.degraded.length ? '' : ' · nothing degraded',
        answer.depth ? ` · depth: ${answer.depth}${answer.depth_reason ? ` (${answer.depth_reason})` : ''}` : ''),
      h('ol', { class: 'hits' }, hits.map(hit)));
  }

  form.addEventListener('submit', (event) => { event.preventDefault(); run(); });
  root.append(h('h1', { id: 'page-title' }, 'Search'), form, results);
  query.focus();
  if (query.value) run();
}

function hit(m) {
  const signals = [
    ['score', fmt(m.score)],
    ['similarity', fmt(m.similarity)],
    ['entity overlap', fmt(m.entity_overlap)],
    ['lexical match', m.lexical_match ? 'yes' : 'no'],
    ['active task', m.active_task ? 'yes' : 'no'],
    ['topic match', m.topic_match ? 'yes' : 'no'],
  ];
  if (m.hops) signals.push(['hops', m.hops]);
  return h('li', { class: 'hit', dataset: { id: m.id } },
    h('div', { class: 'hit-head' },
      h('span', { class: `kind kind-${m.kind}` }, m.kind || m.type),
      memoryLink(m),
      h('span', { class: 'score', title: 'blended score' }, fmt(m.score))),
    h('p', { class: 'content' }, m.content),
    h('dl', { class: 'signals' }, signals.map(([name, value]) => [h('dt', {}, name), h('dd', {}, value)])),
    h('p', { class: 'meta' }, `${m.scope} · ${m.type} · ${when(m.created_at)}`,
      (m.tags || []).length ? ` · tags: ${m.tags.join(', ')}` : '',
      m.stale ? h('span', { class: 'flag stale' }, ` stale: ${m.stale_because || ''}`) : null,
      m.premise_of ? ` · premise of ${m.premise_of}` : ''),
    (m.degraded || []).length ? h('p', { class: 'warning' }, `degraded: ${m.degraded.join(', ')}`) : null);
}
