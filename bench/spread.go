package main

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"sync"
	"syscall"
	"time"
)

// The spread's reference: the same load sent straight to the warm
// instances' own sockets, with no sless server in between, next to the
// spread through /fn from the same client. What the server adds is the
// difference; what the instances cost when each serves a request a second
// or so apart, on a machine running a thousand of them, is the reference's
// own p99.

// endpoint is where some of the spread's requests go, with its idle
// keep-alive connections.
type endpoint struct {
	network, addr string
	mu            sync.Mutex
	idle          []*clientConn
}

type clientConn struct {
	net.Conn
	br *bufio.Reader
}

func (e *endpoint) get() (*clientConn, error) {
	e.mu.Lock()
	if n := len(e.idle); n > 0 {
		c := e.idle[n-1]
		e.idle = e.idle[:n-1]
		e.mu.Unlock()
		return c, nil
	}
	e.mu.Unlock()
	c, err := net.Dial(e.network, e.addr)
	if err != nil {
		return nil, err
	}
	return &clientConn{Conn: c, br: bufio.NewReader(c)}, nil
}

func (e *endpoint) put(c *clientConn) {
	e.mu.Lock()
	e.idle = append(e.idle, c)
	e.mu.Unlock()
}

func (e *endpoint) close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, c := range e.idle {
		c.Close()
	}
	e.idle = nil
}

// spreadTarget is one request of the spread: its endpoint and its bytes.
type spreadTarget struct {
	ep  *endpoint
	req []byte
}

// do sends t's request on a keep-alive connection and reads the answer,
// which must be a 200.
func (t spreadTarget) do() error {
	c, err := t.ep.get()
	if err != nil {
		return err
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write(t.req); err != nil {
		c.Close()
		return err
	}
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		c.Close()
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || resp.Close {
		c.Close()
	} else {
		t.ep.put(c)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return err
}

// spreadLoad sends targets' requests, each to one at random, from conns
// clients at once for d, and returns the throughput and latencies.
func spreadLoad(targets []spreadTarget, conns int, d time.Duration) (load, error) {
	var (
		mu        sync.Mutex
		latencies []time.Duration
		firstErr  error
		wg        sync.WaitGroup
	)
	start := time.Now()
	end := start.Add(d)
	for range conns {
		wg.Go(func() {
			var mine []time.Duration
			var err error
			for t0 := time.Now(); t0.Before(end); t0 = time.Now() {
				if err = targets[rand.IntN(len(targets))].do(); err != nil {
					break
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			defer mu.Unlock()
			latencies = append(latencies, mine...)
			if err != nil && firstErr == nil {
				firstErr = err
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	for _, t := range targets {
		t.ep.close()
	}
	if firstErr != nil {
		return load{}, firstErr
	}
	slices.Sort(latencies)
	return load{rps: float64(len(latencies)) / elapsed.Seconds(), p50: pct(latencies, 50), p99: pct(latencies, 99),
		requests: len(latencies)}, nil
}

// fnSpread is the spread through /fn: each path on the server's
// connections.
func fnSpread(serverAddr string, paths []string) []spreadTarget {
	ep := &endpoint{network: "tcp", addr: serverAddr}
	targets := make([]spreadTarget, len(paths))
	for i, p := range paths {
		targets[i] = spreadTarget{ep: ep, req: fmt.Appendf(nil, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", p, serverAddr)}
	}
	return targets
}

// instanceRequest is what the server would send an instance for a GET of
// the hello function, less the headers that only say which invocation it
// is.
var instanceRequest = []byte("GET / HTTP/1.1\r\nHost: instance\r\nContent-Length: 0\r\n\r\n")

// sandboxSocket is where an instance listens inside its sandbox
// (modules/runtime/sandbox.SocketPath); the server, and the bench running
// as root, reach it through /proc/PID/root.
const sandboxSocket = "/run/sless/s.sock"

// instanceSpread finds the sockets of the server's warm instances, the
// processes below it that answer the hello request with a 200 (spares and
// zygotes do not), and returns one target per instance. It needs the
// instance sandbox (a root server): without it, instances listen in a
// directory of the server's own.
func instanceSpread(serverPid int) ([]spreadTarget, error) {
	procs, err := descendants(serverPid)
	if err != nil {
		return nil, err
	}
	type file struct{ dev, ino uint64 }
	seen := map[file]bool{}
	var targets []spreadTarget
	for p := range procs {
		path := fmt.Sprintf("/proc/%d/root%s", p, sandboxSocket)
		var st syscall.Stat_t
		if err := syscall.Stat(path, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFSOCK || seen[file{st.Dev, st.Ino}] {
			continue
		}
		seen[file{st.Dev, st.Ino}] = true
		t := spreadTarget{ep: &endpoint{network: "unix", addr: path}, req: instanceRequest}
		if err := t.do(); err != nil {
			t.ep.close()
			continue // a spare, a zygote, or gone
		}
		targets = append(targets, t)
	}
	if len(targets) == 0 {
		return nil, fmt.Errorf("no instance socket found under %s of the server's processes (the reference needs the instance sandbox: run as root)", sandboxSocket)
	}
	return targets, nil
}
