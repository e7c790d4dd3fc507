import { get, post } from '../api.js';
import { errorBox, field, h, when, fill } from '../dom.js';

// The Dreamer's queue: each proposal with its rationale and evidence; approve, or reject with a reason.
export function proposalsPage(root, { params, replaceParams }) {
  const status = h('select', { name: 'status' }, ['pending', 'approved', 'rejected', 'all'].map((s) => h('option', { value: s, selected: (params.get('status') || 'pending') === s }, s)));
  const scope = h('input', { type: 'text', name: 'scope', value: params.get('scope') || '', placeholder: 'default: this project + shared' });
  const list = h('div', { 'aria-live': 'polite' });
  const form = h('form', { class: 'toolbar' }, field('Status', status), field('Scope', scope), h('button', { type: 'submit' }, 'Show'));

  async function load() {
    const next = new URLSearchParams();
    if (status.value !== 'pending') next.set('status', status.value);
    if (scope.value) next.set('scope', scope.value);
    replaceParams('proposals', next);
    fill(list, h('p', { class: 'muted' }, 'Loading…'));
    let answer;
    try {
      answer = await get('/proposals', { status: status.value, scope: scope.value.trim() });
    } catch (err) {
      fill(list, errorBox(err));
      return;
    }
    const rows = answer.proposals || [];
    fill(list, rows.length
      ? h('ul', { class: 'cards' }, rows.map((p) => card(p, load)))
      : h('p', { class: 'muted' }, `No ${status.value === 'all' ? '' : `${status.value} `}proposals.`));
  }

  form.addEventListener('submit', (event) => { event.preventDefault(); load(); });
  root.append(h('h1', { id: 'page-title' }, 'Proposals'), form, list);
  load();
}

function card(p, reload) {
  const out = h('div', { 'aria-live': 'polite' });
  const reason = h('input', { type: 'text', name: 'reason', placeholder: 'why not (required to reject)' });
  const approve = h('button', { type: 'button', class: 'primary' }, 'Approve');
  const reject = h('button', { type: 'submit' }, 'Reject');
  const decide = async (decision) => {
    approve.disabled = true; reject.disabled = true;
    try {
      const body = decision === 'reject' ? { reason: reason.value } : undefined;
      const answer = await post(`/proposals/${encodeURIComponent(p.id)}/${decision}`, body);
      fill(out, h('p', { class: 'ok', role: 'status' }, decision === 'approve'
        ? ['Approved', answer.memory_id ? [': wrote ', h('a', { href: `#/memory/${answer.memory_id}` }, 'the memory')] : '', '.']
        : 'Rejected.'));
      setTimeout(reload, 1200);
    } catch (err) {
      fill(out, errorBox(err));
      approve.disabled = false; reject.disabled = false;
    }
  };
  approve.addEventListener('click', () => decide('approve'));
  const rejectForm = h('form', { class: 'inline' }, field('Reason', reason), reject);
  rejectForm.addEventListener('submit', (event) => { event.preventDefault(); decide('reject'); });
  return h('li', { class: 'card proposal', dataset: { id: p.id, status: p.status } },
    h('div', { class: 'hit-head' }, h('span', { class: 'kind' }, p.kind), h('strong', {}, p.description || p.content.slice(0, 80)),
      h('span', { class: 'muted' }, `${p.status} · ${p.scope} · ${p.mode} · ${when(p.created_at)}`)),
    h('p', { class: 'content' }, p.content),
    h('p', {}, h('em', {}, 'Why: '), p.rationale),
    h('p', {}, 'Evidence: ', (p.evidence || []).map((id, i) => [i ? ', ' : '', h('a', { href: `#/memory/${id}` }, id.slice(0, 8))])),
    p.supersedes ? h('p', {}, 'Would supersede ', h('a', { href: `#/memory/${p.supersedes}` }, p.supersedes.slice(0, 8))) : null,
    p.status === 'pending' ? h('div', { class: 'actions' }, approve, rejectForm) : h('p', { class: 'muted' },
      `${p.status}${p.decided_by ? ` by ${p.decided_by}` : ''}${p.decided_at ? ` ${when(p.decided_at)}` : ''}${p.decision_reason ? `: ${p.decision_reason}` : ''}`),
    out);
}
