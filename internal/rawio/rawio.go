// Package rawio reads and writes sockets, and appends to files, with raw
// system calls.
//
// Go enters every read and write through the scheduler's syscall bookkeeping
// (entersyscall/exitsyscall), which exists for calls that may block. When
// the process was idle, entering a system call wakes the runtime's monitor
// thread (sysmon, a futex wake), which then polls every 20 µs until the
// process is idle again. A server that goes idle between requests pays that
// on every request: on /fn at one connection it was a fifth of the server's
// CPU per request.
//
// A socket of the net package is non-blocking, so its reads and writes never
// block: Conn makes them raw calls, still parking on the network poller (and
// honouring deadlines) when the socket has nothing to read or no room to
// write. File does the same for appends to a regular file, which go to
// the page cache; such a write can still wait in the kernel (the page cache
// throttling a process that dirties pages faster than the disk takes them),
// and a raw call keeps its P meanwhile, so it is only for small appends on a
// request's path (the invocation journal), never for bulk writes.
package rawio

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Conn is a net.Conn whose Read and Write use raw system calls. Everything
// else is the wrapped connection's. Like a net.Conn, it is safe for
// concurrent use, and a Read or Write allocates nothing.
type Conn struct {
	net.Conn
	raw syscall.RawConn
	// The read and the write in progress; each takes its lock, so that
	// concurrent calls do not share them.
	rd, wr, peek call
	peekByte     [1]byte
}

// call is the state of one raw call in progress, and fn, bound once, what
// the raw connection runs with the descriptor: a closure made per call
// would be allocated on every read and write.
type call struct {
	mu    sync.Mutex
	buf   []byte
	done  int
	errno syscall.Errno
	fn    func(fd uintptr) bool
}

// Wrap returns c with raw reads and writes, or c itself when it has no file
// descriptor to use (a pipe in a test).
func Wrap(c net.Conn) net.Conn {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return c
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return c
	}
	rc := &Conn{Conn: c, raw: raw}
	rc.rd.fn, rc.wr.fn, rc.peek.fn = rc.rd.read, rc.wr.write, rc.peek.peek
	return rc
}

// Read reads like net.Conn's Read: it waits for data (or the read deadline)
// on the network poller and returns io.EOF at the end of the stream.
func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, errno, err := c.rd.run(c.raw.Read, p)
	switch {
	case err != nil: // the poller's: a deadline, a closed connection
		return 0, err
	case errno != 0:
		return 0, c.opError("read", errno)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// Write writes all of p like net.Conn's Write, waiting on the network
// poller while the socket's buffer is full.
func (c *Conn) Write(p []byte) (int, error) {
	n, errno, err := c.wr.run(c.raw.Write, p)
	switch {
	case err != nil:
		return n, err
	case errno != 0:
		return n, c.opError("write", errno)
	}
	return n, nil
}

// Idle reports whether the connection has nothing to read and was not
// closed by its peer, with one non-blocking peek. A request-response
// connection kept for reuse is fit for the next request only when idle:
// anything else (bytes nobody asked for, the end of the stream, an error)
// means the peer is gone or broken.
func (c *Conn) Idle() bool {
	_, errno, err := c.peek.run(c.raw.Read, c.peekByte[:])
	return err == nil && errno == unix.EAGAIN
}

// run runs raw (the raw connection's Read or Write) with o.fn on p, under
// o's lock, and returns what o.fn did.
func (o *call) run(raw func(func(uintptr) bool) error, p []byte) (done int, errno syscall.Errno, err error) {
	o.mu.Lock()
	o.buf, o.done, o.errno = p, 0, 0
	err = raw(o.fn)
	done, errno = o.done, o.errno
	o.buf = nil
	o.mu.Unlock()
	return done, errno, err
}

// read is one read(2) of o.buf; it asks the poller to wait while there is
// nothing to read.
func (o *call) read(fd uintptr) bool {
	for {
		r, _, e := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&o.buf[0])), uintptr(len(o.buf)))
		if e == unix.EINTR {
			continue
		}
		o.done, o.errno = int(r), e
		return e != unix.EAGAIN
	}
}

// write writes all of o.buf; it asks the poller to wait while the socket's
// buffer is full.
func (o *call) write(fd uintptr) bool {
	for o.done < len(o.buf) {
		r, _, e := unix.RawSyscall(unix.SYS_WRITE, fd, uintptr(unsafe.Pointer(&o.buf[o.done])), uintptr(len(o.buf)-o.done))
		switch e {
		case 0:
			o.done += int(r)
		case unix.EINTR:
		case unix.EAGAIN:
			return false
		default:
			o.errno = e
			return true
		}
	}
	return true
}

// peek peeks at one byte without waiting; errno is EAGAIN when there is
// nothing to read.
func (o *call) peek(fd uintptr) bool {
	_, _, o.errno = unix.RawSyscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&o.buf[0])), 1,
		unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
	return true
}

func (c *Conn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: c.LocalAddr().Network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

// File is a file whose writes use raw system calls (see the package comment
// for when that fits). It is safe for concurrent use, and a Write allocates
// nothing.
type File struct {
	f   *os.File
	raw syscall.RawConn
	wr  call
}

// NewFile returns f with raw writes; f stays the caller's to close.
func NewFile(f *os.File) (*File, error) {
	raw, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	rf := &File{f: f, raw: raw}
	rf.wr.fn = rf.wr.writeFile
	return rf, nil
}

// Write writes all of p at the file's offset. Errors are *os.PathError, as
// os.File's.
func (f *File) Write(p []byte) (int, error) {
	n, errno, err := f.wr.run(f.raw.Write, p)
	if err == nil && errno != 0 {
		err = &os.PathError{Op: "write", Path: f.f.Name(), Err: errno}
	}
	return n, err
}

// writeFile writes all of o.buf to a regular file, which never asks to
// wait.
func (o *call) writeFile(fd uintptr) bool {
	for o.done < len(o.buf) && o.errno == 0 {
		r, _, e := unix.RawSyscall(unix.SYS_WRITE, fd, uintptr(unsafe.Pointer(&o.buf[o.done])), uintptr(len(o.buf)-o.done))
		switch {
		case e == 0 && r == 0:
			o.errno = unix.EIO // no progress: never loop forever
		case e == 0:
			o.done += int(r)
		case e != unix.EINTR:
			o.errno = e
		}
	}
	return true
}
