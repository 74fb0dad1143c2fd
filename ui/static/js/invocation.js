// One invocation: what was asked and answered, how it ended, what caused
// it, the handler's logs, and its phases (queue, cold start, handler) as a
// bar, so that a slow cold start shows at a glance.

import { get, paths } from './api.js';
import { errorBox, fmtBytes, fmtMs, fmtTime, h, link, phasesBar, replace, statusBadge } from './dom.js';

export async function invocationPage(ctx, ns, id) {
  const r = await get(paths.invocation(ns, id));
  const nsHash = `#/ns/${encodeURIComponent(ns)}`;
  const fnHash = `${nsHash}/fn/${encodeURIComponent(r.function)}`;
  const rows = [
    ['function', link(fnHash, r.function)],
    ['status', statusBadge(r.status_code)],
    ['trigger', r.trigger_kind + (r.trigger_name ? ` ${r.trigger_name}` : '')],
    ['request', `${r.method} ${r.path} · ${fmtBytes(r.request_bytes)}`],
    ['response', `${r.status_code} · ${fmtBytes(r.response_bytes)}`],
    ['started', fmtTime(r.started_at)],
    ['duration', fmtMs(r.duration_ms)],
    ['cold start', r.cold_start ? fmtMs(r.cold_start_ms) : 'no (a warm instance)'],
    ['trace id', r.trace_id ? h('code', {}, r.trace_id) : '—'],
  ];
  replace(ctx.main,
    h('p', { class: 'crumbs' }, link(nsHash, ns), ' / ', link(fnHash, r.function), ' / ', h('code', {}, r.id)),
    h('h1', {}, 'Invocation ', statusBadge(r.status_code)),
    r.error ? h('div', { id: 'invocation-error' }, errorBox({ message: r.error })) : null,
    h('div', { class: 'cols' },
      h('section', { class: 'card' }, h('h2', {}, 'Summary'), h('dl', { id: 'summary' }, rows.map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]))),
      h('section', { class: 'card', id: 'timing' }, h('h2', {}, 'Where the time went'),
        phasesBar({ queue: r.queue_ms, cold: r.cold_start_ms, handler: r.handler_ms, total: r.duration_ms }),
        h('p', { class: 'muted small' }, 'The Server-Timing phases: waiting for capacity, starting an instance, the handler\'s own time; ',
          '"platform" is the rest of the whole as sless saw it.'))),
    h('section', { class: 'card' }, h('h2', {}, 'Logs'),
      r.logs ? h('pre', { class: 'log', id: 'invocation-logs' }, r.logs) : h('p', { class: 'muted', id: 'invocation-logs' }, 'The handler printed nothing.')),
    h('p', {}, link(fnHash, 'Invoke this function again'), ' · the ledger keeps no payloads; the function page sends a new one.'));
}
