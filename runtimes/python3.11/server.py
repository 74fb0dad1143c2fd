"""sless runtime wrapper for Python 3.11.

Runs inside every function instance: loads the user's handler once and serves invocations over
HTTP/1.1 with keep-alive on a unix or TCP socket. The contract is modules/runtime/PROTOCOL.md.
Standard library only, and uvloop's event loop when the interpreter has it; runs on CPython 3.9
and later. The HTTP server is a small asyncio.Protocol rather than http.server: on the
per-request path that every invocation pays it measured about 1.5 times the throughput of
ThreadingHTTPServer with one keep-alive connection and 4 to 5 times with 32.
"""

import argparse
import asyncio
import base64
import contextvars
import importlib
import importlib.util
import inspect
import json
import marshal
import os
import queue
import re
import signal
import site
import stat
import sys
import threading
import time
import traceback
from collections import deque
from http import HTTPStatus
from json.encoder import c_encode_basestring, c_make_encoder
from urllib.parse import parse_qsl, unquote

try:
    # asyncio's event loop API on libuv, when the interpreter has it: at 32 connections the
    # wrapper serves a request for 1.5-3 µs (about a tenth) less CPU on it than on asyncio's
    # own loop (bench/README.md). Imported here, so that a zygote's instances share it.
    import uvloop
except ImportError:
    uvloop = None

LOG_LIMIT = 64 * 1024  # bytes of per-invocation output kept for X-Sless-Logs
MAX_HEAD = 1 << 20  # request line plus headers
MAX_CHUNK_LINE = 4096  # chunk-size line or trailer field of a chunked body
PAUSE_READING_AT = 1 << 20  # bytes buffered behind a busy request before reading pauses
LARGE_BODY = 64 * 1024  # bodies at least this big are written separately from the head
RECV_BUFFER = 64 * 1024  # bytes read from a connection at a time

_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_HEX = re.compile(rb"[0-9A-Fa-f]{1,15}")
_BAD_VALUE_CHARS = re.compile(r"[\r\n\0]")
_STATUS_LINES = {s.value: b"HTTP/1.1 %d %s\r\n" % (s.value, s.phrase.encode()) for s in HTTPStatus}
_JSON_TYPE = b"Content-Type: application/json\r\n"
_TEXT_TYPE = b"Content-Type: text/plain; charset=utf-8\r\n"
_OCTET_TYPE = b"Content-Type: application/octet-stream\r\n"
_NO_BODY_STATUSES = (204, 304)
# Response headers the wrapper owns: a handler's values for them are dropped.
_RESERVED_HEADERS = frozenset(("content-length", "transfer-encoding", "connection"))
_DEFAULT_TRIGGER = {"kind": "http"}
# Result types that are never awaitable: checking them first skips asyncio.iscoroutine.
_PLAIN_RESULTS = frozenset((dict, list, str, int, float, bool, type(None), bytes))

# The output buffer of the invocation running in the current context (None outside one).
_current_log = contextvars.ContextVar("sless_invocation_log", default=None)


def _not_serializable(value):
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# Compact, strict JSON (NaN and Infinity are not JSON). json.dumps and JSONEncoder.encode build a
# new C encoder on every call, which costs more than encoding a typical small result, so the C
# encoder is built once here. Without circular-reference markers a cyclic value fails with
# RecursionError rather than ValueError.
try:
    _c_encoder = c_make_encoder(None, _not_serializable, c_encode_basestring, None, ":", ",",
                                False, False, False)
except TypeError:  # no C accelerator, or another signature: the slower public API
    _encode_json = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False,
                                    default=_not_serializable).encode
else:
    def _encode_json(value):
        return "".join(_c_encoder(value, 0))


def _status_line(status):
    return _STATUS_LINES.get(status) or b"HTTP/1.1 %d \r\n" % status


def _header_json(text):
    """Encodes text as a JSON string that is a valid HTTP header value (printable ASCII)."""
    return json.dumps(text).replace("\x7f", "\\u007f").encode("ascii")


def _json_response(status, value):
    return status, _JSON_TYPE, _encode_json(value).encode()


# ---------------------------------------------------------------------------------------------
# Output capture


class _InvocationLog:
    """What one invocation printed, kept up to LOG_LIMIT bytes."""

    __slots__ = ("_parts", "_size", "open")

    def __init__(self):
        self._parts = []
        self._size = 0  # every byte written, including those beyond the limit
        self.open = True  # cleared once the response is built: later output is the process's

    def write(self, text):
        data = text.encode("utf-8", "backslashreplace")
        if self._size < LOG_LIMIT:
            self._parts.append(data)
        self._size += len(data)

    def header_value(self):
        """Returns the X-Sless-Logs value, or None when nothing was printed."""
        if not self._size:
            return None
        data = b"".join(self._parts)
        if self._size <= LOG_LIMIT:
            return _header_json(data.decode())
        cut = LOG_LIMIT
        while 0 < cut < len(data) and data[cut] & 0xC0 == 0x80:
            cut -= 1  # do not split a UTF-8 sequence
        text = data[:cut].decode()
        return _header_json(f"{text}...[truncated {self._size - cut} bytes]")


class _CapturingStream:
    """Stands in for sys.stdout/sys.stderr.

    Text written while an invocation runs in the current context goes to that invocation's log
    (and to the real stream too when echo is on); anything else goes to the real stream.
    """

    def __init__(self, real):
        self._real = real
        self.echo = False

    def write(self, text):
        log = _current_log.get()
        if log is None or not log.open:
            return self._real.write(text)
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        log.write(text)
        if self.echo:
            self._real.write(text)
        return len(text)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def flush(self):
        self._real.flush()

    def __getattr__(self, name):
        return getattr(self._real, name)


def _install_capture():
    """Replaces sys.stdout and sys.stderr with capturing proxies; returns the proxies.

    This runs before any user code so that logging handlers, which bind sys.stderr when they are
    created, write through the proxies too.
    """
    proxies = []
    for name in ("stdout", "stderr"):
        real = getattr(sys, name)
        # Instance output is read through a pipe: flush per line so it is not held back.
        real.reconfigure(line_buffering=True)
        proxy = _CapturingStream(real)
        setattr(sys, name, proxy)
        proxies.append(proxy)
    return proxies


def _format_exception(exc):
    """The traceback of exc without the wrapper's (and the import machinery's) leading frames."""
    tb = exc.__traceback__
    while tb is not None and _is_runtime_frame(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def _is_runtime_frame(filename):
    return filename == __file__ or filename == importlib.__file__ or filename.startswith("<frozen ")


def _log_exception(exc, log, echo):
    text = _format_exception(exc)
    log.write(text)
    if echo:
        sys.__stderr__.write(text)


# ---------------------------------------------------------------------------------------------
# Invocations


class Context:
    """The context argument of a handler: who is invoked, by which request, until when."""

    __slots__ = ("function_name", "namespace", "invocation_id", "method", "path", "headers",
                 "deadline_ms", "_raw_query", "_query", "_trigger")

    def __init__(self, function_name, namespace, method, path, raw_query, headers):
        self.function_name = function_name
        self.namespace = namespace
        self.invocation_id = headers.get("x-sless-invocation-id", "")
        self.method = method
        self.path = unquote(path) if "%" in path else path
        self.headers = headers
        self.deadline_ms = _deadline_ms(headers.get("x-sless-timeout-ms"))
        self._raw_query = raw_query
        self._query = None
        self._trigger = None

    @property
    def query(self):
        """Query parameters, name -> last value (parsed on first use)."""
        if self._query is None:
            self._query = dict(parse_qsl(self._raw_query, keep_blank_values=True))
        return self._query

    @property
    def trigger(self):
        """The decoded X-Sless-Trigger header, {"kind": "http"} when absent or invalid."""
        if self._trigger is None:
            self._trigger = _parse_trigger(self.headers.get("x-sless-trigger"))
        return self._trigger

    @property
    def traceparent(self):
        """The invocation's W3C trace context, for the calls the handler makes ("" when absent)."""
        return self.headers.get("traceparent", "")

    @property
    def trace_id(self):
        """The invocation's W3C trace id, 32 hex digits ("" when absent)."""
        tp = self.headers.get("traceparent", "")
        return tp[3:35] if len(tp) >= 55 else ""

    def remaining_ms(self):
        """Milliseconds left until the deadline (never negative; math.inf without a deadline)."""
        if self.deadline_ms is None:
            return float("inf")
        return max(0, self.deadline_ms - int(time.time() * 1000))

    def __repr__(self):
        return (f"Context(function_name={self.function_name!r}, namespace={self.namespace!r}, "
                f"invocation_id={self.invocation_id!r}, method={self.method!r}, "
                f"path={self.path!r}, deadline_ms={self.deadline_ms!r})")


def _deadline_ms(timeout):
    """The deadline, Unix time in milliseconds, of an invocation served from now on with
    X-Sless-Timeout-Ms timeout; None without a valid header."""
    if timeout is None or not (timeout.isascii() and timeout.isdigit()):
        return None
    return int(time.time() * 1000) + int(timeout)


def _parse_trigger(value):
    if value is None:
        return dict(_DEFAULT_TRIGGER)
    try:
        trigger = json.loads(value)
    except ValueError:
        return dict(_DEFAULT_TRIGGER)
    return trigger if isinstance(trigger, dict) else dict(_DEFAULT_TRIGGER)


# The scanner that json.loads runs after matching the whitespace around the value, twice,
# with a regular expression: that matching and the calls around it cost most of the decoding of
# a small event (0.9 µs of a '{}').
_scan_json = json.JSONDecoder().scan_once


def _decode_event(body):
    """The handler's event: JSON, else text, else (not UTF-8) the raw bytes; None when empty."""
    if not body:
        return None
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return body
    try:
        value, end = _scan_json(text, 0)
        if end == len(text):
            return value
    except (StopIteration, ValueError):
        pass
    # Whitespace around the value, or not JSON: json.loads, for the same result as always.
    try:
        return json.loads(text)
    except ValueError:
        return text


def _render(result):
    """Turns a handler's return value into (status, header bytes, body bytes)."""
    if isinstance(result, dict) and "statusCode" in result:
        return _render_response(result)
    return 200, _JSON_TYPE, _encode_json(result).encode()


def _describe_value(value):
    """A value as a message shows it: as JSON, like the Node.js wrapper, when it can be."""
    try:
        return _encode_json(value)
    except (TypeError, ValueError, RecursionError):
        return repr(value)


def _render_response(result):
    status = result["statusCode"]
    is_int = isinstance(status, int) and not isinstance(status, bool)
    if not is_int or not 200 <= status <= 599:
        message = f"statusCode must be an integer within 200-599, got {_describe_value(status)}"
        raise ValueError(message) if is_int else TypeError(message)
    body = result.get("body")
    if body is None:
        body, content_type = b"", None
    elif isinstance(body, str):
        if result.get("isBase64Encoded"):
            body, content_type = base64.b64decode(body, validate=True), _OCTET_TYPE
        else:
            body, content_type = body.encode(), _TEXT_TYPE
    elif isinstance(body, (bytes, bytearray, memoryview)):
        body, content_type = bytes(body), _OCTET_TYPE
    else:
        body, content_type = _encode_json(body).encode(), _JSON_TYPE
    head, has_content_type = _render_headers(result.get("headers"))
    if content_type is not None and not has_content_type:
        head += content_type
    return status, head, body


def _render_headers(headers):
    """Returns (header bytes, whether a Content-Type was given) for a handler's headers dict."""
    if not headers:
        return b"", False
    if not isinstance(headers, dict):
        raise TypeError(f"headers must be a dict, not {type(headers).__name__}")
    lines = []
    has_content_type = False
    for name, value in headers.items():
        if not isinstance(name, str) or not _TOKEN.fullmatch(name):
            raise ValueError(f"invalid header name {name!r}")
        lower = name.lower()
        if lower in _RESERVED_HEADERS or lower.startswith("x-sless-"):
            continue
        has_content_type = has_content_type or lower == "content-type"
        for item in value if isinstance(value, (list, tuple)) else (value,):
            item = item if isinstance(item, str) else str(item)
            if _BAD_VALUE_CHARS.search(item):
                raise ValueError(f"invalid value for header {name}: {item!r}")
            lines.append(f"{name}: {item}\r\n")
    return "".join(lines).encode("latin-1"), has_content_type


def _render_error(exc, log, echo):
    """The 500 response for a handler exception; its traceback goes into the log."""
    _log_exception(exc, log, echo)
    kind, message = type(exc).__name__, str(exc)
    status, head, body = _json_response(500, {"error": message, "type": kind})
    return status, head + b"X-Sless-Error: " + _header_json(f"{kind}: {message}") + b"\r\n", body


def _outcome(result, error, started_ns, log, echo):
    """Builds the response of a finished invocation and closes its log."""
    handler_us = (time.perf_counter_ns() - started_ns) // 1000
    if error is None:
        try:
            status, head, body = _render(result)
        except Exception as exc:  # an unserializable value is an error like any other
            error = exc
    if error is not None:
        status, head, body = _render_error(error, log, echo)
    log.open = False
    head += b"X-Sless-Handler-Us: %d\r\n" % handler_us
    logs = log.header_value()
    if logs is not None:
        head += b"X-Sless-Logs: " + logs + b"\r\n"
    return status, head, body


class _Awaiting:
    """A synchronous handler returned a coroutine (e.g. a decorated async def): await it."""

    __slots__ = ("coro", "started_ns")

    def __init__(self, coro, started_ns):
        self.coro = coro
        self.started_ns = started_ns


class _StandbyWorker:
    """A thread started while the process waits for its code, which becomes the first worker of
    the handler's pool, or ends when the handler needs none.

    The first thread a freshly forked interpreter starts costs about half a millisecond (its
    stack, its thread state, the handshake of Thread.start): started at the first invocation, it
    would add that to every cold start of a synchronous handler with concurrency > 1.
    """

    def __init__(self):
        self._work = queue.SimpleQueue()
        threading.Thread(target=self._wait, name="sless-handler-0", daemon=True).start()

    def _wait(self):
        work = self._work.get()
        if work is not None:
            work()

    def adopt(self, work):
        """Makes the thread run work()."""
        self._work.put(work)

    def release(self):
        """Ends the thread."""
        self._work.put(None)


class _WorkerPool:
    """Threads that run synchronous handler calls, handing the results back to the loop.

    Leaner than ThreadPoolExecutor plus run_in_executor, whose futures and callbacks cost more
    than a small handler call: a job is one queue item, and finished jobs are delivered in
    batches, waking the loop once per batch instead of once per job.
    """

    def __init__(self, loop, size, standby=None):
        self._loop = loop
        self._jobs = queue.SimpleQueue()
        self._finished = deque()
        self._wakeup_pending = False
        # Threads start on demand, up to size: starting them all at once would make the
        # first invocation of a cold instance wait for dozens of thread starts.
        self._size = size
        self._threads = 0  # changed on the loop thread only
        # Workers that have not taken a job since they started or finished their last one.
        self._idle = 0
        self._idle_lock = threading.Lock()
        if standby is not None:
            self._threads = self._idle = 1
            standby.adopt(self._work)

    def submit(self, fn, args, deliver, *deliver_args):
        """Runs fn(*args) on a worker, in a copy of the current context, then calls
        deliver(*deliver_args, result) on the loop with what fn returned or raised."""
        self._jobs.put((contextvars.copy_context(), fn, args, deliver, deliver_args))
        if self._threads < self._size and self._idle < self._jobs.qsize():
            with self._idle_lock:
                self._idle += 1
            threading.Thread(target=self._work, name=f"sless-handler-{self._threads}", daemon=True).start()
            self._threads += 1

    def _work(self):
        while True:
            job = self._jobs.get()
            with self._idle_lock:
                self._idle -= 1
            context, fn, args, deliver, deliver_args = job
            try:
                result = context.run(fn, *args)
            except BaseException as exc:  # SystemExit included: the loop decides what it means
                result = exc
            with self._idle_lock:
                self._idle += 1
            self._finished.append((deliver, deliver_args, result))
            if not self._wakeup_pending:
                # A racing worker may schedule a second wakeup; that one finds nothing to do.
                self._wakeup_pending = True
                self._loop.call_soon_threadsafe(self._deliver_finished)

    def _deliver_finished(self):
        self._wakeup_pending = False  # before draining: a job finishing now schedules a wakeup
        finished = self._finished
        while finished:
            deliver, deliver_args, result = finished.popleft()
            deliver(*deliver_args, result)


class _Placement:
    """Decides where the synchronous calls of a handler with concurrency > 1 run.

    Handing a call to a pool thread and its result back costs two thread switches and two
    handoffs of the GIL, several times what a quick handler's call costs, and the GIL keeps quick
    calls from running in parallel anyway. So once the calls in the pool have been quick, they
    run on the event loop, as with concurrency 1. The first call there that takes SLOW_CALL_NS,
    or an average above LEAVE_NS, sends the later ones back to the pool (the requests that
    arrived during that call waited for it), and each such return doubles the number of pool
    calls before the loop is tried again. Calls on worker threads and on the loop both report
    here; a race between them costs at most one sample.
    """

    ENTER_NS = 50_000  # average call time under which calls move to the loop
    LEAVE_NS = 100_000  # average call time over which they move back to the pool
    SLOW_CALL_NS = 1_000_000  # one call this long on the loop moves them back at once
    FIRST_TRIAL = 64  # pool calls before the first move to the loop
    LAST_TRIAL = 1 << 20  # the most pool calls between two moves

    def __init__(self):
        self.inline = False
        self._avg_ns = self.LEAVE_NS  # moving average of a call's duration
        self._pool_calls = 0  # since the last move to the pool
        self._trial_after = self.FIRST_TRIAL

    def observe(self, ns):
        """Records that a call took ns nanoseconds."""
        self._avg_ns += (ns - self._avg_ns) // 16
        if self.inline:
            if ns >= self.SLOW_CALL_NS or self._avg_ns >= self.LEAVE_NS:
                self.inline = False
                self._pool_calls = 0
                self._trial_after = min(2 * self._trial_after, self.LAST_TRIAL)
        else:
            self._pool_calls += 1
            if self._pool_calls >= self._trial_after and self._avg_ns < self.ENTER_NS:
                self.inline = True


class _Function:
    """The loaded handler and the way its invocations run."""

    def __init__(self, loop, fn, name, namespace, concurrency, echo, standby):
        """standby, when not None, is the _StandbyWorker the pool adopts or releases."""
        self.name = name
        self.namespace = namespace
        self._loop = loop
        self._fn = fn
        self._echo = echo
        self._is_async = inspect.iscoroutinefunction(fn)
        # Synchronous handlers run inline on the loop unless several may run at once and the
        # calls are not quick (see _Placement).
        self._pool = self._placement = None
        if not self._is_async and concurrency > 1:
            self._pool = _WorkerPool(loop, concurrency, standby)
            self._placement = _Placement()
        elif standby is not None:
            standby.release()
        self._tasks = set()  # the loop only keeps weak references to tasks
        # Whether the loop runs coroutines of this function, which need it registered as the
        # running loop; a synchronous handler's calls then hide it around each call.
        self._runs_coroutines = self._is_async
        self._loop_hidden = False
        self._loop_thread = threading.get_ident()
        if not self._is_async:
            loop.set_task_factory(self._new_task)

    def invoke(self, conn, event, context):
        """Runs one invocation; the response is sent on conn now or when it completes."""
        log = _InvocationLog()
        if self._is_async:
            started = time.perf_counter_ns()
            try:
                coro = self._fn(event, context)
            except Exception as exc:  # e.g. a signature that does not take (event, context)
                conn.send(*_outcome(None, exc, started, log, self._echo))
                return
            self._await(conn, log, coro, started)
        elif self._pool is None or self._placement.inline:
            # Hide the running loop, as on a worker thread, so that the handler may use
            # asyncio.run() whatever the concurrency.
            if self._runs_coroutines:
                asyncio._set_running_loop(None)
                try:
                    out = self._call_sync(log, event, context)
                finally:
                    asyncio._set_running_loop(self._loop)
            else:
                self._hide_loop()
                out = self._call_sync(log, event, context)
            if type(out) is tuple:  # the response, as _deliver would send it
                conn.send(*out)
            else:
                self._deliver(conn, log, out)
        else:
            self._pool.submit(self._call_sync, (log, event, context), self._deliver, conn, log)

    def _call_sync(self, log, event, context):
        token = _current_log.set(log)
        started = time.perf_counter_ns()
        try:
            result = self._fn(event, context)
        except Exception as exc:
            return _outcome(None, exc, started, log, self._echo)
        finally:
            _current_log.reset(token)
            if self._placement is not None:
                self._placement.observe(time.perf_counter_ns() - started)
        if type(result) not in _PLAIN_RESULTS and asyncio.iscoroutine(result):
            return _Awaiting(result, started)
        return _outcome(result, None, started, log, self._echo)

    def _deliver(self, conn, log, out):
        if isinstance(out, BaseException):
            # _call_sync turns exceptions into responses; what reaches here (SystemExit from
            # sys.exit() on a worker thread) stops the process, as it does on the loop.
            raise out
        if type(out) is _Awaiting:
            self._runs_coroutines = True
            self._show_loop()
            self._await(conn, log, out.coro, out.started_ns)
        else:
            conn.send(*out)

    def _hide_loop(self):
        """Drops the loop thread's running-loop registration for good (until _show_loop).

        Nothing the wrapper runs on the loop for a synchronous handler asks for the running loop,
        and hiding it around every call instead costs two getpid system calls per call (CPython
        records the process id with each registration).
        """
        if not self._loop_hidden:
            asyncio._set_running_loop(None)
            self._loop_hidden = True

    def _show_loop(self):
        """Registers the loop again (on the loop thread) before it runs a coroutine."""
        if self._loop_hidden:
            asyncio._set_running_loop(self._loop)
            self._loop_hidden = False

    def _new_task(self, loop, coro, **kwargs):
        """The loop's task factory: a task that a call on the loop starts (a handler that
        schedules a coroutine with asyncio.get_event_loop().create_task, say) will need the
        running loop, so from then on the calls hide it around each call only."""
        if _current_log.get() is not None and threading.get_ident() == self._loop_thread:
            self._runs_coroutines = True
            self._show_loop()
        return asyncio.Task(coro, loop=loop, **kwargs)

    def _await(self, conn, log, awaitable, started_ns):
        task = self._loop.create_task(self._complete(conn, log, awaitable, started_ns))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _complete(self, conn, log, awaitable, started_ns):
        _current_log.set(log)  # a task runs in its own copy of the context
        try:
            result = await awaitable
        except (Exception, asyncio.CancelledError) as exc:
            conn.send(*_outcome(None, exc, started_ns, log, self._echo))
        else:
            conn.send(*_outcome(result, None, started_ns, log, self._echo))


# ---------------------------------------------------------------------------------------------
# Specialization


class _SpecializeError(Exception):
    """Raised for a malformed specialize request (answered with 400, not 500)."""


def _specialize_config(body):
    """Validates the JSON body of POST /_sless/specialize."""
    try:
        config = json.loads(body)
    except ValueError as exc:
        raise _SpecializeError(f"invalid JSON: {exc}") from None
    if not isinstance(config, dict):
        raise _SpecializeError("the body must be a JSON object")
    code_dir, handler = config.get("code_dir"), config.get("handler")
    if not isinstance(code_dir, str) or not os.path.isabs(code_dir):
        raise _SpecializeError("code_dir must be an absolute path")
    if not isinstance(handler, str) or not handler:
        raise _SpecializeError("handler must be a non-empty string")
    env = config.get("env") or {}
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise _SpecializeError("env must be an object of strings")
    concurrency = config.get("concurrency", 1)
    if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
        raise _SpecializeError("concurrency must be a positive integer")
    return {
        "code_dir": code_dir,
        "handler": handler,
        "env": env,
        "function": str(config.get("function") or ""),
        "namespace": str(config.get("namespace") or ""),
        "concurrency": concurrency,
    }


def _load_handler(code_dir, spec):
    """Imports the handler named by spec ("module.function", module path with / or .)."""
    module_path, _, attr = spec.rpartition(".")
    parts = module_path.replace("/", ".").split(".")
    if not attr or not all(parts):
        raise ValueError(f"handler {spec!r} must look like module.function or dir/module.function")
    # sys.path now starts with code_dir, but a name the wrapper itself has already imported
    # (json, http, ...) would resolve to that module instead of the user's file.
    if parts[0] in sys.modules:
        raise ImportError(f"the module name {parts[0]!r} clashes with a module the runtime has "
                          f"already imported; rename {parts[0]!r}")
    module = importlib.import_module(".".join(parts))
    fn = getattr(module, attr)
    if not callable(fn):
        raise TypeError(f"{spec} is not callable (it is a {type(fn).__name__})")
    return fn


def _relative(text, code_dir):
    """Writes the paths under code_dir in text relative to it."""
    for directory in dict.fromkeys((code_dir, os.path.realpath(code_dir))):
        directory = directory.rstrip(os.sep)
        text = text.replace(directory + os.sep, "").replace(directory, ".")
    return text


def _enter_code_dir(code_dir, env):
    """Makes the process look like the function's: environment, working dir, module path."""
    if env is not None:
        # Only what differs: clearing os.environ and filling it again took about 0.1 ms of each
        # cold start, in the forked instance's first runs of that code.
        for key in [key for key in os.environ if key not in env]:
            del os.environ[key]
        for key, value in env.items():
            if os.environ.get(key) != value:
                os.environ[key] = value
    os.chdir(code_dir)
    deps = os.path.join(code_dir, ".deps")
    # Of the import system's caches only a finder of these two directories, made before the
    # code was there, could be stale. importlib.invalidate_caches() would also make every
    # finder the wrapper made list its directory again, and copy the pages a forked instance
    # shares with its zygote: a quarter of a millisecond of each cold start.
    for path in (code_dir, deps):
        sys.path_importer_cache.pop(path, None)
    sys.path[:0] = [code_dir, deps]
    if os.path.isdir(deps):
        site.addsitedir(deps)  # processes the .pth files the builder's pip install left


# ---------------------------------------------------------------------------------------------
# HTTP


class _BadRequest(Exception):
    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


class _Request:
    __slots__ = ("method", "target", "headers", "keep_alive", "body")

    def __init__(self, method, target, headers, keep_alive, body):
        self.method = method
        self.target = target
        self.headers = headers
        self.body = body
        self.keep_alive = keep_alive


class _ChunkedBody:
    """Incremental decoder of a chunked request body."""

    __slots__ = ("_body", "_left", "_state")
    _SIZE, _DATA, _DATA_END, _TRAILER = range(4)

    def __init__(self):
        self._body = bytearray()
        self._left = 0
        self._state = self._SIZE

    def feed(self, buf):
        """Consumes what it can from buf; returns the body once the last chunk arrived."""
        pos, end = 0, len(buf)
        try:
            while True:
                if self._state == self._DATA:
                    take = min(self._left, end - pos)
                    self._body += buf[pos:pos + take]
                    pos += take
                    self._left -= take
                    if self._left:
                        return None
                    self._state = self._DATA_END
                elif self._state == self._DATA_END:
                    if end - pos < 2:
                        return None
                    if buf[pos:pos + 2] != b"\r\n":
                        raise _BadRequest(400, "chunk data not followed by CRLF")
                    pos += 2
                    self._state = self._SIZE
                else:
                    eol = buf.find(b"\r\n", pos)
                    if eol < 0:
                        if end - pos > MAX_CHUNK_LINE:
                            raise _BadRequest(400, "chunk line too long")
                        return None
                    line, pos = buf[pos:eol], eol + 2
                    if self._state == self._TRAILER:
                        if not line:  # the empty line after the (ignored) trailer fields
                            return bytes(self._body)
                        continue
                    size = line.split(b";", 1)[0].strip()
                    if not _HEX.fullmatch(size):
                        raise _BadRequest(400, "invalid chunk size")
                    self._left = int(size, 16)
                    self._state = self._DATA if self._left else self._TRAILER
        finally:
            del buf[:pos]


class _RequestParser:
    """Incremental HTTP/1.1 request parser over a connection's receive buffer."""

    __slots__ = ("_head", "_length", "_chunked", "_scan_from", "continue_expected")

    def __init__(self):
        self._reset()

    def _reset(self):
        self._head = None  # (method, target, headers, keep_alive) once the head is complete
        self._length = 0  # Content-Length of the body
        self._chunked = None  # _ChunkedBody of a chunked body
        self._scan_from = 0  # where to resume looking for the end of the head
        self.continue_expected = False  # the client waits for "100 Continue" before the body

    def parse(self, buf):
        """Consumes one complete request from buf and returns it, or None if incomplete."""
        head = self._head
        if head is None:
            head = self._parse_head(buf)
            if head is None:
                return None
        if self._chunked is not None:
            body = self._chunked.feed(buf)
            if body is None:
                return None
        elif self._length:
            if len(buf) < self._length:
                return None
            body = bytes(buf[:self._length])
            del buf[:self._length]
        else:  # the usual GET: nothing to reset but the head
            self._head = None
            self._scan_from = 0
            return _Request(*head, b"")
        self._reset()
        return _Request(*head, body)

    def _parse_head(self, buf):
        while buf.startswith(b"\r\n"):  # stray CRLFs between requests are allowed
            del buf[:2]
        end = buf.find(b"\r\n\r\n", self._scan_from)
        if end < 0:
            if len(buf) > MAX_HEAD:
                raise _BadRequest(431, "request head too large")
            self._scan_from = max(0, len(buf) - 3)
            return None
        if end > MAX_HEAD:
            raise _BadRequest(431, "request head too large")
        lines = buf[:end].decode("latin-1").split("\r\n")
        del buf[:end + 4]
        request_line = lines[0].split(" ")
        if len(request_line) != 3:
            raise _BadRequest(400, "malformed request line")
        method, target, version = request_line
        if version != "HTTP/1.1" and version != "HTTP/1.0":
            raise _BadRequest(505, "unsupported HTTP version")
        headers = {}
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            # name[-1:] is "" for an empty name, and "" is in any string.
            if not colon or name[-1:] in " \t":
                raise _BadRequest(400, "malformed header line")
            name = name.lower()
            if name in headers:
                headers[name] = f"{headers[name]}, {value.strip()}"
            else:
                headers[name] = value.strip()
        connection = headers.get("connection")
        if connection is None:
            keep_alive = version == "HTTP/1.1"
        else:
            keep_alive = _keep_alive(version, connection.lower())
        # Body framing.
        coding = headers.get("transfer-encoding")
        if coding is not None:
            if coding.lower() != "chunked":
                raise _BadRequest(501, "unsupported transfer coding")
            self._chunked = _ChunkedBody()
        else:
            length = headers.get("content-length")
            if length is not None:
                if not (length.isascii() and length.isdigit()):
                    raise _BadRequest(400, "invalid Content-Length")
                self._length = int(length)
        if (self._chunked is not None or self._length) and "expect" in headers:
            self.continue_expected = headers["expect"].lower() == "100-continue"
        self._head = (method, target, headers, keep_alive)
        return self._head


def _keep_alive(version, connection):
    """Whether the connection stays open after a request with this (lower-case) Connection."""
    if version == "HTTP/1.1":
        return "close" not in connection
    return "keep-alive" in connection


class _Connection(asyncio.BufferedProtocol):
    """One client connection: parses requests and answers them one at a time, in order.

    Reads go into a receive buffer that the loop's connections share (the loop fills it and
    calls buffer_updated right away), not into a fresh 256 KiB bytes object per read as
    asyncio.Protocol does: that allocation is an mmap, a page fault and a munmap per request.
    """

    def __init__(self, app, recv):
        self._app = app
        self._recv = recv
        self._transport = None
        self._buf = bytearray()
        self._parser = _RequestParser()
        self._busy = False  # a request is being handled; later bytes wait in _buf
        self._serving = False  # inside _serve_buffered (a synchronous send must not recurse)
        self._paused = False
        self._keep_alive = True
        self._head_only = False

    def connection_made(self, transport):
        self._transport = transport

    def connection_lost(self, exc):
        self._transport = None

    def get_buffer(self, sizehint):
        return self._recv

    def buffer_updated(self, nbytes):
        self._buf += self._recv[:nbytes]
        if not self._busy:
            try:
                self._serve_buffered()
            except SystemExit as exc:  # sys.exit() by a handler on the loop or by the code's import
                self._app.exit(exc)
        elif len(self._buf) > PAUSE_READING_AT and not self._paused:
            self._paused = True
            self._transport.pause_reading()

    def _serve_buffered(self):
        self._serving = True
        try:
            while not self._busy and self._transport is not None and self._buf:
                try:
                    request = self._parser.parse(self._buf)
                except _BadRequest as exc:
                    self._keep_alive = False
                    self._head_only = False
                    self.send(*_json_response(exc.status, {"error": str(exc)}))
                    return
                if request is None:
                    if self._parser.continue_expected:
                        self._parser.continue_expected = False
                        self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                    break
                self._busy = True
                self._keep_alive = request.keep_alive
                self._head_only = request.method == "HEAD"
                self._app.handle(self, request)
        finally:
            self._serving = False
        if self._paused and not self._busy and self._transport is not None:
            self._paused = False
            self._transport.resume_reading()

    def send(self, status, head, body):
        """Writes the response to the current request, then serves any buffered request."""
        transport = self._transport
        self._busy = False
        if transport is None:  # the client went away while the handler ran
            return
        if status in _NO_BODY_STATUSES:
            body = b""
            framing = b""
        else:
            framing = b"Content-Length: %d\r\n" % len(body)
        if self._head_only:
            body = b""
        if not self._keep_alive:
            framing += b"Connection: close\r\n"
        if len(body) < LARGE_BODY:
            transport.write(b"%s%s%s\r\n%s" % (_status_line(status), head, framing, body))
        else:
            transport.write(b"%s%s%s\r\n" % (_status_line(status), head, framing))
            transport.write(body)
        if not self._keep_alive:
            transport.close()
            self._transport = None
        elif not self._serving:
            self._serve_buffered()


class _App:
    """Routes requests: control endpoints under /_sless/, invocations otherwise."""

    def __init__(self, loop, proxies, standby=None):
        """standby is the _StandbyWorker of a process that waits for its code, else None."""
        self._loop = loop
        self._proxies = proxies
        self._standby = standby
        self._function = None
        self._attempted = False  # specialize is accepted once, even when it failed
        self._exiting = False  # a handler called sys.exit(): nothing more is served
        self._control = {
            "/_sless/health": ("GET", self._health),
            "/_sless/specialize": ("POST", self._specialize_endpoint),
        }

    def handle(self, conn, request):
        if self._exiting:
            return  # left unanswered: the process ends before the loop's next round
        path, _, query = request.target.partition("?")
        if path.startswith("/_sless/"):
            conn.send(*self._control_request(path, request))
            return
        function = self._function
        if function is None:
            conn.send(*_json_response(503, {"error": "not specialized"}))
            return
        context = Context(function.name, function.namespace, request.method, path, query,
                          request.headers)
        function.invoke(conn, _decode_event(request.body), context)

    def exit(self, exc):
        """Ends the process with the SystemExit exc, raised where the loop called a protocol.

        asyncio's loop lets it end run_forever, but uvloop's takes it for its transport's fatal
        error and goes on; raised from a callback of the loop's own, it ends run_forever on both.
        Until then, the requests the loop hands over are left unanswered (serve exits with the
        status).
        """
        self._exiting = True
        self._loop.call_soon(_raise, exc)

    def _control_request(self, path, request):
        route = self._control.get(path)
        if route is None:
            return _json_response(404, {"error": f"unknown control endpoint {path}"})
        method, endpoint = route
        if request.method != method:
            return _json_response(405, {"error": f"{path} accepts {method} only"})
        return endpoint(request.body)

    def _health(self, _body):
        return _json_response(200, {"status": "ok", "specialized": self._function is not None})

    def _specialize_endpoint(self, body):
        if self._attempted:
            return _json_response(409, {"error": "already specialized"})
        try:
            config = _specialize_config(body)
        except _SpecializeError as exc:
            return _json_response(400, {"error": str(exc)})
        try:
            load_ms = self.specialize(config, replace_env=True)
        except Exception as exc:
            # The answer reaches the function's callers: it names the function's own files
            # relative to the code dir, never where the platform keeps them.
            code_dir = config["code_dir"]
            return _json_response(500, {"error": _relative(str(exc), code_dir),
                                        "type": type(exc).__name__,
                                        "logs": _relative(_format_exception(exc), code_dir)})
        return _json_response(200, {"load_ms": load_ms})

    def specialize(self, config, replace_env):
        """Loads the handler; returns the load time in milliseconds."""
        self._attempted = True
        started = time.perf_counter()
        _enter_code_dir(config["code_dir"], config["env"] if replace_env else None)
        echo = os.environ.get("SLESS_ECHO_LOGS", "").lower() in ("1", "true")
        for proxy in self._proxies:
            proxy.echo = echo
        fn = _load_handler(config["code_dir"], config["handler"])
        self._function = _Function(self._loop, fn, config["function"], config["namespace"],
                                   config["concurrency"], echo, self._standby)
        self._standby = None
        return round((time.perf_counter() - started) * 1000, 3)


# ---------------------------------------------------------------------------------------------
# Rehearsal

# The code of the rehearsal: a module like a hello handler, and its unchecked hash-based .pyc, as
# the platform's build leaves beside a function's modules. Made once, before a zygote forks.
_REHEARSAL_MODULE = "_sless_rehearsal"
_REHEARSAL_SOURCE = b"def handle(event, context):\n    return {'message': f\"Hello, {event['name']}!\"}\n"
_REHEARSAL_CODE = compile(_REHEARSAL_SOURCE, "<rehearsal>", "exec", dont_inherit=True)
_REHEARSAL_PYC = (importlib.util.MAGIC_NUMBER + (1).to_bytes(4, "little")
                  + importlib.util.source_hash(_REHEARSAL_SOURCE) + marshal.dumps(_REHEARSAL_CODE))


class _RehearsalTransport:
    """The transport of the rehearsal's connection: keeps the responses' status lines."""

    def __init__(self):
        self.status_lines = []

    def write(self, data):
        self.status_lines.append(bytes(data[:data.index(b"\r\n")]))

    def close(self):
        pass


def _http_post(path, body):
    return (b"POST %s HTTP/1.1\r\nHost: instance\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (path.encode(), len(body), body))


def _rehearse(loop, recv, code_dir):
    """Specializes a throwaway app with a hello handler and serves it one invocation, through the
    wrapper's own code from parsing the requests to rendering the responses, on a connection that
    goes nowhere; then undoes what the specialize did to the process. Returns whether both
    answered 200 (False if anything failed).

    A spare runs it before it reports ready, so that its cold start finds that code run once. A
    forked interpreter copies each page of its zygote's memory that it writes for the first time,
    and running code writes to the objects it uses (reference counts, the interpreter's caches of
    the code): that was most of a forked spare's specialize and first invocation.

    The handler's module and .pyc go into code_dir, made here and removed afterwards; when it
    cannot be made (or code_dir is None), only the invocation is rehearsed. Nothing of the
    rehearsal stays: its module, the finder of its directory and its path entries go, the
    working directory and the loop's task factory are restored. The environment is left as it
    is: the rehearsal specializes with a copy of it.
    """
    made = code_dir is not None and _write_rehearsal_code(code_dir)
    cwd, path = os.getcwd(), list(sys.path)
    app = _App(loop, ())
    transport = _RehearsalTransport()
    conn = _Connection(app, recv)
    conn.connection_made(transport)
    requests = [_http_post("/", b'{"name":"sless"}')]
    try:
        if made:
            config = {"code_dir": code_dir, "handler": _REHEARSAL_MODULE + ".handle",
                      "env": dict(os.environ), "function": "", "namespace": "", "concurrency": 1}
            requests.insert(0, _http_post("/_sless/specialize", _encode_json(config).encode()))
        else:
            handler = {}
            exec(_REHEARSAL_CODE, handler)
            app._function = _Function(loop, handler["handle"], "", "", 1, False, None)
        for request in requests:
            recv[:len(request)] = request
            conn.buffer_updated(len(request))
    except Exception:  # an environment that is not UTF-8, say: the spare serves all the same
        return False
    finally:
        loop.set_task_factory(None)
        sys.modules.pop(_REHEARSAL_MODULE, None)
        os.chdir(cwd)
        sys.path[:] = path
        if made:
            for entry in (code_dir, os.path.join(code_dir, ".deps")):
                sys.path_importer_cache.pop(entry, None)
            _remove_rehearsal_code(code_dir)
    return transport.status_lines == [b"HTTP/1.1 200 OK"] * len(requests)


def _rehearsal_files(code_dir):
    """The rehearsal's __pycache__ directory, module and .pyc under code_dir."""
    cache = os.path.join(code_dir, "__pycache__")
    return (cache, os.path.join(code_dir, _REHEARSAL_MODULE + ".py"),
            os.path.join(cache, f"{_REHEARSAL_MODULE}.{sys.implementation.cache_tag}.pyc"))


def _write_rehearsal_code(code_dir):
    """Makes code_dir with the rehearsal's module and .pyc; returns whether it could."""
    cache, source, pyc = _rehearsal_files(code_dir)
    try:
        os.mkdir(code_dir, 0o700)
    except OSError:
        return False
    try:
        os.mkdir(cache, 0o700)
        for file, data in ((source, _REHEARSAL_SOURCE), (pyc, _REHEARSAL_PYC)):
            fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
    except OSError:
        _remove_rehearsal_code(code_dir)
        return False
    return True


def _remove_rehearsal_code(code_dir):
    cache, source, pyc = _rehearsal_files(code_dir)
    for remove, entry in ((os.unlink, pyc), (os.unlink, source), (os.rmdir, cache),
                          (os.rmdir, code_dir)):
        try:
            remove(entry)
        except FileNotFoundError:
            pass


# ---------------------------------------------------------------------------------------------
# Process


def parse_args(argv):
    """Parses the command line after the program name (PROTOCOL.md, "Starting")."""
    parser = argparse.ArgumentParser(description="sless Python runtime wrapper")
    parser.add_argument("--listen", required=True, help="unix:PATH or tcp:HOST:PORT")
    parser.add_argument("--ready-fd", type=int, help="write 'ready\\n' to this fd once listening")
    parser.add_argument("--code-dir", help="specialize at start from this directory")
    parser.add_argument("--handler", default="handler.handle", help="module.function (with --code-dir)")
    parser.add_argument("--loop", choices=("auto", "asyncio"), default="auto",
                        help="uvloop's event loop when the interpreter has it (auto), or asyncio's")
    args = parser.parse_args(argv)
    kind, _, address = args.listen.partition(":")
    if kind == "unix" and address:
        args.address = ("unix", address)
    elif kind == "tcp" and ":" in address:
        host, _, port = address.rpartition(":")
        if not port.isdigit():
            parser.error(f"invalid port in --listen {args.listen}")
        args.address = ("tcp", host.strip("[]"), int(port))
    else:
        parser.error(f"--listen must be unix:PATH or tcp:HOST:PORT, got {args.listen}")
    return args


def _startup_config(args):
    """The specialize config of --code-dir mode, from the command line and the environment."""
    concurrency = os.environ.get("SLESS_CONCURRENCY", "1")
    if not concurrency.isdigit() or int(concurrency) < 1:
        raise _SpecializeError(f"SLESS_CONCURRENCY must be a positive integer, got {concurrency!r}")
    return {
        "code_dir": os.path.abspath(args.code_dir),
        "handler": args.handler,
        "env": None,
        "function": os.environ.get("SLESS_FUNCTION", ""),
        "namespace": os.environ.get("SLESS_NAMESPACE", ""),
        "concurrency": int(concurrency),
    }


def _remove_stale_socket(path):
    try:
        if stat.S_ISSOCK(os.stat(path).st_mode):
            os.unlink(path)
    except FileNotFoundError:
        pass


async def _listen(loop, app, address, recv):
    def factory():
        return _Connection(app, recv)

    if address[0] == "unix":
        _remove_stale_socket(address[1])
        return await loop.create_unix_server(factory, address[1], backlog=1024)
    return await loop.create_server(factory, address[1], address[2], backlog=1024,
                                   reuse_address=True)


def _raise(exc):
    raise exc


def _new_event_loop(kind):
    """The wrapper's event loop: uvloop's when kind is "auto" and the interpreter has uvloop,
    else asyncio's."""
    if kind == "auto" and uvloop is not None:
        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def _exit_status(exit_exc):
    code = exit_exc.code
    if code is None or isinstance(code, int):
        return code or 0
    print(code, file=sys.__stderr__)
    return 1


def main(argv=None):
    return serve(parse_args(argv))


def serve(args):
    """Runs the wrapper as parse_args parsed its command line. A zygote parses the command line
    of its instances once and calls this in each (PROTOCOL.md, "Forked instances")."""
    # The script's own directory must not shadow user modules (e.g. a user module "server").
    script_dir = os.path.dirname(os.path.realpath(__file__))
    if sys.path and os.path.realpath(sys.path[0] or ".") == script_dir:
        del sys.path[0]
    proxies = _install_capture()
    loop = _new_event_loop(args.loop)
    asyncio.set_event_loop(loop)
    app = _App(loop, proxies, _StandbyWorker() if args.code_dir is None else None)
    if args.code_dir is not None:
        try:
            app.specialize(_startup_config(args), replace_env=False)
        except Exception as exc:
            sys.__stderr__.write(_format_exception(exc))
            return 1
    # The loop's connections share one receive buffer (see _Connection).
    recv = memoryview(bytearray(RECV_BUFFER))
    if args.code_dir is None:
        # Beside the socket, in the instance's own directory (the sandbox's socket directory, or
        # the one the platform made for its instances' sockets).
        code_dir = args.address[1] + ".rehearsal" if args.address[0] == "unix" else None
        if not _rehearse(loop, recv, code_dir):
            sys.__stderr__.write("sless wrapper: rehearsing a cold start failed; this spare's "
                                 "cold start will take longer\n")
    server = loop.run_until_complete(_listen(loop, app, args.address, recv))
    if args.ready_fd is not None:
        os.write(args.ready_fd, b"ready\n")
        os.close(args.ready_fd)
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, loop.stop)
    status = 0
    try:
        loop.run_forever()
    except SystemExit as exc:  # sys.exit() in a handler ends the process, like os._exit()
        status = _exit_status(exc)
    server.close()
    if args.address[0] == "unix":
        _remove_stale_socket(args.address[1])
    sys.__stdout__.flush()
    sys.__stderr__.flush()
    # Skip interpreter teardown: it would wait for handler threads that may never finish.
    os._exit(status)


if __name__ == "__main__":
    sys.exit(main())
