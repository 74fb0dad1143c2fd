// The REST API, as every page calls it: the token from sessionStorage as
// the bearer token, JSON in and out, and the API's own error message on
// failure.

const TOKEN = 'sless.token';
const WHO = 'sless.whoami';

// ApiError is a failed call: status is the HTTP status, message the API's
// "error".
export class ApiError extends Error {
  constructor(status, message, body) {
    super(message);
    this.status = status;
    this.body = body;
  }
}

// session is the signed-in token, kept for this browser tab only.
export const session = {
  token() { return sessionStorage.getItem(TOKEN); },
  whoami() {
    try { return JSON.parse(sessionStorage.getItem(WHO)); } catch { return null; }
  },
  set(token, whoami) {
    sessionStorage.setItem(TOKEN, token);
    sessionStorage.setItem(WHO, JSON.stringify(whoami));
  },
  clear() {
    sessionStorage.removeItem(TOKEN);
    sessionStorage.removeItem(WHO);
  },
};

// call sends a request and returns the decoded JSON answer (null for none).
// body: an object (sent as JSON), a string or a Blob. raw: return the
// Response itself, whatever its status. token: another token than the
// session's.
export async function call(method, path, { body, contentType, raw, token } = {}) {
  const headers = new Headers();
  const tok = token ?? session.token();
  if (tok) headers.set('Authorization', 'Bearer ' + tok);
  let payload = body;
  if (body !== undefined && typeof body !== 'string' && !(body instanceof Blob)) {
    payload = JSON.stringify(body);
    contentType = 'application/json';
  }
  if (contentType) headers.set('Content-Type', contentType);
  const resp = await fetch(path, { method, headers, body: payload, cache: 'no-store', credentials: 'omit', redirect: 'error' });
  if (raw) return resp;
  const text = await resp.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = null; }
  if (!resp.ok) {
    throw new ApiError(resp.status, (data && data.error) || `${resp.status} ${resp.statusText}`, data);
  }
  return data;
}

export const get = (path, opts) => call('GET', path, opts);

// q builds a query string of the set values of params.
export function q(params) {
  const s = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== '') s.set(k, String(v));
  }
  const str = s.toString();
  return str ? '?' + str : '';
}

const e = encodeURIComponent;

// paths of the API.
export const paths = {
  whoami: () => '/v1/whoami',
  runtimes: () => '/v1/runtimes',
  functions: (ns) => `/v1/namespaces/${e(ns)}/functions`,
  fn: (ns, name) => `/v1/namespaces/${e(ns)}/functions/${e(name)}`,
  stats: (ns) => `/v1/namespaces/${e(ns)}/stats`,
  triggers: (ns) => `/v1/namespaces/${e(ns)}/triggers`,
  trigger: (ns, name) => `/v1/namespaces/${e(ns)}/triggers/${e(name)}`,
  jobs: (ns) => `/v1/namespaces/${e(ns)}/jobs`,
  job: (ns, name) => `/v1/namespaces/${e(ns)}/jobs/${e(name)}`,
  invocation: (ns, id) => `/v1/namespaces/${e(ns)}/invocations/${e(id)}`,
  publicURL: (ns, name) => `/fn/${e(ns)}/${e(name)}`,
};
