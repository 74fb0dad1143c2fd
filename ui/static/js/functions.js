// The functions of a namespace: phase, runtime, URL, and the last hour's
// figures as the server counted them (GET .../stats); a form to create a
// function and upload its code.

import { call, get, paths, q } from './api.js';
import { badge, errorBox, fmtMs, fmtRate, h, link, replace } from './dom.js';

const PAGE = 100;

export async function functionsPage(ctx, ns) {
  const table = h('tbody');
  const status = h('div');
  const pager = h('div', { class: 'pager' });
  let pages = [''];
  let page = 0;

  const load = async () => {
    try {
      const [list, stats, trs] = await Promise.all([
        get(paths.functions(ns) + q({ limit: PAGE, continue: pages[page] })),
        get(paths.stats(ns)),
        get(paths.triggers(ns) + q({ limit: 500 })),
      ]);
      replace(status);
      const byFn = Object.fromEntries(stats.items.map((s) => [s.function, s]));
      const exposed = new Set(trs.items.filter((t) => t.type === 'http' && t.enabled !== false).map((t) => t.function));
      replace(table, list.items.length === 0
        ? h('tr', {}, h('td', { colspan: 10, class: 'muted' }, 'No functions in this namespace yet.'))
        : list.items.map((fn) => row(ns, fn, byFn[fn.name], exposed.has(fn.name))));
      pages = pages.slice(0, page + 1);
      if (list.continue) pages.push(list.continue);
      replace(pager,
        page > 0 ? h('button', { type: 'button', onclick: () => { page--; load(); } }, '← Previous') : null,
        list.continue ? h('button', { type: 'button', onclick: () => { page++; load(); } }, 'Next →') : null);
    } catch (err) {
      replace(status, errorBox(err));
      if (err.status === 401) throw err;
    }
  };

  replace(ctx.main,
    h('h1', {}, 'Functions ', h('span', { class: 'muted' }, `in ${ns}`)),
    status,
    h('table', { class: 'list', id: 'functions' },
      h('thead', {}, h('tr', {},
        ['Name', 'Phase', 'Runtime', 'URL'].map((c) => h('th', {}, c)),
        h('th', { class: 'num', title: 'invocations in the last hour' }, 'Calls (1h)'),
        h('th', { class: 'num' }, 'Rate'),
        h('th', { class: 'num' }, 'Errors'),
        h('th', { class: 'num' }, 'p50'),
        h('th', { class: 'num' }, 'p99'),
        h('th', { class: 'num' }, 'Cold starts'))),
      table),
    pager,
    h('p', { class: 'muted small' }, 'Last hour, as this server counted the invocations; refreshed every 5 s.'),
    await createForm(ns));
  await ctx.every(5000, load);
}

function row(ns, fn, s, exposed) {
  const url = paths.publicURL(ns, fn.name);
  return h('tr', { 'data-function': fn.name },
    h('td', {}, link(`#/ns/${encodeURIComponent(ns)}/fn/${encodeURIComponent(fn.name)}`, fn.name)),
    h('td', {}, badge(fn.status.phase)),
    h('td', {}, fn.runtime),
    h('td', {}, exposed ? h('a', { href: url, target: '_blank', rel: 'noopener' }, location.origin + url) : h('span', { class: 'muted' }, 'not exposed')),
    h('td', { class: 'num', 'data-stat': 'invocations' }, s ? s.invocations : 0),
    h('td', { class: 'num' }, s ? fmtRate(s.rate_per_second) : '—'),
    h('td', { class: 'num' + (s && s.errors ? ' bad-text' : ''), 'data-stat': 'errors' },
      s ? `${s.errors}${s.errors ? ` (${((100 * s.errors) / s.invocations).toFixed(0)}%)` : ''}` : '—'),
    h('td', { class: 'num' }, s ? fmtMs(s.p50_ms) : '—'),
    h('td', { class: 'num' }, s ? fmtMs(s.p99_ms) : '—'),
    h('td', { class: 'num' }, s ? s.cold_starts : '—'));
}

// createForm creates a function, exposes it on /fn when asked, and uploads
// its code: the calls `sless deploy` makes.
async function createForm(ns) {
  let runtimes = [];
  try { runtimes = (await get(paths.runtimes())).items; } catch { /* the form says so on submit */ }
  const out = h('div');
  const form = h('form', {
    id: 'create', onsubmit: async (ev) => {
      ev.preventDefault();
      const f = ev.target.elements;
      const name = f.name.value.trim();
      try {
        await call('POST', paths.functions(ns), { body: { name, runtime: f.runtime.value } });
        if (f.expose.checked) {
          await call('POST', paths.triggers(ns), { body: { name, function: name, type: 'http' } });
        }
        const file = f.code.files[0];
        if (file) await call('POST', paths.fn(ns, name) + '/upload', { body: file, contentType: 'application/zip' });
        location.hash = `#/ns/${encodeURIComponent(ns)}/fn/${encodeURIComponent(name)}`;
      } catch (err) {
        replace(out, errorBox(err));
      }
    },
  },
  h('label', {}, 'Name', h('input', { name: 'name', required: true, maxlength: 63 })),
  h('label', {}, 'Runtime', h('select', { name: 'runtime' }, runtimes.map((r) => h('option', { value: r.name }, r.name)))),
  h('label', {}, 'Code (zip)', h('input', { type: 'file', name: 'code', accept: '.zip,application/zip' })),
  h('label', { class: 'inline' }, h('input', { type: 'checkbox', name: 'expose', checked: true }), ' expose on /fn'),
  h('button', { type: 'submit' }, 'Create'),
  out);
  return h('details', { class: 'card', id: 'new-function' }, h('summary', {}, 'New function'), form);
}
