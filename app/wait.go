package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"sless.kube5s.ru/sless/modules/storage/blobs3"
	"sless.kube5s.ru/sless/modules/storage/sqldb"
)

// Waiting for dependencies: the first retry comes after waitMin, doubling up
// to waitMax; the log repeats what is awaited every waitLogEvery, or when
// it changes.
const (
	waitMin      = 200 * time.Millisecond
	waitMax      = 5 * time.Second
	waitLogEvery = 30 * time.Second
	// diskProbeBytes is what the disk check writes: enough that a nearly
	// full disk fails it, as the database and journal would.
	diskProbeBytes = 1 << 20
)

// dependency is something the server needs before its modules start.
type dependency struct {
	name  string
	check func(ctx context.Context) error
}

// dependencies returns the checks of the data directory's disk, the
// database and, for S3, the blob store; close releases what they opened.
func dependencies(c Config, log *slog.Logger) (deps []dependency, close func(), err error) {
	deps = append(deps, dependency{"disk", func(context.Context) error { return probeDisk(c.DataDir) }})
	db, _, err := sqldb.Open(c.DatabaseURL, log)
	if err != nil {
		return nil, nil, err
	}
	deps = append(deps, dependency{"database", func(ctx context.Context) error { return sqldb.Ping(ctx, db) }})
	spec, err := parseBlobURL(&c)
	if err != nil {
		sqldb.Close(db)
		return nil, nil, err
	}
	if spec.s3 != nil {
		s3, err := blobs3.New(*spec.s3)
		if err != nil {
			sqldb.Close(db)
			return nil, nil, err
		}
		deps = append(deps, dependency{"blob store", s3.EnsureBucket})
	}
	return deps, func() { sqldb.Close(db) }, nil
}

// probeDisk writes, syncs and removes a file in the data directory. Its
// error names no path: /readyz shows it.
func probeDisk(dir string) error {
	path := filepath.Join(dir, ".disk-probe")
	defer os.Remove(path)
	f, err := os.Create(path)
	if err == nil {
		_, err = f.Write(make([]byte, diskProbeBytes))
		err = errors.Join(err, f.Sync(), f.Close())
	}
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return fmt.Errorf("the data directory cannot be written: %w", err)
	}
	return nil
}

// waitForDependencies returns once every dependency passes its check,
// retrying with backoff and saying in the log what it waits for; while it
// waits it answers /healthz (200) and /readyz (503 naming what it waits
// for) on c.Listen. It returns ctx's cause when ctx ends first, and an
// error when it cannot listen.
func waitForDependencies(ctx context.Context, c Config, log *slog.Logger) error {
	deps, closeDeps, err := dependencies(c, log)
	if err != nil {
		return err
	}
	defer closeDeps()
	failed := checkAll(ctx, deps)
	if len(failed) == 0 {
		return nil
	}
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", c.Listen, err)
	}
	waiting := &waitingState{failed: failed}
	srv := &http.Server{Handler: waiting.handler(), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()

	start := time.Now()
	delay := waitMin
	var logged string
	var loggedAt time.Time
	for {
		if summary := describe(failed); summary != logged || time.Since(loggedAt) >= waitLogEvery {
			log.Warn("waiting for dependencies before starting; /readyz says what is missing", "waiting_for", summary,
				"waited", time.Since(start).Round(time.Second), "retry_in", delay)
			logged, loggedAt = summary, time.Now()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stopped while waiting for %s: %w", strings.Join(slices.Sorted(maps.Keys(failed)), ", "), context.Cause(ctx))
		case <-time.After(delay):
		}
		delay = min(2*delay, waitMax)
		failed = checkAll(ctx, deps)
		waiting.set(failed)
		if len(failed) == 0 {
			log.Info("dependencies ready; starting", "waited", time.Since(start).Round(time.Millisecond))
			return nil
		}
	}
}

// checkTimeout bounds one check, so that an address that drops packets
// does not hold the loop.
const checkTimeout = 5 * time.Second

// checkAll runs the checks and returns the failed ones' errors by name.
func checkAll(ctx context.Context, deps []dependency) map[string]string {
	failed := map[string]string{}
	for _, d := range deps {
		cctx, cancel := context.WithTimeout(ctx, checkTimeout)
		if err := d.check(cctx); err != nil {
			failed[d.name] = err.Error()
		}
		cancel()
	}
	return failed
}

func describe(failed map[string]string) string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(failed)) {
		parts = append(parts, name+": "+failed[name])
	}
	return strings.Join(parts, "; ")
}

// waitingState serves health and readiness while the server waits.
type waitingState struct {
	mu     sync.Mutex
	failed map[string]string
}

func (w *waitingState) set(failed map[string]string) {
	w.mu.Lock()
	w.failed = failed
	w.mu.Unlock()
}

func (w *waitingState) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(rw http.ResponseWriter, _ *http.Request) {
		writeJSON(rw, http.StatusOK, map[string]any{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(rw http.ResponseWriter, _ *http.Request) {
		w.mu.Lock()
		failed := w.failed
		w.mu.Unlock()
		writeJSON(rw, http.StatusServiceUnavailable, map[string]any{"status": "starting", "waiting_for": failed})
	})
	mux.HandleFunc("/", func(rw http.ResponseWriter, _ *http.Request) {
		rw.Header().Set("Retry-After", "5")
		writeJSON(rw, http.StatusServiceUnavailable, map[string]any{"error": "the server is starting: it waits for its dependencies (see /readyz)"})
	})
	return mux
}

func writeJSON(rw http.ResponseWriter, code int, v any) {
	body, _ := json.Marshal(v)
	rw.Header().Set("Content-Type", "application/json; charset=utf-8")
	rw.WriteHeader(code)
	rw.Write(body)
}
