package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/invoke/proxy"
	"sless.kube5s.ru/sless/modules/runtime"
	"sless.kube5s.ru/sless/modules/runtime/wire"
	"sless.kube5s.ru/sless/modules/server/front"
	"sless.kube5s.ru/sless/modules/server/httpx"
)

// BenchmarkFn measures the server's own part of a /fn request: the front,
// the proxy and the wire client to an instance, with every request a round
// trip through loopback TCP and a unix socket. The instance is a fake that
// answers the instance protocol from a fixed buffer and the clients write
// and read raw HTTP/1.1, both without allocating, so that allocs/op and
// cpu-µs/op (the whole process's CPU, clients and instance included, per
// request) are the server's cost to compare before and after a change of
// the path. The ledger is the tests' fake: its cost is BenchmarkRecord's.
//
//	go test -run '^$' -bench BenchmarkFn -benchtime 20000x ./modules/invoke/proxy/
func BenchmarkFn(b *testing.B) {
	for _, conns := range []int{1, 32} {
		b.Run("conns="+strconv.Itoa(conns), func(b *testing.B) { benchmarkFn(b, conns) })
	}
}

func benchmarkFn(b *testing.B, conns int) {
	sock := filepath.Join(b.TempDir(), "instance.sock")
	stop := fakeInstance(b, sock)
	defer stop()
	client := wire.NewClient(wire.UnixDialer(sock))
	defer client.Close()
	exec := &wireExecutor{client: client, target: &runtime.Target{Namespace: "default", Name: "fn", Timeout: 30 * time.Second}}
	p := proxy.New(proxy.Config{}, exec, fakeStore{}, &fakeLedger{discard: true}, public{}, noTokens{}, slog.New(slog.DiscardHandler))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	f := front.New(front.Config{Routes: []httpx.FastRoute{p}, Fallback: &http.Server{}, Log: slog.New(slog.DiscardHandler)})
	go f.Serve(ln)
	defer f.Shutdown(context.Background())

	req := []byte("GET /fn/default/fn HTTP/1.1\r\nHost: bench\r\nUser-Agent: bench\r\n\r\n")
	clients := make([]net.Conn, conns)
	for i := range clients {
		if clients[i], err = net.Dial("tcp", ln.Addr().String()); err != nil {
			b.Fatal(err)
		}
		defer clients[i].Close()
		roundTrip(b, clients[i], req, make([]byte, 4096)) // warm: the instance connection, the pools
	}
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	per := b.N / conns
	for i := range clients {
		n := per
		if i == 0 {
			n += b.N % conns
		}
		wg.Go(func() {
			buf := make([]byte, 4096)
			for range n {
				roundTrip(b, clients[i], req, buf)
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano()
	b.ReportMetric(float64(cpu)/1e3/float64(b.N), "cpu-µs/op")
}

// roundTrip writes req and reads one response to it: a head ending in a
// blank line and a body of its Content-Length, the only kind the fake
// instance's answers make.
func roundTrip(b *testing.B, c net.Conn, req, buf []byte) {
	if _, err := c.Write(req); err != nil {
		b.Error(err)
		return
	}
	have := 0
	for {
		n, err := c.Read(buf[have:])
		if err != nil {
			b.Error(err)
			return
		}
		have += n
		head := bytes.Index(buf[:have], []byte("\r\n\r\n"))
		if head < 0 {
			continue
		}
		if !bytes.HasPrefix(buf, []byte("HTTP/1.1 200 ")) {
			b.Errorf("answer: %q", buf[:have])
			return
		}
		i := bytes.Index(buf[:head], []byte("Content-Length: "))
		if i < 0 {
			b.Errorf("no Content-Length: %q", buf[:have])
			return
		}
		i += len("Content-Length: ")
		length, _ := strconv.Atoi(string(buf[i : i+bytes.IndexByte(buf[i:], '\r')]))
		if have >= head+4+length {
			return
		}
	}
}

// wireExecutor leases every invocation to one instance through client.
type wireExecutor struct {
	runtime.Instances
	client *wire.Client
	target *runtime.Target
}

func (e *wireExecutor) Acquire(context.Context, functions.Key) (runtime.Lease, error) {
	return wireLease{e}, nil
}

type wireLease struct{ e *wireExecutor }

func (l wireLease) Target() *runtime.Target  { return l.e.target }
func (l wireLease) ColdStart() time.Duration { return 0 }
func (l wireLease) Release()                 {}
func (l wireLease) Do(ctx context.Context, inv *runtime.Invocation, w http.ResponseWriter) (runtime.Result, error) {
	return l.e.client.Do(ctx, inv, w)
}

// fakeInstance serves the instance protocol on a unix socket at path: every
// request (a head without a body, as the benchmark's GETs are) gets the same
// hello answer. It returns a function that stops it.
func fakeInstance(b *testing.B, path string) (stop func()) {
	ln, err := net.Listen("unix", path)
	if err != nil {
		b.Fatal(err)
	}
	answer := []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Sless-Handler-Us: 4\r\nContent-Length: 27\r\n\r\n" +
		`{"message":"Hello, world!"}`)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReaderSize(c, 16<<10)
				for {
					// A request ends at its blank line: the wire client sends
					// a body only when the client did.
					for {
						line, err := r.ReadSlice('\n')
						if err != nil {
							return
						}
						if len(line) <= 2 {
							break
						}
					}
					if _, err := c.Write(answer); err != nil {
						return
					}
				}
			}()
		}
	}()
	return func() { ln.Close() }
}
