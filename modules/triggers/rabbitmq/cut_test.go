package rabbitmq

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	amqp "github.com/rabbitmq/amqp091-go"
)

// TestCrashAfterTheBrokerSettled cuts the runner off the broker right after
// the broker applied a retry copy or the dead letter, before the runner
// learns of it, and replaces the runner, as a crash of sless would: the
// message still runs three times and is dead-lettered once.
func TestCrashAfterTheBrokerSettled(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// publishes is the runner's publish after whose settlement the
		// connection is cut: its retry copies and then its dead letter.
		publishes int
	}{
		{"first retry copy", 1},
		{"second retry copy", 2},
		{"dead letter", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, alwaysFail)
			proxy := startCutProxy(t, h.url, tc.publishes)
			tr := h.retriedTrigger()
			tr.URL = proxy.url
			h.applyReady(tr)
			h.publish("", "jobs", amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte("x")})
			select {
			case <-proxy.cut:
			case <-time.After(waitTimeout):
				t.Fatalf("after %v: the connection was not cut after publish %d", waitTimeout, tc.publishes)
			}
			h.restart(h.retriedTrigger())

			// Until the message is dead-lettered its copy is in the queue,
			// ready or held; the dead letter and the acknowledgement of
			// the last copy are one transaction.
			h.waitCounts("jobs", 0, 0)
			if ready, unacked, err := h.counts("dead"); err != nil || ready != 1 || unacked != 0 {
				t.Errorf("dead-letter queue has %d ready and %d unacked messages (%v); want the message once", ready, unacked, err)
			}
			var attempts []any
			for _, r := range h.inv.requests() {
				attempts = append(attempts, r.TriggerMeta["message"].(map[string]any)["attempt"])
			}
			if diff := cmp.Diff([]any{1, 2, 3}, attempts); diff != "" {
				t.Errorf("attempts of the invocations (-want +got):\n%s", diff)
			}
			if d := h.get("dead"); d.Headers["x-sless-attempts"] != int32(3) {
				t.Errorf("dead letter with headers %v; want 3 attempts", d.Headers)
			}
		})
	}
}

// AMQP 0-9-1 framing, as far as cutProxy reads it.
const (
	frameMethod      = 1
	classBasic       = 60
	methodPublish    = 40
	methodConfirmAck = 80 // basic.ack from the broker: a publisher confirmation
	methodAck        = 80 // basic.ack from the client: an acknowledgement
	classTx          = 90
	methodCommit     = 20
	methodCommitOk   = 21
)

// cutProxy forwards the connections to a broker and cuts the one on which
// the client published its n-th message at the worst moment: from that
// publish on it forwards nothing more from the broker, and once the broker
// answered that it settled the publish (a transaction's commit-ok or a
// publisher confirmation) it closes the connection, so that the broker did
// what the client asked while the client never learns it, nor gets what
// the broker sent meanwhile (such as the delivery of the copy just
// published). From then on it refuses connections, so that the client
// cannot go on as if nothing happened.
type cutProxy struct {
	// url is the broker's URL with the proxy's address.
	url string
	// cut is closed once the connection was cut.
	cut chan struct{}

	t         *testing.T
	broker    string
	n         int64
	ln        net.Listener
	publishes atomic.Int64
	// acks and commits count the client's acknowledgements and commits.
	acks, commits atomic.Int64
	once          sync.Once
	conns         sync.WaitGroup

	mu sync.Mutex
	// open holds the connections of both sides, closed when t ends.
	open []net.Conn
}

// startCutProxy starts a cutProxy in front of the broker of brokerURL, which
// stops when t ends.
func startCutProxy(t *testing.T, brokerURL string, n int) *cutProxy {
	t.Helper()
	u, err := url.Parse(brokerURL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{cut: make(chan struct{}), t: t, broker: u.Host, n: int64(n), ln: ln}
	u.Host = ln.Addr().String()
	p.url = u.String()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.open {
			c.Close()
		}
		p.mu.Unlock()
		p.conns.Wait()
	})
	p.conns.Go(p.accept)
	return p
}

func (p *cutProxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		broker, err := net.Dial("tcp", p.broker)
		if err != nil {
			p.t.Errorf("cut proxy: dial the broker: %v", err)
			client.Close()
			return
		}
		p.mu.Lock()
		p.open = append(p.open, client, broker)
		p.mu.Unlock()
		closeBoth := func() { client.Close(); broker.Close() }
		p.conns.Go(func() {
			defer closeBoth()
			err := p.forward(broker, client, true, func(frameType byte, class, method uint16) action {
				switch {
				case frameType != frameMethod:
				case class == classBasic && method == methodPublish:
					p.publishes.Add(1)
				case class == classBasic && method == methodAck:
					p.acks.Add(1)
				case class == classTx && method == methodCommit:
					p.commits.Add(1)
				}
				return pass
			})
			p.report(err)
		})
		p.conns.Go(func() {
			defer closeBoth()
			err := p.forward(client, broker, false, func(frameType byte, class, method uint16) action {
				switch {
				case p.publishes.Load() < p.n:
					return pass
				case frameType == frameMethod && (class == classTx && method == methodCommitOk || class == classBasic && method == methodConfirmAck):
					return cut
				}
				return hold
			})
			if errors.Is(err, errCut) {
				p.once.Do(func() {
					p.ln.Close()
					close(p.cut)
				})
				return
			}
			p.report(err)
		})
	}
}

// action is what forward does with a frame.
type action int

const (
	pass action = iota // copy it
	hold               // drop it
	cut                // drop it and stop
)

// errCut is what forward returns when a frame's action was cut.
var errCut = errors.New("cut")

// forward copies frames from src to dst as act says of each: act gets the
// frame's type and, for a method frame, its class and method. A client's
// stream starts with the protocol header, which is copied as it is.
func (p *cutProxy) forward(dst io.Writer, src io.Reader, fromClient bool, act func(frameType byte, class, method uint16) action) error {
	r := bufio.NewReader(src)
	if fromClient {
		header := make([]byte, 8)
		if _, err := io.ReadFull(r, header); err != nil {
			return err
		}
		if _, err := dst.Write(header); err != nil {
			return err
		}
	}
	for {
		head := make([]byte, 7) // type, channel, payload size
		if _, err := io.ReadFull(r, head); err != nil {
			return err
		}
		frame := make([]byte, 7+int(binary.BigEndian.Uint32(head[3:]))+1) // and the frame-end octet
		copy(frame, head)
		if _, err := io.ReadFull(r, frame[7:]); err != nil {
			return err
		}
		var class, method uint16
		if head[0] == frameMethod && len(frame) >= 7+4+1 {
			class, method = binary.BigEndian.Uint16(frame[7:]), binary.BigEndian.Uint16(frame[9:])
		}
		switch act(head[0], class, method) {
		case cut:
			return errCut
		case hold:
			continue
		}
		if _, err := dst.Write(frame); err != nil {
			return err
		}
	}
}

// report fails the test with what ended a forwarding, unless it is the end
// of a connection.
func (p *cutProxy) report(err error) {
	if err == nil || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
		return
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		return // the other side went away
	}
	p.t.Errorf("cut proxy: %v", fmt.Errorf("forwarding: %w", err))
}
