package testenv

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"sync"
	"testing"
	"time"
)

// VictoriaMetrics is a single-node VictoriaMetrics running for one test, on
// loopback: a real receiver of pushed metrics (its Prometheus import
// endpoint) and a real PromQL (MetricsQL) engine to query them.
type VictoriaMetrics struct {
	// URL is the server's base URL, http://127.0.0.1:PORT.
	URL string
}

// ImportURL is where metrics in the Prometheus text format are pushed.
func (vm VictoriaMetrics) ImportURL() string { return vm.URL + "/api/v1/import/prometheus" }

// Sample is one series of a query's answer.
type Sample struct {
	Labels map[string]string
	Value  float64
}

// Query evaluates an instant PromQL query now and returns its series.
func (vm VictoriaMetrics) Query(q string) ([]Sample, error) {
	resp, err := http.Get(vm.URL + "/api/v1/query?" + url.Values{"query": {q}}.Encode())
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("query %q: %s: %w", q, resp.Status, err)
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("query %q: %s: %s", q, resp.Status, body.Error)
	}
	var out []Sample
	for _, r := range body.Data.Result {
		s, _ := r.Value[1].(string)
		var v float64
		if _, err := fmt.Sscan(s, &v); err != nil {
			return nil, fmt.Errorf("query %q: value %q: %w", q, s, err)
		}
		out = append(out, Sample{Labels: r.Metric, Value: v})
	}
	return out, nil
}

// StartVictoriaMetrics starts VictoriaMetrics for t and stops it when t
// ends. The binary is built by hack/tools.sh (about a CPU-minute): with
// SLESS_REQUIRE_SERVICES=1 it is built if missing; otherwise a test runs
// only if it is built already, and is Unavailable if not.
func StartVictoriaMetrics(t testing.TB) VictoriaMetrics {
	t.Helper()
	build := Required(t)
	root := RepoRoot(t)
	b := &victoriaMetricsBinary
	b.once.Do(func() {
		if build {
			t.Logf("hack/tools.sh victoriametrics: building VictoriaMetrics unless cached (a CPU-minute on the first run)")
		}
		b.path, b.err = Tool(root, "victoriametrics", build)
	})
	if b.err != nil {
		Unavailable(t, "VictoriaMetrics: %v", b.err)
	}
	dir := t.TempDir()
	port, err := freePort()
	if err != nil {
		Unavailable(t, "VictoriaMetrics: %v", err)
	}
	vm := VictoriaMetrics{URL: "http://" + net.JoinHostPort("127.0.0.1", port)}
	// latencyOffset 0 and a short cache: a query sees what was pushed a
	// moment ago, as the tests need.
	cmd := exec.Command(b.path, "-storageDataPath", dir, "-httpListenAddr", net.JoinHostPort("127.0.0.1", port),
		"-retentionPeriod", "1d", "-search.latencyOffset", "0s", "-search.disableCache", "-loggerLevel", "ERROR")
	out := &SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	start := time.Now()
	p, err := startProcess(cmd)
	if err != nil {
		Unavailable(t, "VictoriaMetrics: run %s: %v", b.path, err)
	}
	if err := waitReady(p, vm.URL+"/health"); err != nil {
		p.stop()
		t.Fatalf("VictoriaMetrics: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if err := p.stop(); err != nil {
			t.Errorf("stop VictoriaMetrics: %v\n%s", err, out)
		}
	})
	t.Logf("VictoriaMetrics on %s ready in %v", vm.URL, time.Since(start).Round(time.Millisecond))
	return vm
}

// victoriaMetricsBinary caches the binary's path for the test binary.
var victoriaMetricsBinary struct {
	once sync.Once
	path string
	err  error
}

// LabelValues returns the values of label among the series that match
// selects, as Grafana's label_values(match, label) asks a Prometheus data
// source.
func (vm VictoriaMetrics) LabelValues(label, match string) ([]string, error) {
	resp, err := http.Get(vm.URL + "/api/v1/label/" + url.PathEscape(label) + "/values?" + url.Values{"match[]": {match}}.Encode())
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Status string   `json:"status"`
		Error  string   `json:"error"`
		Data   []string `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("label values of %s for %q: %s: %w", label, match, resp.Status, err)
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("label values of %s for %q: %s: %s", label, match, resp.Status, body.Error)
	}
	return body.Data, nil
}
