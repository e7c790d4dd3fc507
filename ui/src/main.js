// The single-page app: a sign-in form, then pages chosen by the URL's hash (#/search, #/memory/ID,
// ...). The hash holds only the page and its filters; the token stays in sessionStorage.
import { get, session } from './api.js';
import { errorBox, field, h, fill } from './dom.js';
import { browsePage } from './pages/browse.js';
import { healthPage } from './pages/health.js';
import { memoryPage } from './pages/memory.js';
import { projectMapPage } from './pages/projectmap.js';
import { proposalsPage } from './pages/proposals.js';
import { searchPage } from './pages/search.js';

const PAGES = [
  { path: 'search', title: 'Search', render: searchPage },
  { path: 'browse', title: 'Browse', render: browsePage },
  { path: 'proposals', title: 'Proposals', render: proposalsPage },
  { path: 'project', title: 'Project map', render: projectMapPage },
  { path: 'health', title: 'Health', render: healthPage },
  // The 3D map pulls in three.js: loaded when first opened, so the other pages start fast.
  { path: 'map', title: '3D map', render: async (...args) => (await import('./pages/map3d.js')).map3dPage(...args) },
];
const HIDDEN = [{ path: 'memory', title: 'Memory', render: memoryPage }];

const main = document.getElementById('main');
const top = document.getElementById('top');
const nav = document.getElementById('nav');
let cleanup = null;
let generation = 0;

function parseHash() {
  const raw = window.location.hash.replace(/^#\/?/, '');
  const [pathPart, queryPart] = raw.split('?');
  const [page, ...rest] = pathPart.split('/').filter(Boolean);
  return { page: page || 'search', arg: rest.map(decodeURIComponent).join('/'), params: new URLSearchParams(queryPart || '') };
}

export function navigate(page, arg, params) {
  const query = params && [...params].length ? `?${params}` : '';
  window.location.hash = `#/${page}${arg ? `/${encodeURIComponent(arg)}` : ''}${query}`;
}

// Rewrites the hash's filters without adding a history entry per keystroke.
export function replaceParams(page, params) {
  const query = [...params].length ? `?${params}` : '';
  history.replaceState(null, '', `#/${page}${query}`);
}

function renderNav(current) {
  fill(nav, ...PAGES.map((p) =>
    h('a', { href: `#/${p.path}`, 'aria-current': p.path === current ? 'page' : null }, p.title)));
  const who = document.getElementById('who');
  who.textContent = session.project ? `project: ${session.project}` : 'no project header';
}

async function route() {
  if (cleanup) { try { cleanup(); } catch { /* a page's teardown must not block the next page */ } cleanup = null; }
  const mine = ++generation;
  if (!session.token) { signInPage(); return; }
  top.hidden = false;
  const { page, arg, params } = parseHash();
  const entry = [...PAGES, ...HIDDEN].find((p) => p.path === page) || PAGES[0];
  renderNav(entry.path);
  document.title = `${entry.title} · hypermnesia`;
  const container = h('section', { class: `page page-${entry.path}`, 'aria-labelledby': 'page-title' });
  fill(main, container);
  try {
    const done = await entry.render(container, { arg, params, navigate, replaceParams });
    if (mine !== generation) { if (typeof done === 'function') done(); return; }
    if (typeof done === 'function') cleanup = done;
  } catch (err) {
    if (mine === generation) container.append(errorBox(err));
  }
}

function signInPage() {
  top.hidden = true;
  const token = h('input', { type: 'password', name: 'token', autocomplete: 'current-password', required: true });
  const project = h('input', { type: 'text', name: 'project', placeholder: 'e.g. my-repo', value: '' });
  const status = h('div', { 'aria-live': 'polite' });
  const form = h('form', { class: 'signin', 'aria-labelledby': 'signin-title' },
    h('h1', { id: 'signin-title' }, 'Sign in to hypermnesia'),
    field('Token', token, 'The same bearer token your agents use (HM_AUTH_TOKENS or `hypermnesia token create`). Kept in this tab only.'),
    field('Project (optional)', project, 'Sent as X-Hypermnesia-Project: its scope project:<name> is searched by default.'),
    h('button', { type: 'submit' }, 'Sign in'),
    status);
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    fill(status, h('p', {}, 'Checking the token…'));
    session.signIn(token.value.trim(), project.value.trim());
    try {
      await get('/memories', { limit: 1 });
    } catch (err) {
      session.signOut();
      fill(status, errorBox(err));
      token.focus();
      return;
    }
    if (!window.location.hash || window.location.hash === '#/') window.location.hash = '#/search';
    route();
  });
  fill(main, form);
  token.focus();
}

document.getElementById('signout').addEventListener('click', () => {
  session.signOut();
  window.location.hash = '';
  route();
});
// The hash is the router's, so the skip link moves focus itself instead of changing it.
document.querySelector('.skip').addEventListener('click', (event) => {
  event.preventDefault();
  main.focus();
});
window.addEventListener('hashchange', route);
route();
