// Package runtimes embeds the language wrappers that run inside every function
// instance. Each wrapper is a single source file that implements the instance
// protocol (modules/runtime/PROTOCOL.md) with its language's standard library
// only; the platform writes it to disk and starts it with the runtime's
// interpreter.
package runtimes

import _ "embed"

// PythonServer is the source of the Python 3.11 wrapper
// (runtimes/python3.11/server.py), started as
// `python3.11 server.py --listen ...`. Treat it as read-only.
//
//go:embed python3.11/server.py
var PythonServer []byte

// PythonZygote is the fork server of Python instances
// (runtimes/python3.11/zygote.py), which imports PythonServer once and forks
// sandboxed instances of it (see modules/runtime/PROTOCOL.md, "Forked
// instances"). Treat it as read-only.
//
//go:embed python3.11/zygote.py
var PythonZygote []byte

// PythonCompiler compiles the Python sources of a build to .pyc contents
// (runtimes/python3.11/compile.py), started as `python -I -S -c <it>`.
// Treat it as read-only.
//
//go:embed python3.11/compile.py
var PythonCompiler []byte

// NodeServer is the source of the Node.js 20 wrapper
// (runtimes/nodejs20/server.js), started as `node server.js --listen ...`.
// Treat it as read-only.
//
//go:embed nodejs20/server.js
var NodeServer []byte
