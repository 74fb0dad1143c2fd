// Package metricspush pushes the server's metrics where nothing can scrape
// it: every interval it gathers the registry and POSTs it in the Prometheus
// text format, which VictoriaMetrics (and vmagent) import on
// /api/v1/import/prometheus and the Prometheus Pushgateway takes on
// /metrics/job/NAME. The samples carry no timestamps: the receiver stamps
// them when they arrive, as a scrape would.
package metricspush

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// Config configures the pusher.
type Config struct {
	// URL receives the pushes, e.g.
	// http://victoriametrics:8428/api/v1/import/prometheus; user and
	// password in it are sent as basic authentication. Required.
	URL string
	// Interval is the time between pushes; default 15s.
	Interval time.Duration
	// Headers are sent with every push (an Authorization header).
	Headers map[string]string
}

// Pusher pushes a registry's metrics.
type Pusher struct {
	cfg Config
	// shown is the URL without its password, for logs and errors.
	shown    string
	gatherer prometheus.Gatherer
	client   *http.Client
	log      *slog.Logger
	failures prometheus.Counter
	// failing is set while pushes fail, so that a failure is logged when
	// it starts and when it ends, not every interval.
	failing bool
	cancel  context.CancelFunc
	done    chan struct{}
}

// New returns a stopped pusher of reg's metrics, whose own failure counter
// is registered on reg.
func New(cfg Config, reg *prometheus.Registry, log *slog.Logger) (*Pusher, error) {
	if cfg.Interval <= 0 {
		cfg.Interval = 15 * time.Second
	}
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("the metrics push URL is not an http:// or https:// URL")
	}
	p := &Pusher{cfg: cfg, shown: u.Redacted(), gatherer: reg, log: log,
		// A push must end before the next is due.
		client: &http.Client{Timeout: min(cfg.Interval, 30*time.Second)},
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "sless_metrics_push_failures_total",
			Help: "Pushes of the metrics that failed (the receiver was unreachable or refused them)."}),
	}
	if err := reg.Register(p.failures); err != nil {
		return nil, err
	}
	return p, nil
}

// Start pushes every interval in the background.
func (p *Pusher) Start(context.Context) error {
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel, p.done = cancel, make(chan struct{})
	go p.loop(ctx)
	return nil
}

// Stop stops pushing and pushes once more, until ctx ends, so that the
// receiver has the last values.
func (p *Pusher) Stop(ctx context.Context) error {
	p.cancel()
	<-p.done
	return p.Push(ctx)
}

func (p *Pusher) loop(ctx context.Context) {
	defer close(p.done)
	tick := time.NewTicker(p.cfg.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		err := p.Push(ctx)
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil && !p.failing:
			p.failing = true
			p.log.Error("pushing the metrics failed; retrying every interval", "url", p.shown, "error", err)
		case err == nil && p.failing:
			p.failing = false
			p.log.Info("pushing the metrics works again", "url", p.shown)
		}
	}
}

// Push gathers the metrics and sends them once.
func (p *Pusher) Push(ctx context.Context) error {
	err := p.push(ctx)
	if err != nil {
		p.failures.Inc()
	}
	return err
}

func (p *Pusher) push(ctx context.Context) error {
	families, err := p.gatherer.Gather()
	if err != nil {
		return fmt.Errorf("gathering the metrics: %w", err)
	}
	var body bytes.Buffer
	zw := gzip.NewWriter(&body)
	enc := expfmt.NewEncoder(zw, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range families {
		if err := enc.Encode(f); err != nil {
			return fmt.Errorf("encoding the metrics: %w", err)
		}
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("encoding the metrics: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.cfg.URL, &body)
	if err != nil {
		return fmt.Errorf("pushing the metrics: %w", err)
	}
	for k, v := range p.cfg.Headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	req.Header.Set("Content-Encoding", "gzip")
	resp, err := p.client.Do(req)
	if err != nil {
		// The client's error names the URL, password included.
		return fmt.Errorf("pushing the metrics to %s failed: %s", p.shown, redact(err.Error(), p.cfg.URL, p.shown))
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("pushing the metrics: %s answered %s: %s", p.shown, resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}

// redact replaces the URL with its shown form in msg.
func redact(msg, full, shown string) string {
	if full == shown {
		return msg
	}
	return strings.ReplaceAll(msg, full, shown)
}
