package rawio_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"sless.kube5s.ru/sless/internal/rawio"
)

// pair returns both ends of a connection over network ("tcp" or "unix"),
// the dialed one wrapped.
func pair(t *testing.T, network string) (wrapped, peer net.Conn) {
	t.Helper()
	addr := "127.0.0.1:0"
	if network == "unix" {
		addr = filepath.Join(t.TempDir(), "s")
	}
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c, err := net.Dial(network, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	peer = <-accepted
	if peer == nil {
		t.Fatal("accept failed")
	}
	wrapped = rawio.Wrap(c)
	if _, ok := wrapped.(*rawio.Conn); !ok {
		t.Fatalf("Wrap(%T) = %T, want *rawio.Conn", c, wrapped)
	}
	t.Cleanup(func() { wrapped.Close(); peer.Close() })
	return wrapped, peer
}

func TestLargeWriteWaitsForRoom(t *testing.T) {
	for _, network := range []string{"tcp", "unix"} {
		t.Run(network, func(t *testing.T) {
			c, peer := pair(t, network)
			// Far more than a socket buffer holds, so that Write meets a full
			// buffer and must wait on the poller for the reader.
			want := bytes.Repeat([]byte("0123456789abcdef"), 1<<19)
			got := make(chan []byte, 1)
			go func() {
				b, _ := io.ReadAll(peer)
				got <- b
			}()
			n, err := c.Write(want)
			if err != nil || n != len(want) {
				t.Fatalf("Write = %d, %v; want %d, nil", n, err, len(want))
			}
			c.Close()
			if b := <-got; !bytes.Equal(b, want) {
				t.Fatalf("the peer read %d bytes, not the %d written in order", len(b), len(want))
			}
		})
	}
}

func TestReadWaitsForDataThenEOF(t *testing.T) {
	c, peer := pair(t, "tcp")
	go func() {
		time.Sleep(20 * time.Millisecond) // Read must wait on the poller
		peer.Write([]byte("hello"))
		peer.Close()
	}()
	b, err := io.ReadAll(c)
	if err != nil || string(b) != "hello" {
		t.Fatalf("ReadAll = %q, %v; want hello, nil", b, err)
	}
	if n, err := c.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("Read after the end = %d, %v; want 0, io.EOF", n, err)
	}
}

func TestReadDeadline(t *testing.T) {
	c, _ := pair(t, "tcp")
	c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Read past the deadline = %v, want a timeout", err)
	}
}

func TestClosed(t *testing.T) {
	c, _ := pair(t, "tcp")
	c.Close()
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read after Close = %v, want net.ErrClosed", err)
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write after Close = %v, want net.ErrClosed", err)
	}
}

func TestWriteToAClosedPeerFails(t *testing.T) {
	c, peer := pair(t, "unix")
	peer.Close()
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		_, err = c.Write([]byte("x"))
	}
	if !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("Write to a closed peer = %v, want EPIPE or ECONNRESET", err)
	}
}

func TestWrapWithoutDescriptor(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if got := rawio.Wrap(a); got != a {
		t.Fatalf("Wrap(net.Pipe) = %T, want the pipe itself", got)
	}
}

func TestFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := rawio.NewFile(f)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"one ", "two"} {
		if n, err := w.Write([]byte(s)); err != nil || n != len(s) {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if b, _ := os.ReadFile(path); string(b) != "one two" {
		t.Fatalf("file holds %q, want %q", b, "one two")
	}

	ro, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	rw, err := rawio.NewFile(ro)
	if err != nil {
		t.Fatal(err)
	}
	_, err = rw.Write([]byte("x"))
	var pe *os.PathError
	if !errors.As(err, &pe) || !errors.Is(err, syscall.EBADF) {
		t.Fatalf("Write to a read-only file = %v, want a *os.PathError with EBADF", err)
	}
}

func TestIdle(t *testing.T) {
	c, peer := pair(t, "unix")
	rc := c.(*rawio.Conn)
	if !rc.Idle() {
		t.Fatal("Idle() = false on a quiet connection, want true")
	}
	peer.Write([]byte("x"))
	deadline := time.Now().Add(5 * time.Second)
	for rc.Idle() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if rc.Idle() {
		t.Fatal("Idle() = true with a byte to read, want false")
	}
	buf := make([]byte, 1)
	if n, err := c.Read(buf); n != 1 || buf[0] != 'x' {
		t.Fatalf("the peek consumed the byte: Read = %d, %v, %q", n, err, buf)
	}
	peer.Close()
	for rc.Idle() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if rc.Idle() {
		t.Fatal("Idle() = true after the peer closed, want false")
	}
}

// Reads and writes allocate nothing: they run on every /fn request.
func TestNoAllocations(t *testing.T) {
	c, peer := pair(t, "tcp")
	go io.Copy(peer, peer) // echo
	msg, buf := []byte("hello"), make([]byte, 5)
	if allocs := testing.AllocsPerRun(100, func() {
		c.Write(msg)
		io.ReadFull(c, buf)
	}); allocs != 0 {
		t.Errorf("a Write and a Read allocate %v objects, want 0", allocs)
	}
}
