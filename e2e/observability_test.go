package e2e

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	amqp "github.com/rabbitmq/amqp091-go"

	"sless.kube5s.ru/sless/internal/otlptest"
	"sless.kube5s.ru/sless/internal/testenv"
)

// TestObservability runs a mixed load (successes, handler errors, a 4xx,
// timeouts and the cold starts after them, two runtimes, the CLI, a cron
// trigger and a RabbitMQ trigger with a dead letter) on a server that pushes
// its metrics to a real VictoriaMetrics and exports spans to an OTLP
// receiver, then checks that /metrics, the Grafana dashboard's queries
// evaluated by VictoriaMetrics and `sless top` (with a tenant token) all
// count what the ledger recorded; that traces join the caller's; that the
// logs about an invocation name it; and that a deleted function's series go.
func TestObservability(t *testing.T) {
	vm := testenv.StartVictoriaMetrics(t)
	vhost := testenv.RabbitMQ(t)
	traces := otlptest.New(t)
	s := startServer(t, serverOptions{env: []string{
		"SLESS_METRICS_PUSH_URL=" + vm.ImportURL() + "?extra_label=instance=e2e", "SLESS_METRICS_PUSH_INTERVAL=1s",
		"SLESS_TRACE_OTLP_URL=" + traces.URL, "SLESS_LOG_FORMAT=json",
	}})

	mixed := writeTree(t, map[string]string{"handler.py": `import time
def handle(event, context):
    mode = (event or {}).get("mode", "ok")
    if mode == "raise":
        raise RuntimeError("refused")
    if mode == "sleep":
        time.sleep(5)
    if mode == "missing":
        return {"statusCode": 404, "body": "no such thing"}
    return {"mode": mode, "trace_id": context.trace_id}
`})
	s.mustCLI("deploy", mixed, "--name", "mixed", "--runtime", "python3.11", "--timeout", "1")
	greet := writeTree(t, map[string]string{"handler.js": `exports.handle = async (event, context) => ({ traceparent: context.traceparent, traceId: context.traceId });`})
	s.mustCLI("deploy", greet, "--name", "greet", "--runtime", "nodejs20")

	// /fn and the CLI.
	for _, mode := range []string{"ok", "ok", "raise", "sleep", "ok", "missing", "sleep", "ok", "raise", "ok"} {
		s.post("/fn/default/mixed", `{"mode": "`+mode+`"}`)
	}
	s.mustCLI("invoke", "mixed", "-d", `{"mode": "ok"}`)
	for range 2 {
		if code, _, body := s.post("/fn/default/greet", `{}`); code != 200 {
			t.Fatalf("greet: %d %s", code, body)
		}
	}
	// A caller's trace is continued: the handler's parent is the
	// platform's handler span, in the caller's trace.
	const callerTrace, callerSpan = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	req, _ := http.NewRequest("POST", s.endpoint+"/fn/default/greet", strings.NewReader(`{}`))
	req.Header.Set("traceparent", "00-"+callerTrace+"-"+callerSpan+"-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var greeted struct{ Traceparent, TraceID string }
	json.NewDecoder(resp.Body).Decode(&greeted)
	resp.Body.Close()
	tracedID := resp.Header.Get("X-Sless-Invocation-Id")
	if greeted.TraceID != callerTrace || len(greeted.Traceparent) != 55 || greeted.Traceparent[36:52] == callerSpan {
		t.Errorf("the handler's context: traceparent %q, trace id %q; want the caller's trace with a span of the platform's",
			greeted.Traceparent, greeted.TraceID)
	}

	// A cron trigger, disabled after a few runs.
	s.mustCLI("trigger", "create", "tick", "--function", "mixed", "--type", "cron", "--schedule", "@every 1s",
		"--payload", `{"mode": "ok"}`)
	s.waitFor("three cron runs", func() bool { return len(s.invocations("triggers/tick/invocations")) >= 3 })
	s.mustCLI("trigger", "disable", "tick")
	// A cron trigger that does not fire during the test, so that an
	// active trigger's next run time is exposed.
	s.mustCLI("trigger", "create", "yearly", "--function", "mixed", "--type", "cron", "--schedule", "@yearly")

	// A RabbitMQ trigger: two messages succeed, one fails and is
	// dead-lettered at once.
	s.mustCLI("trigger", "create", "orders", "--function", "mixed", "--type", "rabbitmq", "--url", vhost.URL,
		"--queue", "orders", "--max-retries", "0", "--dead-letter-queue", "orders-failed")
	waitConsuming(s, vhost, "orders", "orders")
	for _, body := range []string{`{"mode": "ok"}`, `{"mode": "raise"}`, `{"mode": "ok"}`} {
		publishOnce(t, vhost.URL, "orders", amqp.Publishing{ContentType: "application/json", Body: []byte(body)})
	}
	s.waitFor("the messages handled, one dead-lettered", func() bool {
		ready, unacked, err := vhost.QueueCounts("orders")
		dead, _, derr := vhost.QueueCounts("orders-failed")
		return err == nil && derr == nil && ready == 0 && unacked == 0 && dead == 1 &&
			len(s.invocations("triggers/orders/invocations")) == 3
	})

	// The load has ended once the ledger stops growing: the last cron run
	// may still have been in flight when the trigger was disabled.
	var recs []record
	s.waitFor("the ledger to settle", func() bool {
		before := s.allInvocations()
		time.Sleep(1500 * time.Millisecond)
		recs = s.allInvocations()
		return len(recs) == len(before)
	})
	want := tally(recs)
	t.Logf("ledger: %d invocations: %v", len(recs), want.outcomes)
	if want.outcomes[outcomeKey{"mixed", "http", "timeout"}] != 2 || want.outcomes[outcomeKey{"mixed", "rabbitmq", "5xx"}] != 1 ||
		want.cold["mixed"] < 3 {
		t.Fatalf("the load did not give the mix the test checks: %v, cold starts %v", want.outcomes, want.cold)
	}

	t.Run("metrics", func(t *testing.T) {
		m := scrape(t, s.endpoint+"/metrics")
		if diff := cmp.Diff(want.outcomes, m.outcomes("default")); diff != "" {
			t.Errorf("sless_invocations_total against the ledger (-ledger +metrics):\n%s", diff)
		}
		for fn, n := range want.calls {
			checks := []struct {
				what      string
				got, want float64
			}{
				{"cold starts", m.value("sless_invocation_cold_starts_total", "function", fn), float64(want.cold[fn])},
				{"durations observed", m.value("sless_invocation_duration_seconds_count", "function", fn), float64(n)},
				{"phase Ready", m.value("sless_function_phase", "function", fn, "phase", "Ready"), 1},
				{"builds", m.value("sless_builds_total", "function", fn, "result", "succeeded"), 1},
			}
			for _, c := range checks {
				if c.got != c.want {
					t.Errorf("%s: %s = %v, want %v", fn, c.what, c.got, c.want)
				}
			}
		}
		trig := func(trigger, event string) float64 {
			return m.value("sless_trigger_events_total", "trigger", trigger, "event", event)
		}
		for _, c := range []struct {
			what      string
			got, want float64
		}{
			{"tick fired", trig("tick", "fired"), float64(want.kinds["cron"])},
			{"tick succeeded", trig("tick", "succeeded"), float64(want.kinds["cron"])},
			{"orders fired", trig("orders", "fired"), 3},
			{"orders succeeded", trig("orders", "succeeded"), 2},
			{"orders failed", trig("orders", "failed"), 1},
			{"orders dead-lettered", trig("orders", "dead_lettered"), 1},
			{"orders consumer connected", m.value("sless_trigger_up", "trigger", "orders"), 1},
			{"tick disabled", m.value("sless_trigger_up", "trigger", "tick"), 0},
			// Each timeout recycled its instance.
			{"mixed's instance restarts", m.value("sless_instance_restarts_total", "function", "mixed"),
				float64(want.outcomes[outcomeKey{"mixed", "http", "timeout"}])},
			{"mixed's memory kills", m.value("sless_instance_memory_kills_total", "function", "mixed"), 0},
			{"mixed's queue", m.value("sless_invocations_queued", "function", "mixed"), 0},
			{"records lost", m.value("sless_ledger_lost_records_total"), 0},
			{"spans dropped", m.value("sless_trace_spans_dropped_total"), 0},
			{"push failures", m.value("sless_metrics_push_failures_total"), 0},
		} {
			if c.got != c.want {
				t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
			}
		}
		if n := m.value("sless_instances", "function", "mixed", "state", "idle"); n < 1 {
			t.Errorf("mixed has %v idle instances after the load, want at least 1", n)
		}
		if written := m.value("sless_ledger_written_records_total"); written < float64(len(recs)) {
			t.Errorf("ledger records written %v, want at least the %d listed", written, len(recs))
		}
	})

	t.Run("dashboard", func(t *testing.T) {
		dashboard := loadDashboard(t)
		exposed := scrape(t, s.endpoint+"/metrics").names()
		for _, q := range dashboard {
			for _, name := range metricNames(q.expr) {
				if !exposed[name] {
					t.Errorf("panel %q names %s, which the server does not expose", q.panel, name)
				}
			}
		}
		// Every query runs in VictoriaMetrics; the totals equal the
		// ledger's once the last push is in.
		totals := map[string]map[string]float64{
			"Invocations": want.byFunction(func(o outcomeKey) bool { return true }),
			"Errors":      want.byFunction(func(o outcomeKey) bool { return !slices.Contains([]string{"2xx", "3xx", "4xx"}, o.outcome) }),
			"Cold starts": intsToFloats(want.cold),
		}
		byKind := map[string]float64{}
		for o, n := range want.outcomes {
			byKind[o.kind+" "+o.outcome] += float64(n)
		}
		for _, q := range dashboard {
			expr := strings.NewReplacer(`$namespace`, "default", `$function`, ".*", "$__rate_interval", "1m").Replace(q.expr)
			if m := labelValues.FindStringSubmatch(expr); m != nil {
				values, err := vm.LabelValues(m[2], m[1])
				if err != nil || !slices.Contains(values, map[string]string{"namespace": "default", "function": "mixed"}[m[2]]) {
					t.Errorf("%s: %v, %v; want default's namespace or mixed among them", q.panel, values, err)
				}
				continue
			}
			if _, err := vm.Query(expr); err != nil {
				t.Errorf("panel %q: %v", q.panel, err)
				continue
			}
			wantSeries, ok := totals[q.panel]
			if q.panel == "By trigger kind and outcome" {
				wantSeries, ok = byKind, true
			}
			if !ok {
				continue
			}
			// A function with no errors (or cold starts) has no series
			// of them to sum.
			maps.DeleteFunc(wantSeries, func(_ string, v float64) bool { return v == 0 })
			var got map[string]float64
			testenv.Eventually(t, 30*time.Second, "panel "+q.panel+" to show the ledger's numbers", func() bool {
				samples, err := vm.Query(expr)
				if err != nil {
					return false
				}
				got = map[string]float64{}
				for _, smp := range samples {
					key := smp.Labels["function"]
					if q.panel == "By trigger kind and outcome" {
						key = smp.Labels["trigger_kind"] + " " + smp.Labels["outcome"]
					}
					got[key] = smp.Value
				}
				return maps.Equal(got, wantSeries)
			})
			t.Logf("panel %q: %v", q.panel, got)
		}
	})

	t.Run("top", func(t *testing.T) {
		token := s.newToken("--namespace", "default", "--description", "top")
		out, errOut, err := s.cliAs(token, "top", "--once", "--interval", "500ms", "-o", "json")
		if err != nil {
			t.Fatalf("sless top: %v\n%s", err, errOut)
		}
		var rows []struct {
			Function    string  `json:"function"`
			Invocations float64 `json:"invocations"`
			Errors      float64 `json:"errors"`
			ColdStarts  float64 `json:"cold_starts"`
		}
		if err := json.Unmarshal([]byte(out), &rows); err != nil {
			t.Fatalf("sless top -o json: %v\n%s", err, out)
		}
		got := map[string][3]float64{}
		for _, r := range rows {
			got[r.Function] = [3]float64{r.Invocations, r.Errors, r.ColdStarts}
		}
		wantRows := map[string][3]float64{}
		errs := want.byFunction(func(o outcomeKey) bool { return !slices.Contains([]string{"2xx", "3xx", "4xx"}, o.outcome) })
		for fn, n := range want.calls {
			wantRows[fn] = [3]float64{float64(n), errs[fn], float64(want.cold[fn])}
		}
		if diff := cmp.Diff(wantRows, got); diff != "" {
			t.Errorf("sless top (invocations, errors, cold starts) against the ledger (-ledger +top):\n%s", diff)
		}
		if out, _, _ := s.cliAs(token, "top", "--once", "--interval", "500ms"); !strings.Contains(out, "default/mixed") {
			t.Errorf("sless top's table:\n%s\nwant a line of default/mixed", out)
		}
		other := s.newToken("--namespace", "team-b")
		if _, errOut, err := s.cliAs(other, "top", "-n", "default", "--once", "--interval", "500ms"); err == nil ||
			!strings.Contains(errOut, `may not act in namespace "default"`) {
			t.Errorf("sless top of default with a token of team-b: %v %s; want a refusal", err, errOut)
		}
	})

	t.Run("traces", func(t *testing.T) {
		traced := s.waitInvocation(tracedID)
		var rec struct {
			TraceID string `json:"trace_id"`
		}
		_, body := s.api("GET", "/v1/namespaces/default/invocations/"+tracedID, "", nil)
		json.Unmarshal(body, &rec)
		if rec.TraceID != callerTrace {
			t.Errorf("recorded trace id %q of %+v, want the caller's %s", rec.TraceID, traced, callerTrace)
		}
		var spans map[string]otlptest.Span
		testenv.Eventually(t, 30*time.Second, "the traced invocation's spans and a build's", func() bool {
			spans = map[string]otlptest.Span{}
			for _, sp := range traces.Spans() {
				if hex.EncodeToString(sp.GetTraceId()) == callerTrace || strings.HasPrefix(sp.GetName(), "build ") {
					spans[strings.Fields(sp.GetName())[0]] = sp
				}
			}
			return len(spans) == 4
		})
		inv, handler := spans["invoke"], spans["handler"]
		if hex.EncodeToString(inv.GetParentSpanId()) != callerSpan || inv.Attributes["sless.invocation_id"] != tracedID {
			t.Errorf("the invocation's span: parent %x, attributes %v; want the caller's span and the invocation id", inv.GetParentSpanId(), inv.Attributes)
		}
		if !bytes.Equal(handler.GetParentSpanId(), inv.GetSpanId()) || hex.EncodeToString(handler.GetSpanId()) != greeted.Traceparent[36:52] {
			t.Errorf("handler span %x (parent %x); want a child of the invocation's span, the parent the handler was given (%s)",
				handler.GetSpanId(), handler.GetParentSpanId(), greeted.Traceparent)
		}
		if _, ok := spans["queue"]; !ok {
			t.Errorf("no queue span: %v", slices.Collect(maps.Keys(spans)))
		}
	})

	t.Run("logs", func(t *testing.T) {
		var timedOut string
		for _, r := range recs {
			if r.StatusCode == http.StatusGatewayTimeout {
				timedOut = r.ID
			}
		}
		found := false
		for line := range strings.SplitSeq(s.logs.String(), "\n") {
			var entry map[string]any
			if json.Unmarshal([]byte(line), &entry) != nil || entry["invocation_id"] == nil || entry["invocation_id"] == "" {
				continue
			}
			if entry["namespace"] == nil || entry["function"] == nil {
				t.Errorf("a log line about invocation %v lacks its namespace or function: %s", entry["invocation_id"], line)
			}
			if entry["invocation_id"] == timedOut && entry["function"] == "mixed" && entry["status_code"] == float64(504) {
				found = true
			}
		}
		if !found {
			t.Errorf("no log line names the timed-out invocation %s", timedOut)
		}
	})

	t.Run("deleted function's series go", func(t *testing.T) {
		s.mustCLI("fn", "delete", "greet")
		testenv.Eventually(t, 30*time.Second, "greet's series to go from /metrics", func() bool {
			return !strings.Contains(string(get(t, s.endpoint+"/metrics")), `function="greet"`)
		})
		if m := scrape(t, s.endpoint+"/metrics"); m.value("sless_invocations_total", "function", "mixed") == 0 {
			t.Errorf("mixed's series went with greet's")
		}
	})
}

// allInvocations lists every invocation of namespace default (the test
// makes fewer than a page).
func (s *server) allInvocations() []record {
	s.t.Helper()
	code, body := s.api("GET", "/v1/namespaces/default/invocations?limit=500", "", nil)
	var page struct {
		Items    []record
		Continue string `json:"continue"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &page) != nil || page.Continue != "" {
		s.t.Fatalf("listing invocations: %d %s", code, body)
	}
	return page.Items
}

// outcomeKey is a series of sless_invocations_total of namespace default.
type outcomeKey struct{ function, kind, outcome string }

// ledgerTally is what the ledger's records count.
type ledgerTally struct {
	outcomes map[outcomeKey]int
	calls    map[string]int // by function
	cold     map[string]int
	kinds    map[string]int
}

// tally counts records as the metrics count invocations: the class of the
// function's status, the platform's answers by name.
func tally(recs []record) ledgerTally {
	t := ledgerTally{outcomes: map[outcomeKey]int{}, calls: map[string]int{}, cold: map[string]int{}, kinds: map[string]int{}}
	for _, r := range recs {
		outcome := fmt.Sprintf("%dxx", r.StatusCode/100)
		switch r.StatusCode {
		case http.StatusGatewayTimeout:
			outcome = "timeout"
		case http.StatusBadGateway:
			outcome = "crash"
		case http.StatusServiceUnavailable:
			outcome = "unavailable"
		}
		t.outcomes[outcomeKey{r.Function, r.TriggerKind, outcome}]++
		t.calls[r.Function]++
		t.kinds[r.TriggerKind]++
		if r.ColdStart {
			t.cold[r.Function]++
		}
	}
	return t
}

// byFunction sums the outcomes that keep says by function.
func (t ledgerTally) byFunction(keep func(outcomeKey) bool) map[string]float64 {
	out := map[string]float64{}
	for fn := range t.calls {
		out[fn] = 0
	}
	for o, n := range t.outcomes {
		if keep(o) {
			out[o.function] += float64(n)
		}
	}
	return out
}

func intsToFloats(m map[string]int) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		out[k] = float64(v)
	}
	return out
}

// scraped is a parsed /metrics.
type scraped map[string][]scrapedSample

type scrapedSample struct {
	labels map[string]string
	value  float64
}

func get(t *testing.T, url string) []byte {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return body
}

// scrape reads url's metrics; a histogram's count is NAME_count.
func scrape(t *testing.T, url string) scraped {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(get(t, url)))
	if err != nil {
		t.Fatal(err)
	}
	out := scraped{}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			switch {
			case m.Counter != nil:
				out[name] = append(out[name], scrapedSample{labels, m.GetCounter().GetValue()})
			case m.Gauge != nil:
				out[name] = append(out[name], scrapedSample{labels, m.GetGauge().GetValue()})
			case m.Untyped != nil:
				out[name] = append(out[name], scrapedSample{labels, m.GetUntyped().GetValue()})
			case m.Histogram != nil:
				out[name+"_count"] = append(out[name+"_count"], scrapedSample{labels, float64(m.GetHistogram().GetSampleCount())})
				out[name+"_sum"] = append(out[name+"_sum"], scrapedSample{labels, m.GetHistogram().GetSampleSum()})
				out[name+"_bucket"] = append(out[name+"_bucket"], scrapedSample{labels, 0})
			}
		}
	}
	return out
}

// value sums the samples of name whose labels match the pairs.
func (s scraped) value(name string, pairs ...string) float64 {
	sum := 0.0
	for _, smp := range s[name] {
		match := true
		for i := 0; i+1 < len(pairs); i += 2 {
			match = match && smp.labels[pairs[i]] == pairs[i+1]
		}
		if match {
			sum += smp.value
		}
	}
	return sum
}

// outcomes returns ns's sless_invocations_total by function, kind and
// outcome.
func (s scraped) outcomes(ns string) map[outcomeKey]int {
	out := map[outcomeKey]int{}
	for _, smp := range s["sless_invocations_total"] {
		if smp.labels["namespace"] == ns {
			out[outcomeKey{smp.labels["function"], smp.labels["trigger_kind"], smp.labels["outcome"]}] = int(smp.value)
		}
	}
	return out
}

// names returns the names of the series, histograms' _bucket, _sum and
// _count included.
func (s scraped) names() map[string]bool {
	out := map[string]bool{}
	for name := range s {
		out[name] = true
	}
	return out
}

// dashboardQuery is one query of the Grafana dashboard.
type dashboardQuery struct{ panel, expr string }

// loadDashboard returns every query of deploy/grafana/sless.json: the
// panels' targets and the variables' label_values.
func loadDashboard(t *testing.T) []dashboardQuery {
	t.Helper()
	data, err := os.ReadFile("../deploy/grafana/sless.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	var out []dashboardQuery
	for _, p := range d.Panels {
		for _, target := range p.Targets {
			out = append(out, dashboardQuery{p.Title, target.Expr})
		}
	}
	for _, v := range d.Templating.List {
		if q, ok := v.Query.(map[string]any); ok {
			// label_values(SELECTOR, LABEL) names metrics like a query.
			out = append(out, dashboardQuery{"variable " + v.Name, fmt.Sprint(q["query"])})
		}
	}
	if len(out) < 20 {
		t.Fatalf("the dashboard has %d queries; it lost its panels", len(out))
	}
	return out
}

// metricNames returns the metric names an expression uses: the sless_
// identifiers that are not label names.
func metricNames(expr string) []string {
	var names []string
	for _, m := range metricName.FindAllStringSubmatchIndex(expr, -1) {
		name := expr[m[2]:m[3]]
		rest := strings.TrimLeft(expr[m[3]:], " ")
		if strings.HasPrefix(rest, "=") || strings.HasPrefix(rest, "!=") || strings.HasPrefix(rest, "=~") || strings.HasPrefix(rest, "!~") {
			continue // a label matcher
		}
		names = append(names, name)
	}
	return names
}

var (
	metricName = regexp.MustCompile(`\b(sless_[a-z0-9_]+)`)
	// labelValues is Grafana's label_values(SELECTOR, LABEL) of a
	// variable, which it asks the label values API, not PromQL.
	labelValues = regexp.MustCompile(`^label_values\((.+), *([a-z_]+)\)$`)
)
