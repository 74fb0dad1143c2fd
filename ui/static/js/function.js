// A function's page: its spec, status and build log (live while it
// builds), triggers with enable/disable in place, jobs, "invoke" with a
// JSON payload, its invocations (filtered, newest first, paged, live) and
// its handlers' logs followed as `sless logs -f` does.

import { call, get, paths, q } from './api.js';
import {
  badge, errorBox, fmtMs, fmtTime, h, link, parseServerTiming, phasesBar, replace, statusBadge,
} from './dom.js';

const INVOCATIONS_PAGE = 20;

export async function functionPage(ctx, ns, name) {
  const nsHash = `#/ns/${encodeURIComponent(ns)}`;
  const head = h('div');
  const lastError = h('div', { id: 'last-error' });
  const spec = h('div');
  const build = h('div');
  const trs = h('div');
  const jobs = h('div');
  const invs = h('div');
  replace(ctx.main,
    h('p', { class: 'crumbs' }, link(nsHash, ns), ' / ', name),
    head,
    lastError,
    h('div', { class: 'cols' },
      h('section', { class: 'card', id: 'spec' }, h('h2', {}, 'Spec'), spec),
      h('section', { class: 'card', id: 'status' }, h('h2', {}, 'Status and build'), build)),
    h('section', { class: 'card', id: 'invoke' }, h('h2', {}, 'Invoke'), invokeForm(ns, name)),
    h('section', { class: 'card', id: 'triggers' }, h('h2', {}, 'Triggers'), trs),
    h('section', { class: 'card', id: 'jobs' }, h('h2', {}, 'Jobs'), jobs),
    h('section', { class: 'card', id: 'invocations' }, h('h2', {}, 'Invocations'), invs),
    h('section', { class: 'card', id: 'logs' }, h('h2', {}, 'Logs'), logsFollower(ctx, ns, name)));

  let fn = await get(paths.fn(ns, name));
  const drawFn = () => {
    replace(head, h('h1', {}, name, ' ', badge(fn.status.phase)),
      fn.status.message ? h('p', { class: 'message', id: 'phase-message' }, fn.status.message) : null,
      uploadForm(ns, name, (updated) => { fn = updated; drawFn(); }));
    replace(spec, specList(fn));
    replace(build, statusView(fn));
  };
  drawFn();
  // Poll fast while a build may be running, slowly otherwise.
  const building = () => fn.status.phase === 'Building' || (fn.status.phase === 'Pending' && fn.code_sha256);
  ctx.every(() => (building() ? 1000 : 5000), async () => {
    try {
      fn = await get(paths.fn(ns, name));
      drawFn();
    } catch (err) {
      replace(head, h('h1', {}, name), errorBox(err));
      if (err.status === 401) throw err;
    }
  });
  ctx.every(5000, () => drawLastError(lastError, ns, name));
  ctx.every(5000, () => drawTriggers(trs, ns, name));
  ctx.every(5000, () => drawJobs(jobs, ns, name));
  invocationsList(ctx, invs, ns, name);
}

// drawLastError names the function's last failed invocation, if any, with
// a link to why.
async function drawLastError(el, ns, name) {
  let r;
  try {
    r = (await get(paths.fn(ns, name) + '/invocations' + q({ status: 'error', limit: 1 }))).items[0];
  } catch (err) {
    replace(el, errorBox(err));
    if (err.status === 401) throw err;
    return;
  }
  replace(el, r ? h('p', { class: 'last-error' }, 'Last failed call ', fmtTime(r.started_at), ' ', statusBadge(r.status_code),
    r.cold_start ? ` (cold start ${fmtMs(r.cold_start_ms)})` : '', ': ', h('span', { class: 'bad-text' }, (r.error || '').slice(0, 200)), ' ',
    link(`#/ns/${encodeURIComponent(ns)}/inv/${encodeURIComponent(r.id)}`, 'details and logs')) : null);
}

function specList(fn) {
  const rows = [
    ['runtime', fn.runtime], ['handler', fn.handler], ['timeout', `${fn.timeout_seconds} s`], ['memory', `${fn.memory_mb} MB`],
    ['instances', `${fn.min_instances} to ${fn.max_instances}`], ['concurrency', fn.concurrency], ['egress', fn.egress || 'all'],
    ['code', fn.code_sha256 ? h('code', { title: fn.code_sha256 }, fn.code_sha256.slice(0, 12)) : 'none uploaded'],
    ['generation', fn.generation], ['created', fmtTime(fn.created_at)], ['updated', fmtTime(fn.updated_at)],
  ];
  const env = Object.entries(fn.env || {});
  return [
    h('dl', {}, rows.map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)])),
    env.length ? [h('h3', {}, 'Environment'), h('dl', { class: 'env' }, env.map(([k, v]) => [h('dt', {}, k), h('dd', {}, h('code', {}, v))]))] : null,
  ];
}

function statusView(fn) {
  const st = fn.status;
  return [
    h('p', {}, 'Phase ', badge(st.phase), st.updated_at ? h('span', { class: 'muted' }, ` since ${fmtTime(st.updated_at)}`) : null,
      (st.phase === 'Building' || (st.phase === 'Pending' && fn.code_sha256)) ? h('span', { class: 'live' }, ' live') : null),
    (st.conditions || []).length ? h('table', { class: 'list' },
      h('thead', {}, h('tr', {}, ['Condition', 'Status', 'Reason', 'Message', 'Since'].map((c) => h('th', {}, c)))),
      h('tbody', {}, st.conditions.map((c) => h('tr', {},
        h('td', {}, c.type), h('td', {}, badge(c.status)), h('td', {}, c.reason), h('td', {}, c.message || ''),
        h('td', {}, fmtTime(c.last_transition_time)))))) : null,
    h('h3', {}, 'Build log'),
    st.build_log ? h('pre', { class: 'log', id: 'build-log' }, st.build_log) : h('p', { class: 'muted' }, 'No build output.'),
  ];
}

function uploadForm(ns, name, done) {
  const out = h('span');
  return h('form', {
    class: 'upload', onsubmit: async (ev) => {
      ev.preventDefault();
      const file = ev.target.elements.code.files[0];
      if (!file) return;
      try {
        done(await call('POST', paths.fn(ns, name) + '/upload', { body: file, contentType: 'application/zip' }));
        replace(out);
      } catch (err) {
        replace(out, errorBox(err));
      }
    },
  }, h('label', {}, 'New code (zip) ', h('input', { type: 'file', name: 'code', accept: '.zip,application/zip' })),
  h('button', { type: 'submit' }, 'Upload'), out);
}

// invokeForm sends a JSON payload through POST .../invoke and shows the
// answer: status, headers, body, invocation id and the Server-Timing bar.
function invokeForm(ns, name) {
  const out = h('div', { id: 'invoke-result' });
  const payload = h('textarea', { name: 'payload', rows: 4, spellcheck: 'false', 'aria-label': 'JSON payload' });
  payload.value = '{}';
  const form = h('form', {
    onsubmit: async (ev) => {
      ev.preventDefault();
      const text = payload.value.trim();
      if (text) {
        try { JSON.parse(text); } catch (err) {
          replace(out, errorBox({ message: `The payload is not JSON: ${err.message}` }));
          return;
        }
      }
      replace(out, h('p', { class: 'muted' }, 'Invoking…'));
      try {
        const resp = await call('POST', paths.fn(ns, name) + '/invoke', { body: text, contentType: 'application/json', raw: true });
        const body = await resp.text();
        let shown = body;
        try { shown = JSON.stringify(JSON.parse(body), null, 2); } catch { /* not JSON: as it is */ }
        const id = resp.headers.get('X-Sless-Invocation-Id');
        const timing = parseServerTiming(resp.headers.get('Server-Timing'));
        const hdrs = [...resp.headers.entries()];
        const isPlatformError = !resp.ok && !id;
        replace(out,
          h('p', {}, 'Status ', statusBadge(resp.status), ' ',
            id ? ['invocation ', link(`#/ns/${encodeURIComponent(ns)}/inv/${encodeURIComponent(id)}`, h('code', { id: 'invocation-id' }, id))] : null),
          isPlatformError ? errorBox({ message: safeError(body) }) : null,
          'queue' in timing ? phasesBar({ queue: timing.queue, cold: timing.cold, handler: timing.handler }) : null,
          h('h3', {}, 'Body'), h('pre', { class: 'log', id: 'invoke-body' }, shown),
          h('details', {}, h('summary', {}, `Headers (${hdrs.length})`),
            h('dl', { class: 'headers' }, hdrs.map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]))));
      } catch (err) {
        replace(out, errorBox(err));
      }
    },
  }, payload, h('div', {}, h('button', { type: 'submit' }, 'Invoke')), out);
  return form;
}

function safeError(body) {
  try { return JSON.parse(body).error || body; } catch { return body; }
}

async function drawTriggers(el, ns, name) {
  let list;
  try {
    list = (await get(paths.triggers(ns) + q({ limit: 500 }))).items.filter((t) => t.function === name);
  } catch (err) {
    replace(el, errorBox(err));
    if (err.status === 401) throw err;
    return;
  }
  const out = h('div');
  const toggle = async (t) => {
    try {
      // The trigger as read, enabled flipped: a redacted broker URL sent
      // back keeps its password.
      await call('PUT', paths.trigger(ns, t.name), { body: { ...t, enabled: t.enabled === false } });
      await drawTriggers(el, ns, name);
    } catch (err) {
      replace(out, errorBox(err));
    }
  };
  const expose = async () => {
    try {
      await call('POST', paths.triggers(ns), { body: { name, function: name, type: 'http' } });
      await drawTriggers(el, ns, name);
    } catch (err) {
      replace(out, errorBox(err));
    }
  };
  replace(el,
    list.length === 0 ? h('p', { class: 'muted' }, 'No triggers: only the API (invoke above) calls this function.') :
      h('table', { class: 'list' },
        h('thead', {}, h('tr', {}, ['Name', 'Type', 'Detail', 'Phase', 'Last fired', 'Counts', ''].map((c) => h('th', {}, c)))),
        h('tbody', {}, list.map((t) => h('tr', { 'data-trigger': t.name },
          h('td', {}, t.name), h('td', {}, t.type), h('td', {}, detail(ns, t)),
          h('td', {}, badge(t.status.phase), t.status.message ? h('div', { class: 'small muted' }, t.status.message) : null),
          h('td', {}, fmtTime(t.status.last_fired_at)),
          h('td', { class: 'small' }, t.type === 'http' ? '—' : `${t.status.succeeded} ok, ${t.status.failed} failed`),
          h('td', {}, h('button', { type: 'button', class: 'toggle', onclick: () => toggle(t) }, t.enabled === false ? 'Enable' : 'Disable')))))),
    list.some((t) => t.type === 'http') ? null : h('button', { type: 'button', onclick: expose }, 'Expose on /fn'),
    out);
}

function detail(ns, t) {
  switch (t.type) {
    case 'http': {
      const url = paths.publicURL(ns, t.function);
      return [h('a', { href: url, target: '_blank', rel: 'noopener' }, location.origin + url), t.auth === 'token' ? ' (token)' : ''];
    }
    case 'cron': return [h('code', {}, t.schedule), t.timezone ? ` ${t.timezone}` : '',
      t.status.next_fire_at ? h('div', { class: 'small muted' }, `next ${fmtTime(t.status.next_fire_at)}`) : null];
    case 'rabbitmq': return ['queue ', h('code', {}, t.queue)];
    default: return '';
  }
}

async function drawJobs(el, ns, name) {
  let list;
  try {
    list = (await get(paths.jobs(ns) + q({ limit: 500 }))).items.filter((j) => j.function === name);
  } catch (err) {
    replace(el, errorBox(err));
    if (err.status === 401) throw err;
    return;
  }
  const out = h('div');
  const rerun = async (j) => {
    try {
      await call('PUT', paths.job(ns, j.name), { body: { function: j.function, payload: j.payload, run_id: Math.max(j.run_id, j.status.run_id) + 1 } });
      await drawJobs(el, ns, name);
    } catch (err) {
      replace(out, errorBox(err));
    }
  };
  replace(el,
    list.length === 0 ? h('p', { class: 'muted' }, 'No jobs.') :
      h('table', { class: 'list' },
        h('thead', {}, h('tr', {}, ['Name', 'Run', 'Phase', 'Status', 'Finished', 'Invocation', ''].map((c) => h('th', {}, c)))),
        h('tbody', {}, list.map((j) => h('tr', {},
          h('td', {}, j.name), h('td', { class: 'num' }, j.status.run_id || j.run_id),
          h('td', {}, badge(j.status.phase), j.status.error ? h('div', { class: 'small bad-text' }, j.status.error) : null),
          h('td', {}, j.status.status_code ? statusBadge(j.status.status_code) : '—'),
          h('td', {}, fmtTime(j.status.finished_at)),
          h('td', {}, j.status.invocation_id ? link(`#/ns/${encodeURIComponent(ns)}/inv/${encodeURIComponent(j.status.invocation_id)}`, 'open') : '—'),
          h('td', {}, h('button', { type: 'button', onclick: () => rerun(j) }, 'Run again')))))),
    out);
}

// invocationsList shows the function's invocations newest first, with
// filters and pages; the first page refreshes itself.
function invocationsList(ctx, el, ns, name) {
  const state = { status: '', trigger_kind: '', trigger_name: '', pages: [''], page: 0 };
  const body = h('div');
  const filters = h('form', {
    class: 'filters', id: 'invocation-filters', onchange: (ev) => {
      const f = ev.currentTarget.elements;
      Object.assign(state, { status: f.status.value, trigger_kind: f.trigger_kind.value, trigger_name: f.trigger_name.value.trim(), pages: [''], page: 0 });
      load();
    }, onsubmit: (ev) => ev.preventDefault(),
  },
  h('label', {}, 'status ', h('select', { name: 'status' },
    [['', 'all'], ['success', 'success'], ['error', 'errors'], ['500', '500'], ['502', '502'], ['503', '503'], ['504', '504']]
      .map(([v, l]) => h('option', { value: v }, l)))),
  h('label', {}, 'trigger ', h('select', { name: 'trigger_kind' },
    ['', 'http', 'cli', 'cron', 'rabbitmq', 'job'].map((k) => h('option', { value: k }, k || 'any')))),
  h('label', {}, 'trigger name ', h('input', { name: 'trigger_name', size: 12 })));
  replace(el, filters, body);

  const load = async () => {
    const { status, trigger_kind, trigger_name } = state;
    let list;
    try {
      list = await get(paths.fn(ns, name) + '/invocations' +
        q({ limit: INVOCATIONS_PAGE, status, trigger_kind, trigger_name, continue: state.pages[state.page] }));
    } catch (err) {
      replace(body, errorBox(err));
      if (err.status === 401) throw err;
      return;
    }
    state.pages = state.pages.slice(0, state.page + 1);
    if (list.continue) state.pages.push(list.continue);
    replace(body,
      list.items.length === 0 ? h('p', { class: 'muted' }, 'No invocations match.') :
        h('table', { class: 'list', id: 'invocation-list' },
          h('thead', {}, h('tr', {}, ['Started', 'Status', 'Trigger', 'Duration', 'Cold start', 'Error', ''].map((c) => h('th', {}, c)))),
          h('tbody', {}, list.items.map((r) => h('tr', { 'data-invocation': r.id },
            h('td', {}, fmtTime(r.started_at)), h('td', {}, statusBadge(r.status_code)),
            h('td', {}, r.trigger_kind + (r.trigger_name ? ` ${r.trigger_name}` : '')),
            h('td', { class: 'num' }, fmtMs(r.duration_ms)),
            h('td', { class: 'num' }, r.cold_start ? fmtMs(r.cold_start_ms) : 'warm'),
            h('td', { class: 'small bad-text' }, r.error ? r.error.slice(0, 120) : ''),
            h('td', {}, link(`#/ns/${encodeURIComponent(ns)}/inv/${encodeURIComponent(r.id)}`, 'details')))))),
      h('div', { class: 'pager' },
        state.page > 0 ? h('button', { type: 'button', onclick: () => { state.page = 0; load(); } }, '« Newest') : null,
        state.page > 0 ? h('button', { type: 'button', onclick: () => { state.page--; load(); } }, '← Newer') : null,
        list.continue ? h('button', { type: 'button', onclick: () => { state.page++; load(); } }, 'Older →') : null,
        state.page === 0 ? h('span', { class: 'live' }, 'live') : null));
  };
  ctx.every(3000, async () => { if (state.page === 0) await load(); });
  return load;
}

// logsFollower prints the handlers' logs of new invocations as they are
// recorded, oldest first, the way `sless logs -f` polls the ledger.
function logsFollower(ctx, ns, name) {
  const pre = h('pre', { class: 'log', id: 'logs-output' });
  const out = h('div');
  let following = false;
  let last = '';
  const button = h('button', { type: 'button', id: 'follow-logs', onclick: () => {
    following = !following;
    button.textContent = following ? 'Stop following' : 'Follow logs';
    if (following) poll();
  } }, 'Follow logs');
  const poll = async () => {
    if (!following || ctx.signal.aborted) return;
    try {
      const list = await get(paths.fn(ns, name) + '/invocations' + q({ limit: last ? 100 : 5 }));
      // UUIDv7 ids sort by start time.
      const fresh = list.items.filter((r) => r.id > last).reverse();
      for (const r of fresh) {
        const rec = await get(paths.invocation(ns, r.id));
        pre.append(`--- ${fmtTime(rec.started_at)} ${rec.id} HTTP ${rec.status_code} ${fmtMs(rec.duration_ms)}\n`);
        if (rec.logs) pre.append(rec.logs.endsWith('\n') ? rec.logs : rec.logs + '\n');
        if (rec.error && !(rec.logs || '').includes(rec.error)) pre.append(`error: ${rec.error}\n`);
        last = r.id;
      }
      if (fresh.length) pre.scrollTop = pre.scrollHeight;
      replace(out);
    } catch (err) {
      replace(out, errorBox(err));
    }
    setTimeout(poll, 1000);
  };
  return h('div', {}, h('p', {}, button, ' ', h('span', { class: 'muted small' }, 'what handlers print, as new invocations end')), out, pre);
}
