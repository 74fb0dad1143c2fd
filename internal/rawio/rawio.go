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
// write. WriteFile does the same for appends to a regular file, which go to
// the page cache; such a write can still wait in the kernel (the page cache
// throttling a process that dirties pages faster than the disk takes them),
// and a raw call keeps its P meanwhile, so it is only for small appends on a
// request's path (the invocation journal), never for bulk writes.
package rawio

import (
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Conn is a net.Conn whose Read and Write use raw system calls. Everything
// else is the wrapped connection's.
type Conn struct {
	net.Conn
	raw syscall.RawConn
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
	return &Conn{Conn: c, raw: raw}
}

// Read reads like net.Conn's Read: it waits for data (or the read deadline)
// on the network poller and returns io.EOF at the end of the stream.
func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var (
		n     int
		errno syscall.Errno
	)
	err := c.raw.Read(func(fd uintptr) bool {
		for {
			r, _, e := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
			if e == unix.EINTR {
				continue
			}
			n, errno = int(r), e
			return e != unix.EAGAIN
		}
	})
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
	written := 0
	var errno syscall.Errno
	err := c.raw.Write(func(fd uintptr) bool {
		for written < len(p) {
			r, _, e := unix.RawSyscall(unix.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[written])), uintptr(len(p)-written))
			switch e {
			case 0:
				written += int(r)
			case unix.EINTR:
			case unix.EAGAIN:
				return false
			default:
				errno = e
				return true
			}
		}
		return true
	})
	switch {
	case err != nil:
		return written, err
	case errno != 0:
		return written, c.opError("write", errno)
	}
	return written, nil
}

func (c *Conn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: c.LocalAddr().Network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

// SyscallConn returns the wrapped connection's raw connection.
func (c *Conn) SyscallConn() (syscall.RawConn, error) { return c.raw, nil }

// WriteFile writes all of p to f at its offset with raw system calls (see
// the package comment for when that fits). Errors are *os.PathError, as
// f.Write's.
func WriteFile(f *os.File, p []byte) (int, error) {
	raw, err := f.SyscallConn()
	if err != nil {
		return f.Write(p)
	}
	written := 0
	var errno syscall.Errno
	err = raw.Write(func(fd uintptr) bool {
		for written < len(p) && errno == 0 {
			r, _, e := unix.RawSyscall(unix.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[written])), uintptr(len(p)-written))
			switch {
			case e == 0 && r == 0:
				errno = unix.EIO // no progress: never loop forever
			case e == 0:
				written += int(r)
			case e != unix.EINTR:
				errno = e
			}
		}
		return true
	})
	if err == nil && errno != 0 {
		err = &os.PathError{Op: "write", Path: f.Name(), Err: errno}
	}
	return written, err
}
