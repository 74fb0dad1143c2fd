// Building the page: elements are made with h(), which sets text as text,
// never as HTML, so that nothing a function prints or a user names can
// become markup.

// h makes an element. attrs: class, on<event> handlers, other attributes
// (false and null leave them out); children: nodes, strings, numbers,
// arrays of them; null and false are skipped.
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') {
      el.addEventListener(k.slice(2), v);
    } else if (k === 'value') {
      el.value = v;
    } else {
      el.setAttribute(k, v === true ? '' : String(v));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

// replace puts children in place of el's.
export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

// link to a page of the console.
export const link = (hash, ...children) => h('a', { href: hash }, ...children);

export function fmtMs(ms) {
  if (ms === undefined || ms === null) return '—';
  if (ms >= 1000) return (ms / 1000).toFixed(ms >= 10000 ? 1 : 2) + ' s';
  if (ms >= 10) return ms.toFixed(0) + ' ms';
  return ms.toFixed(ms >= 1 ? 1 : 2) + ' ms';
}

export function fmtTime(iso) {
  if (!iso) return '—';
  const d = new Date(iso);
  if (isNaN(d)) return iso;
  return d.toLocaleString(undefined, { hour12: false });
}

export function fmtRate(perSecond) {
  if (!perSecond) return '0';
  if (perSecond >= 1) return perSecond.toFixed(1) + '/s';
  const perMinute = perSecond * 60;
  if (perMinute >= 1) return perMinute.toFixed(perMinute >= 10 ? 0 : 1) + '/min';
  return (perMinute * 60).toFixed(perMinute * 60 >= 10 ? 0 : 1) + '/h';
}

export function fmtBytes(n) {
  if (n < 1024) return n + ' B';
  if (n < 1 << 20) return (n / 1024).toFixed(1) + ' KiB';
  return (n / (1 << 20)).toFixed(1) + ' MiB';
}

// badge shows a phase or a status in a colour of its kind.
export function badge(text) {
  const ok = ['Ready', 'Active', 'Succeeded', 'True'];
  const bad = ['Failed', 'Error', 'False'];
  const cls = ok.includes(text) ? 'ok' : bad.includes(text) ? 'bad' : 'wait';
  return h('span', { class: 'badge ' + cls, 'data-phase': text }, text || 'Pending');
}

export function statusBadge(code) {
  const cls = code < 400 ? 'ok' : code < 500 ? 'wait' : 'bad';
  return h('span', { class: 'badge ' + cls }, String(code));
}

// errorBox shows a failed call's message, as the API gave it.
export function errorBox(err) {
  return h('p', { class: 'error', role: 'alert' }, err && err.message ? err.message : String(err));
}

// phasesBar draws an invocation's Server-Timing phases (queue, cold start,
// handler, and the platform's remaining share of the whole) as one bar.
export function phasesBar({ queue = 0, cold = 0, handler = 0, total }) {
  const whole = Math.max(total ?? 0, queue + cold + handler, 0.001);
  const other = Math.max(0, whole - queue - cold - handler);
  const parts = [
    ['queue', 'queue', queue],
    ['cold', 'cold start', cold],
    ['handler', 'handler', handler],
    ['other', 'platform', other],
  ];
  const bar = h('div', { class: 'phases', role: 'img', 'aria-label': parts.map(([, l, v]) => `${l} ${fmtMs(v)}`).join(', ') });
  for (const [cls, label, v] of parts) {
    if (v <= 0) continue;
    const seg = h('span', { class: 'seg ' + cls, title: `${label}: ${fmtMs(v)}` });
    seg.style.width = Math.max(0.5, (100 * v) / whole) + '%';
    bar.append(seg);
  }
  const legend = h('ul', { class: 'legend' },
    parts.map(([cls, label, v]) => h('li', { 'data-phase': cls }, h('span', { class: 'swatch ' + cls }), `${label} ${fmtMs(v)}`)));
  return h('div', { class: 'phases-box' }, bar, legend);
}

// parseServerTiming reads "queue;dur=1.2, cold;dur=0, handler;dur=3".
export function parseServerTiming(header) {
  const out = {};
  for (const part of (header || '').split(',')) {
    const [name, ...params] = part.trim().split(';');
    for (const p of params) {
      const [k, v] = p.trim().split('=');
      if (k === 'dur') out[name] = parseFloat(v);
    }
  }
  return out;
}
