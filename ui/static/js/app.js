// The console's shell: the header, sign-in, and the router that maps the
// URL's fragment (#/ns/NS/fn/NAME ...) to a page. A page gets a context
// whose signal aborts when the user leaves it, which stops its polling.

import { ApiError, call, paths, session } from './api.js';
import { errorBox, h, replace } from './dom.js';
import { functionsPage } from './functions.js';
import { functionPage } from './function.js';
import { invocationPage } from './invocation.js';

const main = document.getElementById('main');
const nav = document.getElementById('nav');

const routes = [
  [/^#\/signin$/, signinPage],
  [/^#\/ns\/([^/]+)$/, (ctx, ns) => functionsPage(ctx, ns)],
  [/^#\/ns\/([^/]+)\/fn\/([^/]+)$/, (ctx, ns, name) => functionPage(ctx, ns, name)],
  [/^#\/ns\/([^/]+)\/inv\/([^/]+)$/, (ctx, ns, id) => invocationPage(ctx, ns, id)],
];

let current = null;

// context is what a page may use: where to draw, a signal that aborts when
// the page is left, and every() to poll while it is shown.
function context() {
  const ac = new AbortController();
  return {
    main,
    signal: ac.signal,
    abort: () => ac.abort(),
    // every runs fn now and then ms after each run ends, until the page is
    // left; fn's errors are shown by fn itself.
    every(ms, fn) {
      const tick = async () => {
        if (ac.signal.aborted) return;
        try { await fn(); } catch (err) { if (!handleAuth(err)) console.warn(err); }
        if (!ac.signal.aborted) setTimeout(tick, typeof ms === 'function' ? ms() : ms);
      };
      return tick();
    },
  };
}

// handleAuth sends the user to sign in again when the token stopped
// working; it reports whether it did.
export function handleAuth(err) {
  if (err instanceof ApiError && err.status === 401) {
    session.clear();
    sessionStorage.setItem('sless.signin-message', err.message);
    location.hash = '#/signin';
    return true;
  }
  return false;
}

async function route() {
  if (current) current.abort();
  const hash = location.hash || '#/';
  drawNav();
  if (!session.token() && hash !== '#/signin') {
    location.hash = '#/signin';
    return;
  }
  if (hash === '#/' || hash === '#') {
    location.hash = `#/ns/${encodeURIComponent(session.whoami().namespace)}`;
    return;
  }
  const ctx = current = context();
  for (const [re, page] of routes) {
    const m = hash.match(re);
    if (!m) continue;
    replace(main, h('p', { class: 'muted' }, 'Loading…'));
    try {
      await page(ctx, ...m.slice(1).map(decodeURIComponent));
    } catch (err) {
      if (!handleAuth(err) && !ctx.signal.aborted) replace(main, errorBox(err));
    }
    return;
  }
  replace(main, h('h1', {}, 'Not found'), h('p', {}, 'No page here. ', h('a', { href: '#/' }, 'Functions')));
}

function drawNav() {
  const who = session.whoami();
  if (!who || !session.token()) {
    replace(nav);
    return;
  }
  const ns = currentNamespace() || who.namespace;
  const nsField = who.admin
    ? h('form', {
      class: 'ns', onsubmit: (ev) => {
        ev.preventDefault();
        const v = ev.target.elements.ns.value.trim();
        if (v) location.hash = `#/ns/${encodeURIComponent(v)}`;
      },
    }, h('label', {}, 'namespace ', h('input', { name: 'ns', value: ns, size: 12, 'aria-label': 'namespace' })))
    : h('span', { class: 'ns' }, 'namespace ', h('b', {}, who.namespace));
  replace(nav,
    h('a', { href: `#/ns/${encodeURIComponent(ns)}` }, 'Functions'),
    nsField,
    h('a', { href: '/v1/openapi.json', target: '_blank', rel: 'noopener' }, 'API'),
    h('span', { class: 'who', id: 'whoami' }, who.admin ? 'admin token' : who.function ? `invoker of ${who.function}` : `token of ${who.namespace}`),
    h('button', { type: 'button', class: 'link', id: 'signout', onclick: () => { session.clear(); location.hash = '#/signin'; } }, 'Sign out'));
}

function currentNamespace() {
  const m = (location.hash || '').match(/^#\/ns\/([^/]+)/);
  return m ? decodeURIComponent(m[1]) : null;
}

async function signinPage(ctx) {
  const msg = sessionStorage.getItem('sless.signin-message');
  sessionStorage.removeItem('sless.signin-message');
  const out = h('div', { id: 'signin-error' }, msg ? errorBox({ message: msg }) : null);
  const form = h('form', {
    class: 'card signin', id: 'signin', onsubmit: async (ev) => {
      ev.preventDefault();
      const token = ev.target.elements.token.value.trim();
      if (!token) return;
      try {
        const who = await call('GET', paths.whoami(), { token });
        session.set(token, who);
        location.hash = `#/ns/${encodeURIComponent(who.namespace)}`;
      } catch (err) {
        replace(out, errorBox(err));
      }
    },
  },
  h('h1', {}, 'Sign in'),
  h('p', {}, 'Paste an API token: the server\'s own (', h('code', {}, 'sless server'), ' writes it to ',
    h('code', {}, '<data-dir>/api-token'), ') or one made with ', h('code', {}, 'sless token create'),
    '. It is kept in this tab only, until you sign out or close it.'),
  h('label', {}, 'API token', h('input', { type: 'password', name: 'token', autocomplete: 'off', required: true, autofocus: true })),
  h('button', { type: 'submit' }, 'Sign in'),
  out);
  replace(ctx.main, form);
  form.elements.token.focus();
}

window.addEventListener('hashchange', route);
route();
