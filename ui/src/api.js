// The REST API with the signed-in token. The token lives in sessionStorage only (gone when the tab
// closes, never in a URL); every failure becomes an Error carrying the API's own message.

const TOKEN = 'hm.token';
const PROJECT = 'hm.project';

export const session = {
  get token() { return sessionStorage.getItem(TOKEN) || ''; },
  get project() { return sessionStorage.getItem(PROJECT) || ''; },
  signIn(token, project) {
    sessionStorage.setItem(TOKEN, token);
    if (project) sessionStorage.setItem(PROJECT, project); else sessionStorage.removeItem(PROJECT);
  },
  signOut() { sessionStorage.removeItem(TOKEN); sessionStorage.removeItem(PROJECT); },
};

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

// The UI is served by the gateway itself, so the API is this origin.
function url(path, query) {
  const u = new URL(path, window.location.origin);
  for (const [key, value] of Object.entries(query || {})) {
    if (value === undefined || value === null || value === '') continue;
    for (const v of Array.isArray(value) ? value : [value]) u.searchParams.append(key, String(v));
  }
  return u.pathname + u.search;
}

export async function api(method, path, { query, body } = {}) {
  const headers = { Accept: 'application/json', Authorization: `Bearer ${session.token}` };
  if (session.project) headers['X-Hypermnesia-Project'] = session.project;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let response;
  try {
    response = await fetch(url(path, query), {
      method, headers, body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch {
    throw new ApiError(0, 'UNAVAILABLE', 'the gateway did not answer; is hypermnesia running?');
  }
  let data = null;
  try { data = await response.json(); } catch { data = null; }
  if (!response.ok) {
    const err = data && data.error;
    const message = err && err.message ? err.message : `the gateway answered ${response.status}`;
    if (response.status === 429) {
      const wait = response.headers.get('Retry-After');
      throw new ApiError(429, 'RESOURCE_EXHAUSTED', wait ? `${message} (retry in ${wait} s)` : message);
    }
    throw new ApiError(response.status, err && err.code ? err.code : 'HTTP_ERROR', message);
  }
  return data;
}

export const get = (path, query) => api('GET', path, { query });
export const post = (path, body, query) => api('POST', path, { body, query });
export const patch = (path, body) => api('PATCH', path, { body });
export const remove = (path) => api('DELETE', path);
