package runtimes_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"

	"sless.kube5s.ru/sless/internal/testenv"
	"sless.kube5s.ru/sless/modules/runtime/sandbox"
	"sless.kube5s.ru/sless/runtimes"
)

// The conformance suite: every case runs against both wrappers, started with
// their real interpreters, over the protocol in modules/runtime/PROTOCOL.md.

const (
	python = "python3.11"
	node   = "nodejs20"

	startTimeout   = 30 * time.Second // the machine running the suite may be busy
	requestTimeout = 30 * time.Second
	logLimit       = 64 * 1024
)

// wrapperRuntime is one wrapper under test.
type wrapperRuntime struct {
	name string // the runtime, which cases key their expectations by
	// forked says the instances are forked from a zygote
	// (runtimes.PythonZygote) instead of started.
	forked bool
	// loop is the Python wrapper's --loop ("": its default, uvloop's loop
	// when the interpreter has uvloop).
	loop       string
	source     []byte                 // the embedded wrapper
	scriptName string                 // file name the wrapper is written to
	locate     func() (string, error) // the interpreter; errNotInstalled skips
	appFile    string                 // file name of the routing fixture
	appSource  string                 // the routing fixture (see pythonApp)
	appAsync   string                 // handler name of the fixture's async entry point
}

// label names the runtime's run of the suite.
func (rt *wrapperRuntime) label() string {
	switch {
	case rt.forked:
		return rt.name + " forked"
	case rt.loop != "":
		return rt.name + " " + rt.loop
	}
	return rt.name
}

// appFiles is the routing fixture as a code dir's files.
func (rt *wrapperRuntime) appFiles() map[string]string {
	return map[string]string{rt.appFile: rt.appSource}
}

var errNotInstalled = errors.New("not installed")

var wrapperRuntimes = []*wrapperRuntime{
	{
		name: python, source: runtimes.PythonServer, scriptName: "server.py",
		locate: pythonInterpreter, appFile: "handler.py", appSource: pythonApp, appAsync: "handler.handle_async",
	},
	{
		name: python, loop: "asyncio", source: runtimes.PythonServer, scriptName: "server.py",
		locate: pythonInterpreter, appFile: "handler.py", appSource: pythonApp, appAsync: "handler.handle_async",
	},
	{
		name: python, forked: true, source: runtimes.PythonServer, scriptName: "server.py",
		locate: pythonInterpreter, appFile: "handler.py", appSource: pythonApp, appAsync: "handler.handle_async",
	},
	{
		name: node, source: runtimes.NodeServer, scriptName: "server.js",
		locate: locateNode, appFile: "handler.js", appSource: nodeApp, appAsync: "handler.handleAsync",
	},
}

// pythonInterpreter resolves python3.11 once: a pyenv shim on PATH costs about
// two seconds per start, the interpreter it points at a few milliseconds.
// SLESS_TEST_PYTHON names another interpreter to run the Python cases with (the
// wrapper supports CPython 3.9 and later).
var pythonInterpreter = sync.OnceValues(func() (string, error) {
	if path := os.Getenv("SLESS_TEST_PYTHON"); path != "" {
		return path, nil
	}
	shim, err := exec.LookPath("python3.11")
	if err != nil {
		return "", errNotInstalled
	}
	out, err := exec.Command(shim, "-c", "import sys; print(sys.executable)").Output()
	if err != nil {
		return "", fmt.Errorf("%s -c 'print(sys.executable)': %w", shim, err)
	}
	return strings.TrimSpace(string(out)), nil
})

func locateNode() (string, error) {
	path, err := exec.LookPath("node")
	if err != nil {
		return "", errNotInstalled
	}
	return path, nil
}

// pythonApp and nodeApp are the same fixture in both languages: handle routes
// on the first path segment, so one specialized instance serves most cases.
const pythonApp = `
import asyncio
import base64
import importlib.util
import inspect
import json
import logging
import os
import sys
import threading
import time

print("fixture imported")
THREADS_AT_IMPORT = sorted(t.name for t in threading.enumerate())


def kind_of(event):
    if isinstance(event, bool):
        return "other"
    if isinstance(event, (int, float)):
        return "number"
    return {type(None): "null", str: "text", bytes: "bytes", dict: "object", list: "array"}.get(type(event), "other")


def event(event, ctx):
    kind = kind_of(event)
    if kind == "bytes":
        event = base64.b64encode(event).decode()
    return {"kind": kind, "event": event}


def echo(event, ctx):
    return {"statusCode": 200, "body": event if isinstance(event, (str, bytes)) else ""}


def context(event, ctx):
    return {"function": ctx.function_name, "namespace": ctx.namespace, "invocationId": ctx.invocation_id,
            "method": ctx.method, "path": ctx.path, "query": ctx.query, "headers": ctx.headers,
            "trigger": ctx.trigger, "deadlineMs": ctx.deadline_ms, "remainingMs": ctx.remaining_ms(),
            "traceparent": ctx.traceparent, "traceId": ctx.trace_id}


def fail(event, ctx):
    print("about to fail")
    raise ValueError("boom")


async def fail_async(event, ctx):
    await asyncio.sleep(0.001)
    raise KeyError("async boom")


async def log(event, ctx):
    i = ctx.query["id"]
    print("start", i)
    await asyncio.sleep(0.002)
    print("end", i, file=sys.stderr)
    return {"id": i}


def log_sync(event, ctx):
    i = ctx.query["id"]
    print("start", i)
    time.sleep(0.001)
    print("end", i, file=sys.stderr)
    return {"id": i, "thread": threading.current_thread().name}


def via_logging(event, ctx):
    logging.getLogger("fixture").warning("warned %s", ctx.query["id"])


def big_log(event, ctx):
    print("x" * 100000)


def exit_process(event, ctx):
    os._exit(1)


async def stray(event, ctx):
    i = ctx.query["id"]

    def thread_fails():
        raise RuntimeError(f"stray thread {i}")

    def callback_fails():
        raise RuntimeError(f"stray callback {i}")

    threading.Thread(target=thread_fails).start()
    asyncio.get_running_loop().call_later(0.01, callback_fails)
    return {"ok": True}


async def sleep_async(event, ctx):
    await asyncio.sleep(0.01)
    return {"async": True}


def asyncio_run(event, ctx):
    return asyncio.run(sleep_async(event, ctx))


BACKGROUND = {}


async def background(i):
    await asyncio.sleep(0.001)
    BACKGROUND[i] = True


def start_background(event, ctx):
    # A synchronous handler that leaves a coroutine running on the wrapper's own loop.
    asyncio.get_event_loop().create_task(background(ctx.query["id"]))
    return {"started": True}


BARRIERS = {}


def barrier(event, ctx):
    # Returns once n calls wait here at the same time (a 500 after 10 s otherwise).
    n = int(ctx.query["n"])
    BARRIERS.setdefault(n, threading.Barrier(n, timeout=10)).wait()
    return {"thread": threading.current_thread().name}


def sleep_sync(event, ctx):
    time.sleep(int(ctx.query["ms"]) / 1000)
    return {"thread": threading.current_thread().name}


def threads(event, ctx):
    """The threads when the code was imported, the calling one, and the others alive once the
    wrapper's handler threads that are ending have ended (a second at most)."""
    for t in threading.enumerate():
        if t.name.startswith("sless-handler") and t is not threading.current_thread():
            t.join(1)
    return {"at_import": THREADS_AT_IMPORT, "thread": threading.current_thread().name,
            "alive": sorted(t.name for t in threading.enumerate())}


def rehearsal_traces(event, ctx):
    """What the process still holds of a spare's rehearsal (see the wrapper's _rehearse)."""
    return {"modules": sorted(m for m in sys.modules if "rehearsal" in m),
            "finders": sorted(p for p in sys.path_importer_cache if ".rehearsal" in p),
            "path": [p for p in sys.path if ".rehearsal" in p],
            "importable": importlib.util.find_spec("_sless_rehearsal") is not None}


ROUTES = {
    "plain": lambda event, ctx: {"hello": "world", "n": 1},
    "none": lambda event, ctx: None,
    "response": lambda event, ctx: {"statusCode": 201, "headers": {"X-Custom": "yes", "Set-Cookie": ["a=1", "b=2"]},
                                    "body": "created"},
    "binary": lambda event, ctx: {"statusCode": 200, "body": bytes([0, 1, 254, 255])},
    "base64": lambda event, ctx: {"statusCode": 200, "isBase64Encoded": True, "headers": {"Content-Type": "image/png"},
                                  "body": base64.b64encode(b"\x89PNG\x00\xff").decode()},
    "json-body": lambda event, ctx: {"statusCode": 202, "body": {"list": [1, 2]}},
    "no-content": lambda event, ctx: {"statusCode": 204, "body": "ignored"},
    "unserializable": lambda event, ctx: {"value": object()},
    "bad-status": lambda event, ctx: {"statusCode": 99},
    "status": lambda event, ctx: {"statusCode": json.loads(ctx.query["v"]), "body": "given"},
    "bad-header": lambda event, ctx: {"statusCode": 200, "headers": {"X-Bad": "a\r\nInjected: 1"}},
    "bad-base64": lambda event, ctx: {"statusCode": 200, "isBase64Encoded": True, "body": "not base64!"},
    "reserved": lambda event, ctx: {"statusCode": 200, "body": "ok", "headers": {
        "Content-Length": "999", "Connection": "close", "X-Sless-Logs": '"forged"', "X-Kept": "1"}},
    "env": lambda event, ctx: {"env": dict(os.environ), "cwd": os.getcwd()},
    "async": sleep_async,
    "asyncio-run": asyncio_run,
    "barrier": barrier,
    "background": start_background,
    "background-done": lambda event, ctx: {"done": BACKGROUND.get(ctx.query["id"], False)},
    "sleep": sleep_sync,
    "thread": lambda event, ctx: {"thread": threading.current_thread().name},
    "threads": threads,
    "rehearsal-traces": rehearsal_traces,
    "loop": lambda event, ctx: {"module": type(asyncio.get_event_loop()).__module__},
    "event": event,
    "echo": echo,
    "context": context,
    "fail": fail,
    "fail-async": fail_async,
    "log": log,
    "log-sync": log_sync,
    "logging": via_logging,
    "big-log": big_log,
    "exit": exit_process,
    "sys-exit": lambda event, ctx: sys.exit(int(ctx.query["status"])),
    "stray": stray,
}


def handle(event, ctx):
    return ROUTES[ctx.path.split("/")[1]](event, ctx)


async def handle_async(event, ctx):
    result = handle(event, ctx)
    return await result if inspect.isawaitable(result) else result
`

const nodeApp = `
'use strict';
console.log('fixture imported');

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function kindOf(event) {
  if (event === null) return 'null';
  if (Buffer.isBuffer(event)) return 'bytes';
  if (Array.isArray(event)) return 'array';
  return { string: 'text', number: 'number', object: 'object' }[typeof event] || 'other';
}

const routes = {
  plain: () => ({ hello: 'world', n: 1 }),
  none: () => undefined,
  response: () => ({ statusCode: 201, headers: { 'X-Custom': 'yes', 'Set-Cookie': ['a=1', 'b=2'] }, body: 'created' }),
  binary: () => ({ statusCode: 200, body: Buffer.from([0, 1, 254, 255]) }),
  base64: () => ({
    statusCode: 200, isBase64Encoded: true, headers: { 'Content-Type': 'image/png' },
    body: Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x00, 0xff]).toString('base64'),
  }),
  'json-body': () => ({ statusCode: 202, body: { list: [1, 2] } }),
  'no-content': () => ({ statusCode: 204, body: 'ignored' }),
  unserializable: () => ({ value: 10n }),
  'bad-status': () => ({ statusCode: 99 }),
  status: (event, ctx) => ({ statusCode: JSON.parse(ctx.query.v), body: 'given' }),
  'bad-header': () => ({ statusCode: 200, headers: { 'X-Bad': 'a\r\nInjected: 1' } }),
  'bad-base64': () => ({ statusCode: 200, isBase64Encoded: true, body: 'not base64!' }),
  reserved: () => ({
    statusCode: 200, body: 'ok',
    headers: { 'Content-Length': '999', Connection: 'close', 'X-Sless-Logs': '"forged"', 'X-Kept': '1' },
  }),
  env: () => ({ env: { ...process.env }, cwd: process.cwd() }),
  async: async () => { await sleep(10); return { async: true }; },
  event: (event) => {
    const kind = kindOf(event);
    return { kind, event: kind === 'bytes' ? event.toString('base64') : event };
  },
  echo: (event) => ({ statusCode: 200, body: typeof event === 'string' || Buffer.isBuffer(event) ? event : '' }),
  context: (event, ctx) => ({
    function: ctx.functionName, namespace: ctx.namespace, invocationId: ctx.invocationId,
    method: ctx.method, path: ctx.path, query: ctx.query, headers: ctx.headers,
    trigger: ctx.trigger, deadlineMs: ctx.deadlineMs, remainingMs: ctx.remainingMs(),
    traceparent: ctx.traceparent, traceId: ctx.traceId,
  }),
  fail: () => { console.log('about to fail'); throw new RangeError('boom'); },
  'fail-async': async () => { await sleep(1); throw new TypeError('async boom'); },
  log: async (event, ctx) => {
    const id = ctx.query.id;
    console.log('start', id);
    await sleep(2);
    console.error('end', id);
    return { id };
  },
  'log-sync': (event, ctx) => {
    const id = ctx.query.id;
    console.log('start', id);
    console.error('end', id);
    return { id, thread: 'main' };
  },
  'big-log': () => { console.log('x'.repeat(100000)); },
  exit: () => process.exit(1),
  'rehearsal-traces': () => ({ // what the process still holds of a spare's rehearsal (see the wrapper's rehearse)
    modules: [...Object.keys(require.cache), ...require.main.children.map((m) => m.id)].filter((id) => id.includes('.rehearsal')),
    finders: Object.entries(require('node:module')._pathCache).flat().filter((entry) => entry.includes('.rehearsal')),
  }),
  stray: (event, ctx) => {
    const id = ctx.query.id;
    setTimeout(() => { throw new Error('stray timer ' + id); }, 10);
    Promise.reject(new Error('stray rejection ' + id));
    return { ok: true };
  },
};

exports.handle = (event, ctx) => routes[ctx.path.split('/')[1]](event, ctx);
exports.handleAsync = async (event, ctx) => exports.handle(event, ctx);
`

// appEnv is the environment the shared fixture instance is specialized with.
var appEnv = map[string]string{"GREETING": "hello", "SLESS_TEST_UNICODE": "grüße"}

// startOnlyVar is set in every wrapper's start environment and must not reach
// a handler: specialize replaces the whole environment.
const startOnlyVar = "SLESS_TEST_START_ONLY"

// conformanceCase is one behaviour both wrappers must show. only limits a case
// to one runtime when the behaviour is language-specific.
type conformanceCase struct {
	name string
	only string
	run  func(t *testing.T, s *suite)
}

// suite is the per-runtime state the cases share.
type suite struct {
	rt     *wrapperRuntime
	interp string
	script string // the wrapper written to disk, as its instances see it
	// zygote forks the instances of a forked runtime.
	zygote *sandbox.Zygote
	app    *instance // specialized with the routing fixture, concurrency 1
	appDir string
}

func TestWrapperConformance(t *testing.T) {
	for _, rt := range wrapperRuntimes {
		t.Run(rt.label(), func(t *testing.T) {
			t.Parallel()
			s := newSuite(t, rt)
			for _, c := range conformanceCases {
				if c.only != "" && c.only != rt.name {
					continue
				}
				t.Run(c.name, func(t *testing.T) { c.run(t, s) })
			}
		})
	}
}

var conformanceCases = []conformanceCase{
	{name: "health and invocation before specialize", run: testBeforeSpecialize},
	{name: "event loop", only: python, run: testEventLoop},
	{name: "plain return value is 200 JSON", run: testPlainReturn},
	{name: "statusCode, headers and string body", run: testResponseObject},
	{name: "bytes body", run: testBytesBody},
	{name: "base64 body", run: testBase64Body},
	{name: "JSON body and no-content status", run: testJSONBodyAndNoContent},
	{name: "exception is 500 with traceback in logs", run: testException},
	{name: "unserializable value is an error", run: testUnserializable},
	{name: "invalid response objects are errors", run: testInvalidResponses},
	{name: "a statusCode that is not an integer in range is an error", run: testInvalidStatusCode},
	{name: "errors outside an invocation are logged and fail nothing", run: testStrayErrors},
	{name: "reserved response headers are dropped", run: testReservedHeaders},
	{name: "async handler", run: testAsyncHandler},
	{name: "event decoding", run: testEventDecoding},
	{name: "context fields", run: testContext},
	{name: "logs captured per invocation", run: testLogIsolation},
	{name: "logging module captured", only: python, run: testLoggingCaptured},
	{name: "logs truncated at 64 KiB", run: testLogTruncation},
	{name: "import-time output goes to the process", run: testImportOutput},
	{name: "echo logs to the process", run: testEchoLogs},
	{name: "environment replaced and working directory", run: testEnvAndCwd},
	{name: "second specialize is 409", run: testSecondSpecialize},
	{name: "specialize errors", run: testSpecializeErrors},
	{name: "handler in a subdirectory", run: testSubdirectoryHandler},
	{name: "dependencies directory", run: testDependencies},
	{name: "ES module handlers", only: node, run: testESModules},
	{name: "code-dir start mode", run: testCodeDirMode},
	{name: "code-dir start mode with a broken handler exits", run: testCodeDirModeBroken},
	{name: "process exit closes the connection", run: testProcessExit},
	{name: "sys.exit() in a handler ends the process with its status", only: python, run: testSysExit},
	{name: "100 concurrent requests", run: testConcurrentRequests},
	{name: "blocking synchronous handlers run in parallel", only: python, run: testBlockingHandlersInParallel},
	{name: "a handler thread started before the code", only: python, run: testStandbyWorker},
	{name: "a synchronous handler's task on the wrapper's loop runs", only: python, run: testBackgroundTask},
	{name: "a spare's rehearsal leaves no trace", run: testRehearsalLeavesNoTrace},
	{name: "a spare that cannot write its rehearsal's code still starts", run: testRehearsalWithoutCode},
	{name: "a spare whose rehearsal fails still serves", run: testRehearsalFails},
	{name: "chunked request body", run: testChunkedBody},
	{name: "large body echoed intact", run: testLargeBody},
	{name: "keep-alive and HEAD", run: testKeepAlive},
	{name: "pipelined requests", run: testPipelining},
	{name: "an invocation behind the specialize request", run: testSpecializePipelined},
	{name: "client gone mid-body", run: testClientGoneMidBody},
	{name: "expect 100-continue", run: testExpectContinue},
}

func newSuite(t *testing.T, rt *wrapperRuntime) *suite {
	t.Helper()
	interp, err := rt.locate()
	if errors.Is(err, errNotInstalled) {
		t.Skipf("%s interpreter is not installed; skipping the %s wrapper conformance suite", rt.name, rt.name)
	}
	if err != nil {
		t.Fatalf("locating the %s interpreter: %v", rt.name, err)
	}
	s := &suite{rt: rt, interp: interp}
	if rt.forked {
		s.zygote, s.script = startZygote(t, interp, rt)
	} else {
		s.script = filepath.Join(t.TempDir(), rt.scriptName)
		if err := os.WriteFile(s.script, rt.source, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s.appDir = writeFiles(t, rt.appFiles())
	s.app = s.start(t)
	s.app.mustSpecialize(t, specializeRequest{
		CodeDir: s.appDir, Handler: "handler.handle", Env: appEnv,
		Function: "app", Namespace: "tests", Concurrency: 1,
	})
	return s
}

// ---------------------------------------------------------------------------
// Cases

func testBeforeSpecialize(t *testing.T, s *suite) {
	in := s.start(t)
	res := in.get(t, "/_sless/health")
	wantStatus(t, res, http.StatusOK)
	if got := res.json(t); got["status"] != "ok" || got["specialized"] != false {
		t.Errorf("health before specialize = %v, want status ok and specialized false", got)
	}
	res = in.get(t, "/plain")
	wantStatus(t, res, http.StatusServiceUnavailable)
	wantJSON(t, res, map[string]any{"error": "not specialized"})

	res = s.app.get(t, "/_sless/health")
	if got := res.json(t); got["specialized"] != true {
		t.Errorf("health after specialize = %v, want specialized true", got)
	}
}

// testEventLoop checks which loop serves: uvloop's by default when the
// interpreter has uvloop (which CI installs into python3.11 with
// hack/tools.sh uvloop), asyncio's with --loop asyncio.
func testEventLoop(t *testing.T, s *suite) {
	want := "asyncio.unix_events"
	if s.rt.loop == "" {
		if err := exec.Command(s.interp, "-c", "import uvloop").Run(); err == nil {
			want = "uvloop"
		} else if testenv.Required(t) && os.Getenv("SLESS_TEST_PYTHON") == "" {
			t.Fatalf("%s cannot import uvloop (%v): run hack/tools.sh uvloop", s.interp, err)
		}
	}
	res := s.app.get(t, "/loop")
	wantStatus(t, res, http.StatusOK)
	wantBody(t, res, `{"module":"`+want+`"}`)
}

func testPlainReturn(t *testing.T, s *suite) {
	res := s.app.get(t, "/plain")
	wantStatus(t, res, http.StatusOK)
	wantHeader(t, res, "Content-Type", "application/json")
	wantJSON(t, res, map[string]any{"hello": "world", "n": 1.0})
	if v := res.header.Get("X-Sless-Logs"); v != "" {
		t.Errorf("X-Sless-Logs = %q for a handler that printed nothing, want it absent", v)
	}
	if _, err := strconv.ParseUint(res.header.Get("X-Sless-Handler-Us"), 10, 64); err != nil {
		t.Errorf("X-Sless-Handler-Us = %q, want a non-negative integer", res.header.Get("X-Sless-Handler-Us"))
	}

	res = s.app.get(t, "/none")
	wantStatus(t, res, http.StatusOK)
	wantBody(t, res, "null")
}

func testResponseObject(t *testing.T, s *suite) {
	res := s.app.get(t, "/response")
	wantStatus(t, res, http.StatusCreated)
	wantHeader(t, res, "X-Custom", "yes")
	wantHeader(t, res, "Content-Type", "text/plain; charset=utf-8")
	if got, want := res.header.Values("Set-Cookie"), []string{"a=1", "b=2"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Set-Cookie = %q, want %q", got, want)
	}
	wantBody(t, res, "created")
}

func testBytesBody(t *testing.T, s *suite) {
	res := s.app.get(t, "/binary")
	wantStatus(t, res, http.StatusOK)
	wantHeader(t, res, "Content-Type", "application/octet-stream")
	wantBody(t, res, "\x00\x01\xfe\xff")
}

func testBase64Body(t *testing.T, s *suite) {
	res := s.app.get(t, "/base64")
	wantStatus(t, res, http.StatusOK)
	wantHeader(t, res, "Content-Type", "image/png")
	wantBody(t, res, "\x89PNG\x00\xff")
}

func testJSONBodyAndNoContent(t *testing.T, s *suite) {
	res := s.app.get(t, "/json-body")
	wantStatus(t, res, http.StatusAccepted)
	wantHeader(t, res, "Content-Type", "application/json")
	wantBody(t, res, `{"list":[1,2]}`)

	res = s.app.get(t, "/no-content")
	wantStatus(t, res, http.StatusNoContent)
	wantBody(t, res, "")
	// The connection must still be in sync: a body sent with the 204 would
	// be read as the start of the next response.
	wantStatus(t, s.app.get(t, "/plain"), http.StatusOK)
}

func testException(t *testing.T, s *suite) {
	wantType := map[string]string{python: "ValueError", node: "RangeError"}[s.rt.name]
	res := s.app.get(t, "/fail")
	wantStatus(t, res, http.StatusInternalServerError)
	wantJSON(t, res, map[string]any{"error": "boom", "type": wantType})
	wantHeader(t, res, "X-Sless-Error", strconv.Quote(wantType+": boom"))
	logs := res.logs(t)
	if !strings.HasPrefix(logs, "about to fail\n") {
		t.Errorf("logs = %q, want them to start with what the handler printed", logs)
	}
	for _, want := range []string{wantType, "boom", filepath.Join(s.app.seen(s.appDir), s.rt.appFile)} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs = %q, want a traceback mentioning %q", logs, want)
		}
	}
	if strings.Contains(logs, s.script) {
		t.Errorf("logs = %q, want the wrapper's own frames left out of the traceback", logs)
	}
}

func testUnserializable(t *testing.T, s *suite) {
	res := s.app.get(t, "/unserializable")
	wantStatus(t, res, http.StatusInternalServerError)
	got := res.json(t)
	if got["type"] != "TypeError" || !strings.Contains(fmt.Sprint(got["error"]), "serializ") {
		t.Errorf("body = %v, want type TypeError and an error about serializing", got)
	}
	if res.header.Get("X-Sless-Error") == "" {
		t.Error("X-Sless-Error is missing, want it set for a serialization error")
	}
}

func testInvalidResponses(t *testing.T, s *suite) {
	for _, route := range []string{"/bad-status", "/bad-header", "/bad-base64"} {
		res := s.app.get(t, route)
		wantStatus(t, res, http.StatusInternalServerError)
		got := res.json(t)
		if typ, _ := got["type"].(string); typ == "" {
			t.Errorf("GET %s: body %v, want an error type", route, got)
		}
		if res.header.Get("Injected") != "" {
			t.Errorf("GET %s: a handler's header value injected a header line", route)
		}
	}
}

func testInvalidStatusCode(t *testing.T, s *suite) {
	res := s.app.get(t, "/status?v=201")
	wantStatus(t, res, http.StatusCreated)
	wantBody(t, res, "given")
	// Both wrappers give the same message; the type follows the language.
	outOfRange := map[string]string{python: "ValueError", node: "RangeError"}[s.rt.name]
	for _, tc := range []struct{ value, typ string }{
		{`"404"`, "TypeError"},
		{`201.5`, "TypeError"},
		{`true`, "TypeError"},
		{`null`, "TypeError"},
		{`{"code":200}`, "TypeError"},
		{`999`, outOfRange},
		{`99`, outOfRange},
	} {
		res := s.app.get(t, "/status?v="+url.QueryEscape(tc.value))
		wantStatus(t, res, http.StatusInternalServerError)
		wantJSON(t, res, map[string]any{"error": "statusCode must be an integer within 200-599, got " + tc.value, "type": tc.typ})
	}
}

func testStrayErrors(t *testing.T, s *suite) {
	in := s.startSpecialized(t, specializeRequest{})
	res := in.get(t, "/stray?id=S1")
	wantStatus(t, res, http.StatusOK)
	wantJSON(t, res, map[string]any{"ok": true})
	want := map[string][]string{
		python: {"stray thread S1", "stray callback S1"},
		node:   {"stray timer S1", "stray rejection S1"},
	}[s.rt.name]
	eventually(t, "the stray errors on the instance's stderr", func() bool {
		for _, w := range want {
			if !strings.Contains(in.stderr.String(), w) {
				return false
			}
		}
		return true
	}, func() string { return "stderr: " + in.stderr.String() })
	// The process lives on and serves the next invocation.
	wantStatus(t, in.get(t, "/plain"), http.StatusOK)
	select {
	case <-in.exited:
		t.Fatalf("the process exited (status %d) after errors outside an invocation", in.exitCode)
	default:
	}
}

func testReservedHeaders(t *testing.T, s *suite) {
	var dials atomic.Int64
	client := s.app.newClient(&dials)
	t.Cleanup(client.CloseIdleConnections)
	for range 2 {
		res, err := roundTrip(client, mustRequest(t, http.MethodGet, "/reserved", nil, nil))
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, res, http.StatusOK)
		wantBody(t, res, "ok")
		wantHeader(t, res, "X-Kept", "1")
		wantHeader(t, res, "X-Sless-Logs", "")
	}
	if got := dials.Load(); got != 1 {
		t.Errorf("a handler's Connection: close was honoured (%d connections for 2 requests), want it dropped", got)
	}
}

func testAsyncHandler(t *testing.T, s *suite) {
	// A route returning a coroutine/promise from the synchronous entry point.
	res := s.app.get(t, "/async")
	wantStatus(t, res, http.StatusOK)
	wantJSON(t, res, map[string]any{"async": true})

	// A genuine async entry point (async def / async function).
	in := s.startSpecialized(t, specializeRequest{Handler: s.rt.appAsync, Concurrency: 4})
	res = in.get(t, "/async")
	wantStatus(t, res, http.StatusOK)
	wantJSON(t, res, map[string]any{"async": true})
	// Timers may fire a little early by the wall clock; 5 ms is "the await was timed".
	if us, _ := strconv.Atoi(res.header.Get("X-Sless-Handler-Us")); us < 5000 {
		t.Errorf("X-Sless-Handler-Us = %d for a handler that awaits 10 ms, want >= 5000", us)
	}
	wantType := map[string]string{python: "KeyError", node: "TypeError"}[s.rt.name]
	res = in.get(t, "/fail-async")
	wantStatus(t, res, http.StatusInternalServerError)
	if got := res.json(t); got["type"] != wantType || !strings.Contains(fmt.Sprint(got["error"]), "async boom") {
		t.Errorf("body = %v, want type %s and error containing %q", got, wantType, "async boom")
	}
	if logs := res.logs(t); !strings.Contains(logs, "async boom") {
		t.Errorf("logs = %q, want the rejection's traceback", logs)
	}
	checkLogIsolation(t, in, "/log", 20)
}

func testEventDecoding(t *testing.T, s *suite) {
	invalidUTF8 := []byte{0xff, 0xfe, 0x00, 0x80}
	tests := []struct {
		name      string
		body      []byte
		wantKind  string
		wantEvent any
	}{
		{"JSON object", []byte(`{"a":[1,2],"s":"ü"}`), "object", map[string]any{"a": []any{1.0, 2.0}, "s": "ü"}},
		{"JSON array", []byte(`[1, "two"]`), "array", []any{1.0, "two"}},
		{"JSON number", []byte(`42`), "number", 42.0},
		{"JSON string", []byte(`"quoted"`), "text", "quoted"},
		{"not JSON", []byte("hello, world"), "text", "hello, world"},
		{"empty", nil, "null", nil},
		{"not UTF-8", invalidUTF8, "bytes", base64.StdEncoding.EncodeToString(invalidUTF8)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := s.app.do(t, http.MethodPost, "/event", bytes.NewReader(tc.body), nil)
			wantStatus(t, res, http.StatusOK)
			wantJSON(t, res, map[string]any{"kind": tc.wantKind, "event": tc.wantEvent})
		})
	}
}

func testContext(t *testing.T, s *suite) {
	trigger := `{"kind":"rabbitmq","name":"orders","message":{"id":"m-1"}}`
	sent := time.Now().UnixMilli()
	res := s.app.do(t, http.MethodPut, "/context/a%20b?a=1&a=2&q=x%20y&empty=", nil, map[string]string{
		"X-Sless-Invocation-Id": "inv-123",
		"X-Sless-Timeout-Ms":    "10000",
		"X-Sless-Trigger":       trigger,
		"X-Custom-Header":       "custom",
		"Traceparent":           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	})
	wantStatus(t, res, http.StatusOK)
	got := res.json(t)
	want := map[string]any{
		"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "traceId": "4bf92f3577b34da6a3ce929d0e0e4736",
		"function": "app", "namespace": "tests", "invocationId": "inv-123", "method": "PUT",
		"path": "/context/a b", "query": map[string]any{"a": "2", "q": "x y", "empty": ""},
		"trigger": map[string]any{"kind": "rabbitmq", "name": "orders", "message": map[string]any{"id": "m-1"}},
	}
	for key, w := range want {
		if !reflect.DeepEqual(got[key], w) {
			t.Errorf("context.%s = %#v, want %#v", key, got[key], w)
		}
	}
	// The deadline is 10 s after the wrapper took the request, on its clock
	// (the same as the test's here).
	if deadline, _ := got["deadlineMs"].(float64); deadline < float64(sent+10000) || deadline > float64(time.Now().UnixMilli()+10000) {
		t.Errorf("context.deadlineMs = %v with X-Sless-Timeout-Ms 10000 sent at %d, want 10 s after the request", got["deadlineMs"], sent)
	}
	if remaining, _ := got["remainingMs"].(float64); remaining < 5000 || remaining > 10000 {
		t.Errorf("context.remainingMs = %v with a deadline 10 s away, want between 5000 and 10000", got["remainingMs"])
	}
	headers, _ := got["headers"].(map[string]any)
	if headers["x-custom-header"] != "custom" || headers["x-sless-invocation-id"] != "inv-123" {
		t.Errorf("context.headers = %v, want lower-case names including x-custom-header and x-sless-invocation-id", headers)
	}

	res = s.app.do(t, http.MethodGet, "/context", nil, map[string]string{"X-Sless-Timeout-Ms": "10000"})
	got = res.json(t)
	if want := map[string]any{"kind": "http"}; !reflect.DeepEqual(got["trigger"], want) {
		t.Errorf("context.trigger without X-Sless-Trigger = %v, want %v", got["trigger"], want)
	}
	if got["path"] != "/context" || !reflect.DeepEqual(got["query"], map[string]any{}) {
		t.Errorf("context path, query = %v, %v; want /context and an empty object", got["path"], got["query"])
	}
	if got["traceparent"] != "" || got["traceId"] != "" {
		t.Errorf("context traceparent, trace id without the header = %q, %q; want empty", got["traceparent"], got["traceId"])
	}
}

func testLogIsolation(t *testing.T, s *suite) {
	checkLogIsolation(t, s.app, "/log", 20)
}

// checkLogIsolation sends n concurrent requests that each print their own id
// (with a pause in between) and checks every response carries its own output only.
func checkLogIsolation(t *testing.T, in *instance, route string, n int) {
	t.Helper()
	results := make([]result, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = in.try(http.MethodGet, fmt.Sprintf("%s?id=req-%d", route, i), nil, nil)
		}()
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Errorf("request %d: %v", i, errs[i])
			continue
		}
		wantStatus(t, results[i], http.StatusOK)
		if got, want := results[i].logs(t), fmt.Sprintf("start req-%d\nend req-%d\n", i, i); got != want {
			t.Errorf("request %d: logs = %q, want %q", i, got, want)
		}
		if id := results[i].json(t)["id"]; id != fmt.Sprintf("req-%d", i) {
			t.Errorf("request %d: id = %v, want req-%d", i, id, i)
		}
	}
}

func testLoggingCaptured(t *testing.T, s *suite) {
	res := s.app.get(t, "/logging?id=L1")
	wantStatus(t, res, http.StatusOK)
	if got, want := res.logs(t), "warned L1\n"; got != want {
		t.Errorf("logs = %q, want %q", got, want)
	}
}

func testLogTruncation(t *testing.T, s *suite) {
	res := s.app.get(t, "/big-log")
	wantStatus(t, res, http.StatusOK)
	const printed = 100000 + 1 // the line and its newline
	want := strings.Repeat("x", logLimit) + fmt.Sprintf("...[truncated %d bytes]", printed-logLimit)
	if got := res.logs(t); got != want {
		t.Errorf("logs = %d bytes ending in %q, want %d bytes ending in %q",
			len(got), got[max(0, len(got)-40):], len(want), want[len(want)-40:])
	}
}

func testImportOutput(t *testing.T, s *suite) {
	eventually(t, "the import-time print on the instance's stdout", func() bool {
		return strings.Contains(s.app.stdout.String(), "fixture imported")
	}, func() string { return "stdout: " + s.app.stdout.String() })
	res := s.app.get(t, "/log?id=quiet")
	if strings.Contains(s.app.stdout.String(), "start quiet") || strings.Contains(s.app.stderr.String(), "end quiet") {
		t.Errorf("invocation output reached the process streams without SLESS_ECHO_LOGS; stdout %q", s.app.stdout.String())
	}
	if logs := res.logs(t); strings.Contains(logs, "fixture imported") {
		t.Errorf("logs = %q, want import-time output excluded", logs)
	}
}

func testEchoLogs(t *testing.T, s *suite) {
	in := s.startSpecialized(t, specializeRequest{Env: map[string]string{"SLESS_ECHO_LOGS": "1"}})
	res := in.get(t, "/log?id=echoed")
	if got, want := res.logs(t), "start echoed\nend echoed\n"; got != want {
		t.Errorf("logs = %q, want %q", got, want)
	}
	eventually(t, "the invocation output copied to the instance's stdout and stderr", func() bool {
		return strings.Contains(in.stdout.String(), "start echoed") && strings.Contains(in.stderr.String(), "end echoed")
	}, func() string { return "stdout: " + in.stdout.String() + "\nstderr: " + in.stderr.String() })
}

func testEnvAndCwd(t *testing.T, s *suite) {
	res := s.app.get(t, "/env")
	wantStatus(t, res, http.StatusOK)
	var got struct {
		Env map[string]string `json:"env"`
		Cwd string            `json:"cwd"`
	}
	if err := json.Unmarshal(res.body, &got); err != nil {
		t.Fatalf("decoding %s: %v", res.body, err)
	}
	if !reflect.DeepEqual(got.Env, appEnv) {
		t.Errorf("handler environment = %v, want exactly the specialize env %v (no %s from the start environment)",
			got.Env, appEnv, startOnlyVar)
	}
	wantDir, err := filepath.EvalSymlinks(s.appDir)
	if err != nil {
		t.Fatal(err)
	}
	if s.zygote != nil {
		wantDir = s.app.seen(s.appDir)
	}
	if got.Cwd != wantDir {
		t.Errorf("handler working directory = %q, want the code dir %q", got.Cwd, wantDir)
	}
}

func testSecondSpecialize(t *testing.T, s *suite) {
	res := s.app.specialize(t, specializeRequest{CodeDir: s.appDir, Handler: "handler.handle"})
	wantStatus(t, res, http.StatusConflict)
	wantJSON(t, res, map[string]any{"error": "already specialized"})
	wantStatus(t, s.app.get(t, "/plain"), http.StatusOK)
}

func testSpecializeErrors(t *testing.T, s *suite) {
	files := map[string]map[string]string{
		python: {
			"handler.py":  "NOT_CALLABLE = 42\ndef handle(event, ctx):\n    return 1\n",
			"broken.py":   "def handle(event, ctx:\n    return 1\n",
			"raising.py":  "print('importing raising')\nraise RuntimeError('import failed')\n",
			"importer.py": "import not_a_real_dependency\n",
			"json.py":     "def handle(event, ctx):\n    return 1\n",
			"opener.py":   "import os\nopen(os.path.join(os.path.dirname(__file__), 'missing.txt'))\n",
		},
		node: {
			"handler.js":  "exports.NOT_CALLABLE = 42;\nexports.handle = () => 1;\n",
			"broken.js":   "exports.handle = (event, ctx => 1;\n",
			"raising.js":  "console.log('importing raising');\nthrow new RangeError('import failed');\n",
			"importer.js": "require('not-a-real-dependency');\n",
			"opener.js":   "require('fs').readFileSync(require('path').join(__dirname, 'missing.txt'));\n",
		},
	}[s.rt.name]
	type want struct{ typ, errContains, file string }
	tests := []struct {
		name    string
		handler string
		want    map[string]want // by runtime; a runtime without an entry skips the case
	}{
		{"missing module", "nope.handle", map[string]want{
			python: {"ModuleNotFoundError", "nope", ""}, node: {"MODULE_NOT_FOUND", "nope", ""}}},
		{"syntax error", "broken.handle", map[string]want{
			python: {"SyntaxError", "broken.py", "broken.py"}, node: {"SyntaxError", "", "broken.js"}}},
		{"exception at import", "raising.handle", map[string]want{
			python: {"RuntimeError", "import failed", "raising.py"}, node: {"RangeError", "import failed", "raising.js"}}},
		{"exception naming a file at import", "opener.handle", map[string]want{
			python: {"FileNotFoundError", "missing.txt", "opener.py"}, node: {"ENOENT", "missing.txt", "opener.js"}}},
		{"missing dependency", "importer.handle", map[string]want{
			python: {"ModuleNotFoundError", "not_a_real_dependency", "importer.py"}, node: {"MODULE_NOT_FOUND", "not-a-real-dependency", "importer.js"}}},
		{"missing function", "handler.missing", map[string]want{
			python: {"AttributeError", "missing", ""}, node: {"TypeError", "missing", ""}}},
		{"not callable", "handler.NOT_CALLABLE", map[string]want{
			python: {"TypeError", "not callable", ""}, node: {"TypeError", "not a function", ""}}},
		{"path escapes the code dir", "../handler.handle", map[string]want{
			python: {"ValueError", "../handler.handle", ""}, node: {"ERR_INVALID_HANDLER", "../handler.handle", ""}}},
		{"name of a module the runtime imported", "json.handle", map[string]want{
			python: {"ImportError", "clashes", ""}}},
	}
	codeDir := writeFiles(t, files)
	realCodeDir, err := filepath.EvalSymlinks(codeDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range tests {
		w, ok := tc.want[s.rt.name]
		if !ok {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			in := s.start(t)
			res := in.specialize(t, specializeRequest{CodeDir: codeDir, Handler: tc.handler, Env: appEnv})
			wantStatus(t, res, http.StatusInternalServerError)
			got := res.json(t)
			if got["type"] != w.typ || !strings.Contains(fmt.Sprint(got["error"]), w.errContains) {
				t.Errorf("specialize %s = %v, want type %q and error containing %q", tc.handler, got, w.typ, w.errContains)
			}
			logs, _ := got["logs"].(string)
			if logs == "" || !strings.Contains(logs, w.errContains) {
				t.Errorf("specialize %s logs = %q, want a traceback mentioning %q", tc.handler, logs, w.errContains)
			}
			// The answer reaches the function's callers: the platform's paths stay out of it.
			for _, dir := range []string{codeDir, realCodeDir, in.seen(codeDir), s.script} {
				if msg := fmt.Sprint(got["error"]); strings.Contains(msg, dir) || strings.Contains(logs, dir) {
					t.Errorf("specialize %s = %q, logs %q; want no mention of %s", tc.handler, msg, logs, dir)
				}
			}
			if w.file != "" && !strings.Contains(logs, w.file) {
				t.Errorf("specialize %s logs = %q, want them to name %s", tc.handler, logs, w.file)
			}
			// A failed specialize leaves the process unusable: the platform stops it.
			wantStatus(t, in.get(t, "/plain"), http.StatusServiceUnavailable)
			wantStatus(t, in.specialize(t, specializeRequest{CodeDir: codeDir, Handler: "handler.handle"}), http.StatusConflict)
		})
	}
	t.Run("malformed request", func(t *testing.T) {
		in := s.start(t)
		res := in.do(t, http.MethodPost, "/_sless/specialize", strings.NewReader(`{"handler": "handler.handle"}`), nil)
		wantStatus(t, res, http.StatusBadRequest)
		// A malformed request does not count as the one specialize.
		in.mustSpecialize(t, specializeRequest{CodeDir: codeDir, Handler: "handler.handle"})
	})
}

func testSubdirectoryHandler(t *testing.T, s *suite) {
	files := map[string]map[string]string{
		python: {"lib/main.py": "def run(event, ctx):\n    return {'from': 'lib/main', 'event': event}\n"},
		node:   {"lib/main.js": "exports.run = (event) => ({ from: 'lib/main', event });\n"},
	}[s.rt.name]
	handlers := []string{"lib/main.run"}
	if s.rt.name == python {
		handlers = append(handlers, "lib.main.run")
	}
	for _, handler := range handlers {
		t.Run(handler, func(t *testing.T) {
			in := s.startSpecialized(t, specializeRequest{Files: files, Handler: handler})
			res := in.do(t, http.MethodPost, "/", strings.NewReader(`{"x":1}`), nil)
			wantStatus(t, res, http.StatusOK)
			wantJSON(t, res, map[string]any{"from": "lib/main", "event": map[string]any{"x": 1.0}})
		})
	}
}

func testDependencies(t *testing.T, s *suite) {
	files := map[string]map[string]string{
		python: {
			".deps/depmod.py": "VALUE = 'from .deps'\n",
			"handler.py":      "import depmod\ndef handle(event, ctx):\n    return depmod.VALUE\n",
		},
		node: {
			"node_modules/depmod/index.js": "exports.VALUE = 'from node_modules';\n",
			"handler.js":                   "const depmod = require('depmod');\nexports.handle = () => depmod.VALUE;\n",
		},
	}[s.rt.name]
	want := map[string]string{python: `"from .deps"`, node: `"from node_modules"`}[s.rt.name]
	in := s.startSpecialized(t, specializeRequest{Files: files, Handler: "handler.handle"})
	wantBody(t, in.get(t, "/"), want)
}

func testESModules(t *testing.T, s *suite) {
	tests := []struct {
		name  string
		files map[string]string
	}{
		{"mjs file", map[string]string{
			"handler.mjs": "export async function handle(event) { return { esm: true, event }; }\n"}},
		{"js file in a module package", map[string]string{
			"package.json": `{"type": "module"}`,
			"handler.js":   "export const handle = (event) => ({ esm: true, event });\n"}},
		{"default export object", map[string]string{
			"handler.mjs": "export default { handle: (event) => ({ esm: true, event }) };\n"}},
		{"top-level await", map[string]string{
			"package.json": `{"type": "module"}`,
			"handler.js":   "const esm = await Promise.resolve(true);\nexport const handle = (event) => ({ esm, event });\n"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := s.startSpecialized(t, specializeRequest{Files: tc.files, Handler: "handler.handle"})
			res := in.do(t, http.MethodPost, "/", strings.NewReader(`"hi"`), nil)
			wantStatus(t, res, http.StatusOK)
			wantJSON(t, res, map[string]any{"esm": true, "event": "hi"})
		})
	}
}

func testCodeDirMode(t *testing.T, s *suite) {
	s.skipForked(t)
	in := s.start(t, startOptions{
		args: []string{"--code-dir", s.appDir, "--handler", "handler.handle"},
		env:  []string{"SLESS_FUNCTION=cd-fn", "SLESS_NAMESPACE=cd-ns", "SLESS_CONCURRENCY=2"},
	})
	if got := in.get(t, "/_sless/health").json(t); got["specialized"] != true {
		t.Errorf("health in code-dir mode = %v, want specialized true", got)
	}
	got := in.do(t, http.MethodGet, "/context", nil, map[string]string{"X-Sless-Timeout-Ms": "60000"}).json(t)
	if got["function"] != "cd-fn" || got["namespace"] != "cd-ns" {
		t.Errorf("context function, namespace = %v, %v; want cd-fn, cd-ns", got["function"], got["namespace"])
	}
	// The environment is the process's own: nothing replaces it in this mode.
	var env struct {
		Env map[string]string `json:"env"`
	}
	if err := json.Unmarshal(in.get(t, "/env").body, &env); err != nil {
		t.Fatal(err)
	}
	if env.Env[startOnlyVar] != "1" {
		t.Errorf("%s = %q in code-dir mode, want the start environment kept", startOnlyVar, env.Env[startOnlyVar])
	}
	res := in.specialize(t, specializeRequest{CodeDir: s.appDir, Handler: "handler.handle"})
	wantStatus(t, res, http.StatusConflict)
}

func testCodeDirModeBroken(t *testing.T, s *suite) {
	s.skipForked(t)
	in := s.launch(t, startOptions{args: []string{"--code-dir", s.appDir, "--handler", "handler.missing"}})
	code := in.waitExit(t)
	if code == 0 {
		t.Errorf("exit status = 0 for a handler that cannot be loaded, want non-zero")
	}
	if stderr := in.stderr.String(); !strings.Contains(stderr, "missing") {
		t.Errorf("stderr = %q, want the load error", stderr)
	}
}

func testProcessExit(t *testing.T, s *suite) {
	in := s.startSpecialized(t, specializeRequest{})
	if res, err := in.try(http.MethodGet, "/exit", nil, nil); err == nil {
		t.Errorf("GET /exit answered %d %q, want the connection closed without a response", res.status, res.body)
	}
	if code := in.waitExit(t); code != 1 {
		t.Errorf("exit status = %d, want 1", code)
	}
}

// testSysExit checks that sys.exit() ends the process with its status
// wherever the handler runs: on the event loop (concurrency 1), on a worker
// thread (concurrency 32: the first calls go to the pool), as an async
// handler.
func testSysExit(t *testing.T, s *suite) {
	for i, tc := range []struct {
		name        string
		handler     string
		concurrency int
	}{
		{"on the loop", "handler.handle", 1},
		{"on a worker thread", "handler.handle", 32},
		{"async", s.rt.appAsync, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := s.startSpecialized(t, specializeRequest{Handler: tc.handler, Concurrency: tc.concurrency})
			status := 3 + i
			target := fmt.Sprintf("/sys-exit?status=%d", status)
			if res, err := in.try(http.MethodGet, target, nil, nil); err == nil {
				t.Errorf("GET %s answered %d %q, want the connection closed without a response", target, res.status, res.body)
			}
			if code := in.waitExit(t); code != status {
				t.Errorf("exit status = %d, want %d", code, status)
			}
		})
	}
}

func testConcurrentRequests(t *testing.T, s *suite) {
	for _, tc := range []struct {
		concurrency int
		wantThread  string // Python only: where synchronous handlers run
	}{
		{1, "MainThread"},
		{8, "sless-handler"},
	} {
		t.Run(fmt.Sprintf("concurrency %d", tc.concurrency), func(t *testing.T) {
			in := s.startSpecialized(t, specializeRequest{Concurrency: tc.concurrency})
			checkLogIsolation(t, in, "/log-sync", 100)
			if s.rt.name != python {
				return
			}
			thread := fmt.Sprint(in.get(t, "/log-sync?id=thread").json(t)["thread"])
			if !strings.HasPrefix(thread, tc.wantThread) {
				t.Errorf("synchronous handler ran on thread %q with concurrency %d, want %s...", thread, tc.concurrency, tc.wantThread)
			}
			// A synchronous handler may start its own event loop wherever it runs.
			res := in.get(t, "/asyncio-run")
			wantStatus(t, res, http.StatusOK)
			wantJSON(t, res, map[string]any{"async": true})
		})
	}
}

// testBlockingHandlersInParallel checks that synchronous calls that block run
// on as many threads as the concurrency allows, and that a call that blocks
// sends the calls after it to the threads even after many quick calls (which
// may have moved them onto the event loop).
func testBlockingHandlersInParallel(t *testing.T, s *suite) {
	const concurrency = 8
	in := s.startSpecialized(t, specializeRequest{Concurrency: concurrency})
	var wg sync.WaitGroup
	results := make([]result, concurrency)
	errs := make([]error, concurrency)
	for i := range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = in.try(http.MethodGet, fmt.Sprintf("/barrier?n=%d", concurrency), nil, nil)
		}()
	}
	wg.Wait()
	for i := range concurrency {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		if results[i].status != http.StatusOK {
			t.Fatalf("request %d: HTTP %d %s, want %d calls in the handler at once", i, results[i].status, results[i].body, concurrency)
		}
	}
	for range 500 {
		wantStatus(t, in.get(t, "/plain"), http.StatusOK)
	}
	wantStatus(t, in.get(t, "/sleep?ms=5"), http.StatusOK)
	thread := fmt.Sprint(in.get(t, "/thread").json(t)["thread"])
	if !strings.HasPrefix(thread, "sless-handler") {
		t.Errorf("the call after one that blocked for 5 ms ran on thread %q, want a handler thread", thread)
	}
}

// testStandbyWorker checks that a process started without its code has a
// handler thread ready before the code is loaded: the first synchronous call
// of a handler with concurrency > 1 runs on it, and a handler that needs no
// thread does not keep it.
func testStandbyWorker(t *testing.T, s *suite) {
	in := s.startSpecialized(t, specializeRequest{Concurrency: 8})
	got := in.get(t, "/threads").json(t)
	if got["thread"] != "sless-handler-0" || !slices.Contains(got["at_import"].([]any), any("sless-handler-0")) {
		t.Errorf("concurrency 8: the first call ran on thread %v and the threads at import were %v, want it on sless-handler-0, started before the import",
			got["thread"], got["at_import"])
	}
	in = s.startSpecialized(t, specializeRequest{Concurrency: 1})
	got = in.get(t, "/threads").json(t)
	for _, name := range got["alive"].([]any) {
		if strings.HasPrefix(name.(string), "sless-handler") {
			t.Errorf("concurrency 1: thread %v is alive after the first call (threads %v), want no handler thread", name, got["alive"])
		}
	}
}

// testRehearsalLeavesNoTrace checks that the cold start a process started
// without its code rehearses (a throwaway specialize and invocations, whose
// code it writes beside its socket) succeeded and left nothing the function
// could see: no files, module, finder or path entry, and the function's own
// working directory and environment (testEnvAndCwd). The Node.js wrapper
// rehearses in the background after ready: a specialize sent at once stops
// its rehearsal, one sent later finds it ended.
func testRehearsalLeavesNoTrace(t *testing.T, s *suite) {
	for _, rehearsed := range []bool{false, true} {
		in := s.start(t, startOptions{rehearsed: rehearsed})
		in.mustSpecialize(t, specializeRequest{CodeDir: writeFiles(t, s.rt.appFiles()), Handler: "handler.handle",
			Env: appEnv, Function: "fn", Concurrency: 1})
		if _, err := os.Lstat(in.sock + ".rehearsal"); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the rehearsal's code directory beside the socket: %v, want it removed", err)
		}
		wantNoRehearsalTraces(t, s, in)
		if strings.Contains(in.stderr.String(), "rehearsing") {
			t.Errorf("the wrapper's output reports a failed rehearsal:\n%s", in.stderr.String())
		}
	}
}

// wantNoRehearsalTraces checks that the fixture's /rehearsal-traces finds
// nothing of a rehearsal in in's process: no module, no entry of the import
// system's caches, and for Python no path entry and nothing importable.
func wantNoRehearsalTraces(t *testing.T, s *suite, in *instance) {
	t.Helper()
	want := map[string]any{"modules": []any{}, "finders": []any{}}
	if s.rt.name == python {
		want["path"], want["importable"] = []any{}, false
	}
	wantJSON(t, in.get(t, "/rehearsal-traces"), want)
}

// testRehearsalWithoutCode checks that a process that cannot make its
// rehearsal's code directory (here a file is in the way) leaves the file,
// says nothing of it and serves as usual: the Python wrapper rehearses the
// invocation alone, the Node.js one, whose rehearsal's socket is in that
// directory too, does not rehearse.
func testRehearsalWithoutCode(t *testing.T, s *suite) {
	s.skipForked(t) // a forked instance's socket directory is new and its own
	dir, err := os.MkdirTemp("", "sless-rt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "s.sock")
	if err := os.WriteFile(sock+".rehearsal", []byte("in the way"), 0o644); err != nil {
		t.Fatal(err)
	}
	in := s.start(t, startOptions{args: []string{"--listen", "unix:" + sock}})
	in.sock = sock
	in.client = in.newClient(nil)
	in.mustSpecialize(t, specializeRequest{CodeDir: writeFiles(t, s.rt.appFiles()), Handler: "handler.handle",
		Env: appEnv, Function: "fn", Concurrency: 1})
	wantJSON(t, in.get(t, "/plain"), map[string]any{"hello": "world", "n": 1.0})
	if got, err := os.ReadFile(sock + ".rehearsal"); string(got) != "in the way" {
		t.Errorf("the file in the rehearsal's way: %q, %v; want it untouched", got, err)
	}
	if strings.Contains(in.stderr.String(), "rehearsing") {
		t.Errorf("the wrapper's output reports a failed rehearsal:\n%s", in.stderr.String())
	}
}

// rehearsalBreaker is a module node preloads (--require) that makes the
// rehearsal's handler throw once its module has loaded.
const rehearsalBreaker = `
const Module = require('node:module');
const compile = Module.prototype._compile;
Module.prototype._compile = function (content, filename) {
  const result = compile.call(this, content, filename);
  if (filename.endsWith('_sless_rehearsal.js')) this.exports.handle = () => { throw new Error('broken'); };
  return result;
};
`

// testRehearsalFails checks that a process whose rehearsal fails says so,
// leaves nothing of it and serves as usual. The Python rehearsal fails on an
// environment that is not UTF-8, which its specialize request cannot carry;
// the Node.js one on a handler that throws, after its module loaded.
func testRehearsalFails(t *testing.T, s *suite) {
	if s.zygote != nil {
		t.Skip("a forked instance's environment reaches it as JSON, always UTF-8")
	}
	env := []string{"SLESS_TEST_NOT_UTF8=\xff"}
	if s.rt.name == node {
		breaker := filepath.Join(writeFiles(t, map[string]string{"breaker.js": rehearsalBreaker}), "breaker.js")
		env = []string{"NODE_OPTIONS=--require " + breaker}
	}
	in := s.start(t, startOptions{env: env, rehearsed: true})
	in.mustSpecialize(t, specializeRequest{CodeDir: writeFiles(t, s.rt.appFiles()), Handler: "handler.handle",
		Env: appEnv, Function: "fn", Concurrency: 1})
	wantJSON(t, in.get(t, "/plain"), map[string]any{"hello": "world", "n": 1.0})
	wantNoRehearsalTraces(t, s, in)
	if _, err := os.Lstat(in.sock + ".rehearsal"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the rehearsal's code directory beside the socket: %v, want it removed", err)
	}
	eventually(t, "the wrapper's output to report the failed rehearsal", func() bool {
		return strings.Contains(in.stderr.String(), "rehearsing a cold start failed")
	}, func() string { return "stderr:\n" + in.stderr.String() })
}

// testBackgroundTask checks that a coroutine a synchronous handler leaves on
// the wrapper's event loop runs to its end with a running loop, although the
// handler's calls see none.
func testBackgroundTask(t *testing.T, s *suite) {
	in := s.startSpecialized(t, specializeRequest{Concurrency: 1})
	for range 3 {
		wantStatus(t, in.get(t, "/plain"), http.StatusOK)
	}
	wantStatus(t, in.get(t, "/background?id=b1"), http.StatusOK)
	deadline := time.Now().Add(10 * time.Second)
	for in.get(t, "/background-done?id=b1").json(t)["done"] != true {
		if time.Now().After(deadline) {
			t.Fatal("the coroutine the handler started did not finish within 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func testChunkedBody(t *testing.T, s *suite) {
	t.Run("client", func(t *testing.T) {
		req := mustRequest(t, http.MethodPost, "/echo", io.MultiReader(strings.NewReader("hello "), strings.NewReader("chunks")), nil)
		req.TransferEncoding = []string{"chunked"}
		res := s.app.send(t, req)
		wantStatus(t, res, http.StatusOK)
		wantBody(t, res, "hello chunks")
	})
	t.Run("raw pieces with extensions and trailers", func(t *testing.T) {
		conn := s.app.dial(t)
		pieces := []string{
			"POST /echo HTTP/1.1\r\nHost: sless\r\nTransfer-Encoding: chunked\r\n\r\n",
			"5;name=value\r\nhel", "lo\r\n", "7\r\n, world\r\n", "0\r\n", "X-Trailer: yes\r\n", "\r\n",
		}
		for _, p := range pieces {
			if _, err := io.WriteString(conn, p); err != nil {
				t.Fatal(err)
			}
		}
		res := readResponse(t, conn, http.MethodPost)
		wantStatus(t, res, http.StatusOK)
		wantBody(t, res, "hello, world")
	})
}

func testLargeBody(t *testing.T, s *suite) {
	body := make([]byte, 5<<20)
	if _, err := rand.Read(body); err != nil {
		t.Fatal(err)
	}
	res := s.app.do(t, http.MethodPost, "/echo", bytes.NewReader(body), nil)
	wantStatus(t, res, http.StatusOK)
	if !bytes.Equal(res.body, body) {
		t.Errorf("echoed body: got %d bytes, want the %d bytes sent back intact", len(res.body), len(body))
	}
}

func testKeepAlive(t *testing.T, s *suite) {
	var dials atomic.Int64
	client := s.app.newClient(&dials)
	t.Cleanup(client.CloseIdleConnections)
	for i := range 200 {
		method := http.MethodGet
		if i%50 == 49 {
			method = http.MethodHead // no body may follow the head of a HEAD response
		}
		req := mustRequest(t, method, "/plain", nil, nil)
		res, err := roundTrip(client, req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		wantStatus(t, res, http.StatusOK)
		if method == http.MethodHead {
			wantBody(t, res, "")
		} else {
			wantBody(t, res, `{"hello":"world","n":1}`)
		}
	}
	if got := dials.Load(); got != 1 {
		t.Errorf("200 sequential requests used %d connections, want 1", got)
	}
}

func testPipelining(t *testing.T, s *suite) {
	conn := s.app.dial(t)
	requests := "GET /plain HTTP/1.1\r\nHost: sless\r\n\r\n" +
		"POST /echo HTTP/1.1\r\nHost: sless\r\nContent-Length: 6\r\n\r\nsecond" +
		"GET /event HTTP/1.1\r\nHost: sless\r\nConnection: close\r\n\r\n"
	if _, err := io.WriteString(conn, requests); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	for _, want := range []string{`{"hello":"world","n":1}`, "second", `{"kind":"null","event":null}`} {
		res := readResponseFrom(t, br, http.MethodGet)
		wantStatus(t, res, http.StatusOK)
		wantBody(t, res, want)
	}
	if n, err := br.Read(make([]byte, 1)); err == nil {
		t.Errorf("read %d more bytes after the Connection: close response, want EOF", n)
	}
}

// The embedded mode sends a cold start's invocation right behind the
// specialize request, before its answer (PROTOCOL.md): the wrapper answers
// the specialize first and serves the invocation with the handler loaded,
// also when loading takes a while (an ES module's top-level await), and
// answers 503 behind a failed load. The invocation's time counts from when
// the wrapper starts serving it, after the load.
func testSpecializePipelined(t *testing.T, s *suite) {
	slow := map[string]string{"handler.py": "import time\ntime.sleep(0.5)\n" +
		"def handle(event, context):\n    return {'loaded': True, 'event': event, 'remaining': context.remaining_ms()}\n"}
	broken := map[string]string{"handler.py": "raise ValueError('broken')\n"}
	if s.rt.name == node {
		slow = map[string]string{"package.json": `{"type": "module"}`,
			"handler.js": "await new Promise((resolve) => setTimeout(resolve, 500));\n" +
				"export const handle = (event, context) => ({ loaded: true, event, remaining: context.remainingMs() });\n"}
		broken = map[string]string{"handler.js": "throw new Error('broken');\n"}
	}
	for _, tc := range []struct {
		name                           string
		files                          map[string]string
		specializeStatus, invokeStatus int
	}{{"loads", slow, http.StatusOK, http.StatusOK}, {"fails to load", broken, http.StatusInternalServerError, http.StatusServiceUnavailable}} {
		t.Run(tc.name, func(t *testing.T) {
			in := s.start(t)
			body := in.specializeBody(t, specializeRequest{CodeDir: writeFiles(t, tc.files), Handler: "handler.handle", Env: appEnv, Function: "fn"})
			conn := in.dial(t)
			requests := fmt.Sprintf("POST /_sless/specialize HTTP/1.1\r\nHost: sless\r\nContent-Type: application/json\r\n"+
				"Content-Length: %d\r\n\r\n%s", len(body), body) +
				"POST / HTTP/1.1\r\nHost: sless\r\nX-Sless-Timeout-Ms: 1000\r\nContent-Type: application/json\r\nContent-Length: 4\r\n\r\n\"hi\""
			if _, err := io.WriteString(conn, requests); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(conn)
			wantStatus(t, readResponseFrom(t, br, http.MethodPost), tc.specializeStatus)
			res := readResponseFrom(t, br, http.MethodPost)
			wantStatus(t, res, tc.invokeStatus)
			if tc.invokeStatus != http.StatusOK {
				return
			}
			got := res.json(t)
			if got["loaded"] != true || got["event"] != "hi" {
				t.Errorf("answer = %v, want loaded true and event hi", got)
			}
			// Counted from the request's arrival, the load's half second
			// would have been taken off the handler's time.
			if remaining, _ := got["remaining"].(float64); remaining <= 600 || remaining > 1000 {
				t.Errorf("remaining time = %v ms of a 1000 ms timeout, after a load of 500 ms; want it counted from the specialize answer", got["remaining"])
			}
		})
	}
}

func testClientGoneMidBody(t *testing.T, s *suite) {
	conn := s.app.dial(t)
	if _, err := io.WriteString(conn, "POST /echo HTTP/1.1\r\nHost: sless\r\nContent-Length: 100\r\n\r\npartial"); err != nil {
		t.Fatal(err)
	}
	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, s.app.get(t, "/plain"), http.StatusOK)
}

func testExpectContinue(t *testing.T, s *suite) {
	client := s.app.newClient(nil)
	t.Cleanup(client.CloseIdleConnections)
	client.Transport.(*http.Transport).ExpectContinueTimeout = time.Minute
	req := mustRequest(t, http.MethodPost, "/echo", strings.NewReader("after continue"), map[string]string{"Expect": "100-continue"})
	started := time.Now()
	res, err := roundTrip(client, req)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, http.StatusOK)
	wantBody(t, res, "after continue")
	// Without "100 Continue" the client would hold the body for the full minute.
	if elapsed := time.Since(started); elapsed > 20*time.Second {
		t.Errorf("request took %v, want the body sent on 100 Continue instead of after the client's timeout", elapsed)
	}
}

// ---------------------------------------------------------------------------
// Instances

// instance is one running wrapper process.
type instance struct {
	sock     string
	client   *http.Client
	stdout   testenv.SyncBuffer
	stderr   testenv.SyncBuffer
	exited   chan struct{}
	exitCode int      // set when exited is closed; -1 when killed by a signal
	ready    *os.File // read end of the --ready-fd pipe
	// box is the sandbox of a forked instance, and code the directory
	// mounted as its code dir once specialize named it.
	box  *sandbox.Instance
	code string
	// rehearsalEnded, when not nil, is closed once the rehearsal's directory
	// was removed (startOptions.rehearsed).
	rehearsalEnded <-chan struct{}
}

type startOptions struct {
	args []string // extra command-line arguments
	env  []string // extra environment variables
	// rehearsed: start returns once the process's rehearsal ended (at
	// ready for Python; for Node.js, which rehearses after ready, once the
	// rehearsal removed its directory beside the socket).
	rehearsed bool
}

// start launches the wrapper and waits until it reports ready.
func (s *suite) start(t *testing.T, opts ...startOptions) *instance {
	t.Helper()
	in := s.launch(t, opts...)
	if err := in.ready.SetReadDeadline(time.Now().Add(startTimeout)); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(in.ready).ReadString('\n')
	if line != "ready\n" {
		t.Fatalf("ready line: got %q (%v), want %q; stderr:\n%s", line, err, "ready\n", in.stderr.String())
	}
	if in.rehearsalEnded != nil {
		select {
		case <-in.rehearsalEnded:
		case <-time.After(startTimeout):
			t.Fatalf("the rehearsal did not end within %v; stderr:\n%s", startTimeout, in.stderr.String())
		}
	}
	return in
}

// launch starts the wrapper process without waiting for it to become ready.
func (s *suite) launch(t *testing.T, opts ...startOptions) *instance {
	t.Helper()
	var opt startOptions
	if len(opts) > 0 {
		opt = opts[0]
	}
	if s.zygote != nil {
		return s.fork(t, opt)
	}
	// Unix socket paths are limited to about 100 bytes: t.TempDir can be longer.
	dir, err := os.MkdirTemp("", "sless-rt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	in := &instance{sock: filepath.Join(dir, "s.sock"), exited: make(chan struct{})}
	in.client = in.newClient(nil)
	if opt.rehearsed && s.rt.name == node {
		in.rehearsalEnded = watchRemoval(t, dir, filepath.Base(in.sock)+".rehearsal")
	}

	readyR, readyW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	in.ready = readyR
	args := []string{s.script, "--listen", "unix:" + in.sock, "--ready-fd", "3"}
	if s.rt.loop != "" {
		args = append(args, "--loop", s.rt.loop)
	}
	args = append(args, opt.args...)
	cmd := exec.Command(s.interp, args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), startOnlyVar+"=1"), opt.env...)
	cmd.Stdout = &in.stdout
	cmd.Stderr = &in.stderr
	cmd.ExtraFiles = []*os.File{readyW} // becomes fd 3
	err = cmd.Start()
	readyW.Close()
	if err != nil {
		readyR.Close()
		t.Fatalf("starting %s: %v", s.rt.name, err)
	}
	go func() {
		cmd.Wait()
		in.exitCode = cmd.ProcessState.ExitCode()
		close(in.exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-in.exited
		readyR.Close()
		in.client.CloseIdleConnections()
	})
	return in
}

// watchRemoval returns a channel closed once name is removed from dir.
func watchRemoval(t *testing.T, dir, name string) <-chan struct{} {
	t.Helper()
	w, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	if err := w.Add(dir); err != nil {
		t.Fatal(err)
	}
	removed := make(chan struct{})
	go func() {
		for ev := range w.Events {
			if ev.Has(fsnotify.Remove) && filepath.Base(ev.Name) == name {
				close(removed)
				return
			}
		}
	}()
	return removed
}

// startSpecialized starts a wrapper and specializes it; req's zero fields
// default to the routing fixture (written to a fresh dir when Files is nil).
func (s *suite) startSpecialized(t *testing.T, req specializeRequest) *instance {
	t.Helper()
	if req.Files == nil {
		req.Files = s.rt.appFiles()
	}
	if req.CodeDir == "" {
		req.CodeDir = writeFiles(t, req.Files)
	}
	if req.Handler == "" {
		req.Handler = "handler.handle"
	}
	if req.Env == nil {
		req.Env = appEnv
	}
	if req.Function == "" {
		req.Function = "fn"
	}
	in := s.start(t)
	in.mustSpecialize(t, req)
	return in
}

// waitExit waits for the process to exit and returns its exit status.
func (in *instance) waitExit(t *testing.T) int {
	t.Helper()
	select {
	case <-in.exited:
		return in.exitCode
	case <-time.After(startTimeout):
		t.Fatalf("the process did not exit within %v; stderr:\n%s", startTimeout, in.stderr.String())
		return 0
	}
}

func (in *instance) dialer(dials *atomic.Int64) func(ctx context.Context, _, _ string) (net.Conn, error) {
	return func(ctx context.Context, _, _ string) (net.Conn, error) {
		if dials != nil {
			dials.Add(1)
		}
		var d net.Dialer
		return d.DialContext(ctx, "unix", in.sock)
	}
}

// newClient returns an HTTP client that talks to the instance's socket,
// counting the connections it opens in dials when that is not nil.
func (in *instance) newClient(dials *atomic.Int64) *http.Client {
	return &http.Client{
		Timeout: requestTimeout,
		Transport: &http.Transport{
			DialContext:         in.dialer(dials),
			MaxIdleConnsPerHost: 100,
			DisableCompression:  true,
		},
	}
}

// dial opens a raw connection to the instance, closed when the test ends.
func (in *instance) dial(t *testing.T) net.Conn {
	t.Helper()
	conn, err := net.DialTimeout("unix", in.sock, requestTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.SetDeadline(time.Now().Add(requestTimeout)); err != nil {
		t.Fatal(err)
	}
	return conn
}

// specializeRequest is the body of POST /_sless/specialize. Files is only used
// by startSpecialized: the handler files to write into a fresh code dir.
type specializeRequest struct {
	CodeDir     string            `json:"code_dir"`
	Handler     string            `json:"handler"`
	Env         map[string]string `json:"env"`
	Function    string            `json:"function"`
	Namespace   string            `json:"namespace"`
	Concurrency int               `json:"concurrency,omitempty"`
	Files       map[string]string `json:"-"`
}

func (in *instance) specialize(t *testing.T, req specializeRequest) result {
	t.Helper()
	return in.do(t, http.MethodPost, "/_sless/specialize", bytes.NewReader(in.specializeBody(t, req)), nil)
}

// specializeBody returns the body of a specialize request for in.
func (in *instance) specializeBody(t *testing.T, req specializeRequest) []byte {
	t.Helper()
	if in.box != nil && filepath.IsAbs(req.CodeDir) {
		// As the platform does: the code appears at /code in the sandbox.
		if in.code == "" {
			if err := in.box.MountCode(req.CodeDir); err != nil {
				t.Fatal(err)
			}
			in.code = req.CodeDir
		}
		req.CodeDir = sandbox.CodeDir
	}
	body, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

func (in *instance) mustSpecialize(t *testing.T, req specializeRequest) {
	t.Helper()
	res := in.specialize(t, req)
	if res.status != http.StatusOK {
		t.Fatalf("specialize %s: got %d %s, want 200", req.Handler, res.status, res.body)
	}
	if _, ok := res.json(t)["load_ms"].(float64); !ok {
		t.Fatalf("specialize %s: body %s, want load_ms", req.Handler, res.body)
	}
}

// ---------------------------------------------------------------------------
// HTTP helpers

// result is a fully read response.
type result struct {
	status int
	header http.Header
	body   []byte
}

func newRequest(method, target string, body io.Reader, header map[string]string) (*http.Request, error) {
	req, err := http.NewRequest(method, "http://sless"+target, body)
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	return req, nil
}

func mustRequest(t *testing.T, method, target string, body io.Reader, header map[string]string) *http.Request {
	t.Helper()
	req, err := newRequest(method, target, body, header)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func (in *instance) send(t *testing.T, req *http.Request) result {
	t.Helper()
	res, err := roundTrip(in.client, req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	return res
}

func (in *instance) do(t *testing.T, method, target string, body io.Reader, header map[string]string) result {
	t.Helper()
	return in.send(t, mustRequest(t, method, target, body, header))
}

func (in *instance) get(t *testing.T, target string) result {
	t.Helper()
	return in.do(t, http.MethodGet, target, nil, nil)
}

// try is do for goroutines other than the test's: it returns the error.
func (in *instance) try(method, target string, body io.Reader, header map[string]string) (result, error) {
	req, err := newRequest(method, target, body, header)
	if err != nil {
		return result{}, err
	}
	return roundTrip(in.client, req)
}

func roundTrip(client *http.Client, req *http.Request) (result, error) {
	resp, err := client.Do(req)
	if err != nil {
		return result{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return result{}, err
	}
	return result{status: resp.StatusCode, header: resp.Header, body: body}, nil
}

func readResponse(t *testing.T, conn net.Conn, method string) result {
	t.Helper()
	return readResponseFrom(t, bufio.NewReader(conn), method)
}

func readResponseFrom(t *testing.T, br *bufio.Reader, method string) result {
	t.Helper()
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("reading a response: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading a response body: %v", err)
	}
	return result{status: resp.StatusCode, header: resp.Header, body: body}
}

func (r result) json(t *testing.T) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("response body %q: got invalid JSON object (%v), want one", r.body, err)
	}
	return v
}

// logs decodes X-Sless-Logs ("" when absent), which must be a JSON string in ASCII.
func (r result) logs(t *testing.T) string {
	t.Helper()
	raw := r.header.Get("X-Sless-Logs")
	if raw == "" {
		return ""
	}
	for _, c := range []byte(raw) {
		if c < 0x20 || c > 0x7e {
			t.Errorf("X-Sless-Logs contains byte %#x, want printable ASCII only", c)
			break
		}
	}
	var logs string
	if err := json.Unmarshal([]byte(raw), &logs); err != nil {
		t.Fatalf("X-Sless-Logs %q: got %v, want a JSON string", raw, err)
	}
	return logs
}

func wantStatus(t *testing.T, r result, want int) {
	t.Helper()
	if r.status != want {
		t.Errorf("status: got %d (body %q), want %d", r.status, truncate(r.body), want)
	}
}

func wantHeader(t *testing.T, r result, name, want string) {
	t.Helper()
	if got := r.header.Get(name); got != want {
		t.Errorf("%s: got %q, want %q", name, got, want)
	}
}

func wantBody(t *testing.T, r result, want string) {
	t.Helper()
	if string(r.body) != want {
		t.Errorf("body: got %q, want %q", truncate(r.body), want)
	}
}

func wantJSON(t *testing.T, r result, want map[string]any) {
	t.Helper()
	if got := r.json(t); !reflect.DeepEqual(got, want) {
		t.Errorf("body: got %v, want %v", got, want)
	}
}

func truncate(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "..."
	}
	return string(b)
}

// ---------------------------------------------------------------------------
// Utilities

// writeFiles writes files (relative path -> content) into a new temp dir.
func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// eventually polls cond until it holds or startTimeout passes.
func eventually(t *testing.T, what string, cond func() bool, state func() string) {
	t.Helper()
	deadline := time.Now().Add(startTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s; %s", startTimeout, what, state())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
