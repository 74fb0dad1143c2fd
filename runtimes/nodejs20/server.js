'use strict';
// sless runtime wrapper for Node.js 20.
//
// Runs inside every function instance: loads the user's handler once and serves invocations
// over HTTP/1.1 with keep-alive on a unix or TCP socket. The contract is
// modules/runtime/PROTOCOL.md. Built-in modules only.

const fs = require('node:fs');
const http = require('node:http');
const Module = require('node:module');
const net = require('node:net');
const path = require('node:path');
const { AsyncLocalStorage } = require('node:async_hooks');
const { isUtf8 } = require('node:buffer');
const { pathToFileURL } = require('node:url');

const LOG_LIMIT = 64 * 1024; // bytes of per-invocation output kept for X-Sless-Logs
const MAX_HEADER_SIZE = 1 << 20; // request line plus headers; trigger metadata can be large
const HEADERS_TIMEOUT_MS = 60_000; // a client that stalls mid-headers is broken
const MODULE_EXTENSIONS = ['.js', '.mjs', '.cjs'];
const NO_BODY_STATUSES = new Set([204, 304]);
// Response headers the wrapper owns: a handler's values for them are dropped.
const RESERVED_HEADERS = new Set(['content-length', 'transfer-encoding', 'connection']);
const JSON_TYPE = 'application/json';
const HEALTH_PATH = '/_sless/health';
const TEXT_TYPE = 'text/plain; charset=utf-8';
const OCTET_TYPE = 'application/octet-stream';
const NON_ASCII = /[\u007f-\uffff]/g;
// Canonical base64 only, as Python's b64decode(validate=True): Buffer.from would skip bad input.
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

// The output buffer of the invocation whose async context is running (undefined outside one).
const currentLog = new AsyncLocalStorage();

/** Encodes text as a JSON string that is a valid HTTP header value (printable ASCII). */
function headerJSON(text) {
  return JSON.stringify(text).replace(NON_ASCII, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/** Serializes a value as JSON text; undefined (and functions) become null. */
function toJSON(value) {
  const text = JSON.stringify(value);
  return text === undefined ? 'null' : text;
}

// ---------------------------------------------------------------------------------------------
// Output capture

/** What one invocation printed, kept up to LOG_LIMIT bytes. */
class InvocationLog {
  constructor() {
    this.chunks = [];
    this.size = 0; // every byte written, including those beyond the limit
    this.open = true; // cleared once the response is built: later output is the process's
  }

  write(chunk, encoding) {
    const data = typeof chunk === 'string'
      ? Buffer.from(chunk, typeof encoding === 'string' ? encoding : 'utf8')
      : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    if (this.size < LOG_LIMIT) this.chunks.push(data);
    this.size += data.length;
  }

  /** Returns the X-Sless-Logs value, or undefined when nothing was printed. */
  headerValue() {
    if (this.size === 0) return undefined;
    const data = Buffer.concat(this.chunks);
    if (this.size <= LOG_LIMIT) return headerJSON(data.toString('utf8'));
    let cut = LOG_LIMIT;
    while (cut > 0 && cut < data.length && (data[cut] & 0xc0) === 0x80) cut--; // keep UTF-8 whole
    return headerJSON(`${data.toString('utf8', 0, cut)}...[truncated ${this.size - cut} bytes]`);
  }
}

const output = { echo: false };
// Kept before captureStream patches process.stderr: an exception's stack echoes through it.
const realStderrWrite = process.stderr.write.bind(process.stderr);

/**
 * Patches stream.write so that output written while an invocation's async context is active
 * goes to that invocation's log (and to the stream too when echo is on). console.* write
 * through these methods.
 */
function captureStream(stream) {
  const write = stream.write;
  stream.write = function capturedWrite(chunk, encoding, callback) {
    const log = currentLog.getStore();
    if (log === undefined || !log.open) return write.apply(stream, arguments);
    log.write(chunk, encoding);
    if (output.echo) return write.apply(stream, arguments);
    const done = typeof encoding === 'function' ? encoding : callback;
    if (typeof done === 'function') process.nextTick(done);
    return true;
  };
}

// ---------------------------------------------------------------------------------------------
// Invocations

/** The context argument of a handler: who is invoked, by which request, until when. */
class Context {
  #rawQuery;
  #query = undefined;
  #trigger = undefined;

  constructor(fn, req, rawPath, rawQuery) {
    const headers = req.headers;
    this.functionName = fn.name;
    this.namespace = fn.namespace;
    this.invocationId = headers['x-sless-invocation-id'] || '';
    this.method = req.method;
    this.path = decodePath(rawPath);
    this.headers = headers;
    this.deadlineMs = deadlineFrom(headers['x-sless-timeout-ms']);
    this.#rawQuery = rawQuery;
  }

  /** Query parameters, name -> last value (parsed on first use, like trigger). */
  get query() {
    if (this.#query === undefined) this.#query = parseQuery(this.#rawQuery);
    return this.#query;
  }

  /** The decoded X-Sless-Trigger header, {kind: 'http'} when absent or not a JSON object. */
  get trigger() {
    if (this.#trigger === undefined) this.#trigger = parseTrigger(this.headers['x-sless-trigger']);
    return this.#trigger;
  }

  /** The invocation's W3C trace context, for the calls the handler makes ('' when absent). */
  get traceparent() {
    return this.headers.traceparent || '';
  }

  /** The invocation's W3C trace id, 32 hex digits ('' when absent). */
  get traceId() {
    const tp = this.headers.traceparent || '';
    return tp.length >= 55 ? tp.slice(3, 35) : '';
  }

  /** Milliseconds left until the deadline (never negative; Infinity without a deadline). */
  remainingMs() {
    if (this.deadlineMs === null) return Infinity;
    return Math.max(0, this.deadlineMs - Date.now());
  }
}

function decodePath(rawPath) {
  if (!rawPath.includes('%')) return rawPath;
  try {
    return decodeURIComponent(rawPath);
  } catch {
    return rawPath; // a malformed escape stays as the client sent it
  }
}

function parseQuery(rawQuery) {
  const query = {};
  if (rawQuery) {
    for (const [name, value] of new URLSearchParams(rawQuery)) query[name] = value;
  }
  return query;
}

function parseTrigger(value) {
  if (value !== undefined) {
    try {
      const trigger = JSON.parse(value);
      if (trigger !== null && typeof trigger === 'object' && !Array.isArray(trigger)) return trigger;
    } catch {
      // an invalid trigger header falls back to the default
    }
  }
  return { kind: 'http' };
}

/** The deadline (Unix ms) of an invocation served from now on with X-Sless-Timeout-Ms timeout; null without a valid header. */
function deadlineFrom(timeout) {
  if (timeout === undefined || !/^\d+$/.test(timeout)) return null;
  return Date.now() + Number(timeout);
}

/** The handler's event: JSON, else text, else (not UTF-8) the raw Buffer; null when empty. */
function decodeEvent(body) {
  if (body.length === 0) return null;
  if (!isUtf8(body)) return body;
  const text = body.toString('utf8');
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/** Describes a thrown value: its type name, message and stack. */
function describeError(err) {
  if (err === null || (typeof err !== 'object' && typeof err !== 'function')) {
    const message = String(err);
    return { type: 'Error', message, stack: `Error: ${message} (a non-Error value was thrown)\n` };
  }
  let type = typeof err.name === 'string' && err.name ? err.name : 'Error';
  if (type === 'Error') {
    // A subclass that did not set name, or a Node.js system error identified by its code.
    const ctor = err.constructor && err.constructor.name;
    if (ctor && ctor !== 'Error' && ctor !== 'Object') type = ctor;
    else if (typeof err.code === 'string') type = err.code;
  }
  const message = typeof err.message === 'string' ? err.message : String(err);
  const stack = typeof err.stack === 'string' ? `${trimStack(err.stack)}\n` : `${type}: ${message}\n`;
  return { type, message, stack };
}

/** Cuts a stack trace at the first wrapper frame: what called the handler is noise to its author. */
function trimStack(stack) {
  const lines = stack.split('\n');
  const wrapperFrame = lines.findIndex((line, i) => i > 0 && line.includes(__filename));
  return wrapperFrame < 0 ? stack : lines.slice(0, wrapperFrame).join('\n');
}

/**
 * Turns a handler's return value into {status, headers, body}. Text bodies stay strings: Node
 * sends a string body in one write with the head, a Buffer in a second (writev) chunk.
 */
function render(result) {
  if (result !== null && typeof result === 'object' && result.statusCode !== undefined) {
    return renderResponse(result);
  }
  return { status: 200, headers: { 'Content-Type': JSON_TYPE }, body: toJSON(result) };
}

/** A value as a message shows it: as JSON, like the Python wrapper, when it can be. */
function describeValue(value) {
  try {
    const text = JSON.stringify(value);
    if (text !== undefined) return text;
  } catch {
    // a BigInt or a cycle: shown as text
  }
  return String(value);
}

function renderResponse(result) {
  const status = result.statusCode;
  const isInt = Number.isInteger(status);
  if (!isInt || status < 200 || status > 599) {
    const message = `statusCode must be an integer within 200-599, got ${describeValue(status)}`;
    throw isInt ? new RangeError(message) : new TypeError(message);
  }
  let body = result.body;
  let contentType;
  if (body === undefined || body === null) {
    body = '';
  } else if (typeof body === 'string') {
    if (result.isBase64Encoded) {
      if (!BASE64.test(body)) throw new TypeError('the body is not valid base64 (isBase64Encoded is set)');
      body = Buffer.from(body, 'base64');
      contentType = OCTET_TYPE;
    } else {
      contentType = TEXT_TYPE;
    }
  } else if (body instanceof Uint8Array) {
    body = Buffer.from(body.buffer, body.byteOffset, body.byteLength);
    contentType = OCTET_TYPE;
  } else {
    body = toJSON(body);
    contentType = JSON_TYPE;
  }
  const headers = renderHeaders(result.headers);
  if (contentType !== undefined && !Object.keys(headers).some((n) => n.toLowerCase() === 'content-type')) {
    headers['Content-Type'] = contentType;
  }
  return { status, headers, body };
}

/** Validates a handler's headers object and drops the headers the wrapper owns. */
function renderHeaders(given) {
  const headers = {};
  if (given === undefined || given === null) return headers;
  if (typeof given !== 'object' || Array.isArray(given)) throw new TypeError('headers must be an object');
  for (const [name, value] of Object.entries(given)) {
    http.validateHeaderName(name);
    const lower = name.toLowerCase();
    if (RESERVED_HEADERS.has(lower) || lower.startsWith('x-sless-')) continue;
    const values = Array.isArray(value) ? value.map(String) : String(value);
    http.validateHeaderValue(name, values);
    headers[name] = values;
  }
  return headers;
}

/** The 500 response for a thrown value; its stack goes into the log. */
function renderError(err, log) {
  const { type, message, stack } = describeError(err);
  log.write(stack);
  if (output.echo) realStderrWrite(stack);
  return {
    status: 500,
    headers: { 'Content-Type': JSON_TYPE, 'X-Sless-Error': headerJSON(`${type}: ${message}`) },
    body: JSON.stringify({ error: message, type }),
  };
}

/** Sends the response of a finished invocation and closes its log. */
function finish(res, log, startedMs, failed, value) {
  const handlerUs = Math.round((performance.now() - startedMs) * 1000);
  let response;
  if (!failed) {
    try {
      response = render(value);
    } catch (err) { // an unserializable value is an error like any other
      response = renderError(err, log);
    }
  } else {
    response = renderError(value, log);
  }
  log.open = false;
  response.headers['X-Sless-Handler-Us'] = String(handlerUs);
  const logs = log.headerValue();
  if (logs !== undefined) response.headers['X-Sless-Logs'] = logs;
  send(res, response.status, response.headers, response.body);
}

function send(res, status, headers, body) {
  if (NO_BODY_STATUSES.has(status)) {
    res.writeHead(status, headers);
    res.end();
    return;
  }
  headers['Content-Length'] = typeof body === 'string' ? Buffer.byteLength(body) : body.length;
  res.writeHead(status, headers);
  res.end(body);
}

function sendJSON(res, status, value) {
  send(res, status, { 'Content-Type': JSON_TYPE }, JSON.stringify(value));
}

/** Runs one invocation inside its own async context so its output lands in its log. */
function invoke(fn, res, log, event, context) {
  const startedMs = performance.now();
  let result;
  try {
    result = fn.handler(event, context);
  } catch (err) {
    finish(res, log, startedMs, true, err);
    return;
  }
  if (result !== null && (typeof result === 'object' || typeof result === 'function') && typeof result.then === 'function') {
    result.then(
      (value) => finish(res, log, startedMs, false, value),
      (err) => finish(res, log, startedMs, true, err),
    );
  } else {
    finish(res, log, startedMs, false, result);
  }
}

// ---------------------------------------------------------------------------------------------
// Specialization

/** Raised for a malformed specialize request (answered with 400, not 500). */
class SpecializeError extends Error {}

/** Validates the JSON body of POST /_sless/specialize. */
function specializeConfig(body) {
  let config;
  try {
    config = JSON.parse(body.toString('utf8'));
  } catch (err) {
    throw new SpecializeError(`invalid JSON: ${err.message}`);
  }
  if (config === null || typeof config !== 'object' || Array.isArray(config)) {
    throw new SpecializeError('the body must be a JSON object');
  }
  if (typeof config.code_dir !== 'string' || !path.isAbsolute(config.code_dir)) {
    throw new SpecializeError('code_dir must be an absolute path');
  }
  if (typeof config.handler !== 'string' || config.handler === '') {
    throw new SpecializeError('handler must be a non-empty string');
  }
  const env = config.env === undefined || config.env === null ? {} : config.env;
  if (typeof env !== 'object' || Array.isArray(env) || !Object.values(env).every((v) => typeof v === 'string')) {
    throw new SpecializeError('env must be an object of strings');
  }
  const concurrency = config.concurrency === undefined ? 1 : config.concurrency;
  if (!Number.isInteger(concurrency) || concurrency < 1) {
    throw new SpecializeError('concurrency must be a positive integer');
  }
  return {
    codeDir: config.code_dir,
    handler: config.handler,
    env,
    name: String(config.function || ''),
    namespace: String(config.namespace || ''),
  };
}

/** Makes the process look like the function's: environment and working directory. */
function enterCodeDir(codeDir, env) {
  if (env !== null) {
    for (const name of Object.keys(process.env)) delete process.env[name];
    Object.assign(process.env, env);
  }
  process.chdir(codeDir);
  output.echo = ['1', 'true'].includes((process.env.SLESS_ECHO_LOGS || '').toLowerCase());
}

/**
 * Writes the paths (and file: URLs) under codeDir in text relative to it, and drops the lines
 * that name the wrapper (the last entry of a require stack).
 */
function relativePaths(text, codeDir) {
  text = text.split('\n').filter((line) => !line.includes(__filename)).join('\n');
  let real = codeDir;
  try {
    real = fs.realpathSync(codeDir);
  } catch {
    // a code dir that does not exist has no other spelling
  }
  for (const dir of new Set([codeDir, real].map((d) => d.replace(/\/+$/, '')))) {
    for (const prefix of [pathToFileURL(dir).href, dir]) {
      text = text.split(`${prefix}/`).join('').split(prefix).join('.');
    }
  }
  return text;
}

function codedError(message, code) {
  const err = new Error(message);
  err.code = code;
  return err;
}

/**
 * Loads the handler named by spec: "dir/module.export", the module being a file relative to
 * codeDir without its extension (.js, then .mjs, then .cjs).
 */
async function loadHandler(codeDir, spec) {
  const dot = spec.lastIndexOf('.');
  const modulePath = spec.slice(0, dot);
  const exportName = spec.slice(dot + 1);
  if (dot <= 0 || !exportName || modulePath.startsWith('/')
      || modulePath.split('/').some((part) => part === '' || part === '.' || part === '..')) {
    throw codedError(`handler "${spec}" must look like module.export or dir/module.export`, 'ERR_INVALID_HANDLER');
  }
  const base = path.join(codeDir, modulePath);
  const file = MODULE_EXTENSIONS.map((ext) => base + ext).find((f) => fs.existsSync(f));
  if (file === undefined) {
    const names = MODULE_EXTENSIONS.map((ext) => modulePath + ext);
    throw codedError(`cannot find module "${modulePath}" (${names.join(', ')})`, 'MODULE_NOT_FOUND');
  }
  const mod = await loadModule(file);
  let handler = mod[exportName];
  if (handler === undefined && mod.default !== null && typeof mod.default === 'object') {
    handler = mod.default[exportName]; // export default { handle } or a CommonJS module via import()
  }
  const name = path.relative(codeDir, file);
  if (handler === undefined) throw new TypeError(`${name} does not export "${exportName}"`);
  if (typeof handler !== 'function') throw new TypeError(`${name} export "${exportName}" is not a function`);
  return handler;
}

// require() fails on ES modules (or, where it can load them, on those with top-level await).
const ESM_ONLY_CODES = new Set(['ERR_REQUIRE_ESM', 'ERR_REQUIRE_ASYNC_MODULE']);

async function loadModule(file) {
  if (!file.endsWith('.mjs')) {
    try {
      return require(file);
    } catch (err) {
      if (!ESM_ONLY_CODES.has(err.code)) throw err;
    }
  }
  return import(pathToFileURL(file).href);
}

// ---------------------------------------------------------------------------------------------
// HTTP

/** Routes requests: control endpoints under /_sless/, invocations otherwise. */
class App {
  constructor() {
    this.fn = null; // {handler, name, namespace} once specialized
    this.attempted = false; // specialize is accepted once, even when it failed
    this.loading = null; // the specialize in progress, until it is answered
    this.rehearsal = null; // {stop, done} of the rehearsal in the background, until it has ended
  }

  /**
   * Rehearses a cold start in dir in the background (see rehearse), REHEARSAL_DELAY_MS from
   * now: a process wanted at once does not rehearse. The first request other than a health check
   * stops it, and it and the requests after it wait until the rehearsal has undone itself: at
   * most the invocation in flight and the undoing.
   */
  rehearse(dir) {
    let stopped = false;
    let wake;
    const delay = new Promise((resolve) => {
      wake = resolve;
      setTimeout(resolve, REHEARSAL_DELAY_MS);
    });
    const done = delay.then(() => (stopped ? undefined : rehearse(dir, () => stopped))).catch((err) => {
      realStderrWrite(`sless wrapper: rehearsing a cold start failed (${err.message}); this spare's first requests will take longer\n`);
    });
    this.rehearsal = {
      stop: () => {
        stopped = true;
        wake();
      },
      done: done.finally(() => { this.rehearsal = null; }),
    };
  }

  onRequest(req, res) {
    const chunks = [];
    req.on('data', (chunk) => chunks.push(chunk));
    req.on('end', () => {
      const body = chunks.length === 1 ? chunks[0] : Buffer.concat(chunks);
      this.handle(req, res, body);
    });
  }

  handle(req, res, body) {
    const url = req.url;
    const q = url.indexOf('?');
    const rawPath = q < 0 ? url : url.slice(0, q);
    if (this.rehearsal !== null && rawPath !== HEALTH_PATH) {
      this.rehearsal.stop();
      this.rehearsal.done.then(() => this.handle(req, res, body));
      return;
    }
    if (rawPath.startsWith('/_sless/')) {
      this.control(req, res, rawPath, body);
      return;
    }
    if (this.loading !== null) {
      // Sent behind the specialize request (PROTOCOL.md): served once that is answered.
      this.loading.then(() => this.handle(req, res, body));
      return;
    }
    const fn = this.fn;
    if (fn === null) {
      sendJSON(res, 503, { error: 'not specialized' });
      return;
    }
    const context = new Context(fn, req, rawPath, q < 0 ? '' : url.slice(q + 1));
    const log = new InvocationLog();
    currentLog.run(log, invoke, fn, res, log, decodeEvent(body), context);
  }

  control(req, res, rawPath, body) {
    if (rawPath === HEALTH_PATH) {
      if (req.method !== 'GET') sendJSON(res, 405, { error: `${rawPath} accepts GET only` });
      else sendJSON(res, 200, { status: 'ok', specialized: this.fn !== null });
    } else if (rawPath === '/_sless/specialize') {
      if (req.method !== 'POST') sendJSON(res, 405, { error: `${rawPath} accepts POST only` });
      else this.specializeEndpoint(res, body);
    } else {
      sendJSON(res, 404, { error: `unknown control endpoint ${rawPath}` });
    }
  }

  specializeEndpoint(res, body) {
    if (this.attempted) {
      sendJSON(res, 409, { error: 'already specialized' });
      return;
    }
    let config;
    try {
      config = specializeConfig(body);
    } catch (err) {
      sendJSON(res, 400, { error: err.message });
      return;
    }
    this.loading = this.answerSpecialize(res, config).finally(() => { this.loading = null; });
  }

  async answerSpecialize(res, config) {
    try {
      const loadMs = await this.specialize(config, true);
      sendJSON(res, 200, { load_ms: loadMs });
    } catch (err) {
      // The answer reaches the function's callers: it names the function's own files relative
      // to the code dir, never where the platform keeps them.
      const { type, message, stack } = describeError(err);
      const relative = (text) => relativePaths(text, config.codeDir);
      sendJSON(res, 500, { error: relative(message), type, logs: relative(stack) });
    }
  }

  /** Loads the handler; resolves to the load time in milliseconds. */
  async specialize(config, replaceEnv) {
    this.attempted = true;
    const started = performance.now();
    enterCodeDir(config.codeDir, replaceEnv ? config.env : null);
    const handler = await loadHandler(config.codeDir, config.handler);
    this.fn = { handler, name: config.name, namespace: config.namespace };
    return Math.round((performance.now() - started) * 1000) / 1000;
  }
}

// ---------------------------------------------------------------------------------------------
// Rehearsal

const REHEARSAL_MODULE = '_sless_rehearsal';
const REHEARSAL_SOURCE = 'exports.handle = async (event) => ({ message: `Hello, ${event.name}!` });\n';
// Invocations a spare rehearses: V8 compiles a function and tunes its inline caches only once it
// has run a few times, and a warm instance of a sparsely called function would otherwise pay
// for that on each of its first requests (see bench/README.md, "A Node.js spare rehearses").
const REHEARSAL_INVOCATIONS = 50;
const REHEARSAL_IDLE_TIMEOUT_MS = 10_000; // a rehearsal that hangs gives up, and the spare serves
// How long a spare waits before it rehearses: the platform sends a process it started for a cold
// start its specialize right after ready, and that process must not rehearse first.
const REHEARSAL_DELAY_MS = 20;

/** An HTTP/1.1 POST request with a JSON body. */
function httpPost(target, body) {
  return `POST ${target} HTTP/1.1\r\nHost: instance\r\nContent-Type: ${JSON_TYPE}\r\n`
    + `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
}

/**
 * Sends requests on a connection to socketPath, each once the answer of the one before came
 * (the first two together, as the platform sends a cold start's invocation behind its specialize
 * request), until stopped() returns true; resolves once every request sent was answered, rejects
 * at the first answer that is not 200 OK. The answers all carry Content-Length.
 */
function exchange(socketPath, requests, stopped) {
  return new Promise((resolve, reject) => {
    let answered = 0;
    let received = Buffer.alloc(0);
    let sent = 0;
    const send = (count) => {
      conn.write(requests.slice(sent, sent + count).join(''));
      sent += count;
    };
    const end = (err) => {
      conn.removeAllListeners('end');
      conn.destroy();
      if (err === undefined) resolve();
      else reject(err);
    };
    const conn = net.connect(socketPath, () => (stopped() ? end() : send(2)));
    conn.on('error', end);
    conn.on('end', () => end(new Error('the connection closed before every answer came')));
    conn.setTimeout(REHEARSAL_IDLE_TIMEOUT_MS, () => end(new Error('an answer did not come')));
    conn.on('data', (chunk) => {
      received = Buffer.concat([received, chunk]);
      for (;;) {
        const headEnd = received.indexOf('\r\n\r\n');
        if (headEnd < 0) return;
        const head = received.toString('latin1', 0, headEnd);
        const length = /\r\ncontent-length: *(\d+)/i.exec(head);
        const size = headEnd + 4 + (length === null ? 0 : Number(length[1]));
        if (received.length < size) return;
        const status = head.slice(0, head.indexOf('\r\n'));
        if (status !== 'HTTP/1.1 200 OK') {
          end(new Error(`request ${answered + 1} was answered ${status}`));
          return;
        }
        received = received.subarray(size);
        answered++;
        if (answered < sent) continue;
        if (answered === requests.length || stopped()) {
          end();
          return;
        }
        send(1);
      }
    });
  });
}

/**
 * Rehearses a cold start on a throwaway server: specializes it with a hello handler written into
 * dir, then invokes it up to REHEARSAL_INVOCATIONS times over a unix socket in dir, through the
 * code the function's requests will take (node's HTTP server and the wrapper's App), until
 * stopped() returns true. Then it undoes what the specialize did to the process and removes dir.
 * Rejects when the rehearsal failed; skips it when a file is in dir's way (and leaves that alone).
 *
 * The function sees nothing of it: its module leaves the require cache, the main module's
 * children and the module loader's path cache, and the working directory is restored. The
 * environment is left as it is: the rehearsal specializes with a copy of it (and the function's
 * specialize sets the echo setting again).
 */
async function rehearse(dir, stopped) {
  try {
    fs.mkdirSync(dir, 0o700);
  } catch (err) {
    if (err.code === 'EEXIST') return;
    throw err;
  }
  const cwd = process.cwd();
  const file = path.join(dir, `${REHEARSAL_MODULE}.js`);
  const server = createServer(new App());
  try {
    fs.writeFileSync(file, REHEARSAL_SOURCE, { mode: 0o600, flag: 'wx' });
    // Relative to dir: a socket path has at most 107 bytes, and dir's may be longer.
    process.chdir(dir);
    await new Promise((resolve, reject) => {
      server.once('error', reject);
      server.listen('s.sock', resolve);
    });
    if (stopped()) return;
    const config = {
      code_dir: dir, handler: `${REHEARSAL_MODULE}.handle`, env: { ...process.env }, function: '', namespace: '', concurrency: 1,
    };
    const requests = [httpPost('/_sless/specialize', JSON.stringify(config))];
    for (let i = 0; i < REHEARSAL_INVOCATIONS; i++) requests.push(httpPost('/', '{"name":"sless"}'));
    await exchange('s.sock', requests, stopped);
  } finally {
    server.close();
    const loaded = require.cache[file];
    delete require.cache[file];
    if (loaded !== undefined) module.children.splice(module.children.indexOf(loaded), 1);
    const pathCache = Module._pathCache;
    for (const key of Object.keys(pathCache)) {
      if (pathCache[key].startsWith(dir)) delete pathCache[key];
    }
    process.chdir(cwd); // not a directory about to be removed
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

// ---------------------------------------------------------------------------------------------
// Process

function usage(message) {
  process.stderr.write(`server.js: ${message}\n`
    + 'usage: node server.js --listen unix:PATH|tcp:HOST:PORT [--ready-fd N] [--code-dir DIR [--handler module.export]]\n');
  process.exit(2);
}

function parseArgs(argv) {
  const flags = { listen: undefined, 'ready-fd': undefined, 'code-dir': undefined, handler: 'handler.handle' };
  for (let i = 0; i < argv.length; i++) {
    const match = /^--([a-z-]+)(?:=(.*))?$/s.exec(argv[i]);
    if (match === null || !(match[1] in flags)) usage(`unknown argument ${argv[i]}`);
    const value = match[2] !== undefined ? match[2] : argv[++i];
    if (value === undefined) usage(`--${match[1]} needs a value`);
    flags[match[1]] = value;
  }
  if (flags.listen === undefined) usage('--listen is required');
  const sep = flags.listen.indexOf(':');
  const kind = flags.listen.slice(0, sep);
  const address = flags.listen.slice(sep + 1);
  let listen;
  if (kind === 'unix' && address) {
    listen = { path: address };
  } else if (kind === 'tcp' && /^.*:\d+$/.test(address)) {
    const colon = address.lastIndexOf(':');
    listen = { host: address.slice(0, colon).replace(/^\[|\]$/g, ''), port: Number(address.slice(colon + 1)) };
  } else {
    usage(`--listen must be unix:PATH or tcp:HOST:PORT, got ${flags.listen}`);
  }
  let readyFd;
  if (flags['ready-fd'] !== undefined) {
    if (!/^\d+$/.test(flags['ready-fd'])) usage(`invalid --ready-fd ${flags['ready-fd']}`);
    readyFd = Number(flags['ready-fd']);
  }
  return { listen, readyFd, codeDir: flags['code-dir'], handler: flags.handler };
}

/** The specialize config of --code-dir mode, from the command line and the environment. */
function startupConfig(args) {
  const concurrency = process.env.SLESS_CONCURRENCY || '1';
  if (!/^\d+$/.test(concurrency) || Number(concurrency) < 1) {
    throw new SpecializeError(`SLESS_CONCURRENCY must be a positive integer, got "${concurrency}"`);
  }
  return {
    codeDir: path.resolve(args.codeDir),
    handler: args.handler,
    env: null,
    name: process.env.SLESS_FUNCTION || '',
    namespace: process.env.SLESS_NAMESPACE || '',
  };
}

function removeStaleSocket(file) {
  try {
    if (fs.statSync(file).isSocket()) fs.unlinkSync(file);
  } catch (err) {
    if (err.code !== 'ENOENT') throw err;
  }
}

/** The wrapper's HTTP server: every request goes to app. */
function createServer(app) {
  const server = http.createServer({
    maxHeaderSize: MAX_HEADER_SIZE,
    joinDuplicateHeaders: true, // like the Python wrapper: repeated headers joined with ", "
    requireHostHeader: false,
  }, (req, res) => {
    res.sendDate = false; // nobody reads it; formatting it costs time on every response
    app.onRequest(req, res);
  });
  // The platform owns connection lifetimes and deadlines: idle keep-alive connections stay
  // open and a long request body is not cut off.
  server.keepAliveTimeout = 0;
  server.requestTimeout = 0;
  server.headersTimeout = HEADERS_TIMEOUT_MS;
  return server;
}

function listen(app, address, readyFd) {
  const server = createServer(app);
  const onListening = () => {
    if (readyFd !== undefined) {
      fs.writeSync(readyFd, 'ready\n');
      fs.closeSync(readyFd);
    }
  };
  if (address.path !== undefined) {
    removeStaleSocket(address.path);
    server.listen(address.path, onListening);
  } else {
    server.listen(address.port, address.host, onListening);
  }
  const stop = () => {
    server.close();
    if (address.path !== undefined) removeStaleSocket(address.path);
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

/**
 * Logs an error that no invocation can take (thrown from a timer or callback, a rejection nobody
 * handled): to the log of the invocation whose context it came from while that is still open,
 * else to the process's stderr. The process keeps serving: by default Node.js would exit and fail
 * every invocation in flight, and the next one, for an error that concerned none of them.
 */
function logStrayError(what, err) {
  const text = `${what}: ${describeError(err).stack}`;
  const log = currentLog.getStore();
  if (log !== undefined && log.open) {
    log.write(text);
    if (!output.echo) return;
  }
  realStderrWrite(text);
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  captureStream(process.stdout);
  captureStream(process.stderr);
  process.on('uncaughtException', (err) => logStrayError('uncaught exception', err));
  process.on('unhandledRejection', (reason) => logStrayError('unhandled promise rejection', reason));
  const app = new App();
  if (args.codeDir !== undefined) {
    try {
      await app.specialize(startupConfig(args), false);
    } catch (err) {
      realStderrWrite(describeError(err).stack);
      process.exit(1);
    }
  }
  listen(app, args.listen, args.readyFd);
  if (args.codeDir === undefined && args.listen.path !== undefined) {
    // Beside the socket, in the instance's own directory (PROTOCOL.md, "Starting").
    app.rehearse(`${args.listen.path}.rehearsal`);
  }
}

main();
