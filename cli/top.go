package cli

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/spf13/cobra"

	"sless.kube5s.ru/sless/client"
)

func newTopCmd(g *globals) *cobra.Command {
	var (
		interval time.Duration
		once     bool
		limit    int
	)
	cmd := &cobra.Command{
		Use:   "top",
		Short: "Show the namespace's functions live, busiest first: rate, errors, latency, cold starts, instances",
		Long: `top reads the namespace's metrics (GET /v1/namespaces/{ns}/metrics, the series of /metrics)
every --interval and shows, per function, what happened in between: invocations per second,
errors (5xx answers and the platform's: timeouts, crashes, refusals) per second and their share,
the median and 99th percentile of the invocations' duration, cold starts, instances (busy, idle,
starting), invocations waiting for an instance, and the totals since the function was deployed.
It redraws until interrupted; --once prints one interval's view and exits (with -o json, for
scripts).`,
		Args: cobra.NoArgs,
		RunE: g.withClient(func(cmd *cobra.Command, _ []string, c *client.Client, ns string) error {
			if interval < 500*time.Millisecond || interval > time.Minute {
				return fmt.Errorf("--interval must be between 500ms and 1m, not %s", interval)
			}
			if limit < 1 {
				return fmt.Errorf("--limit must be at least 1, not %d", limit)
			}
			return runTop(cmd.Context(), cmd.OutOrStdout(), c, ns, g.output, interval, once, limit)
		}),
	}
	cmd.Flags().DurationVar(&interval, "interval", 2*time.Second, "time between two readings (500ms to 1m)")
	cmd.Flags().BoolVar(&once, "once", false, "print one view and exit")
	cmd.Flags().IntVar(&limit, "limit", 50, "most functions shown (the busiest)")
	return cmd
}

// runTop reads the metrics every interval and prints the view of what
// changed in between.
func runTop(ctx context.Context, w io.Writer, c *client.Client, ns, output string, interval time.Duration, once bool, limit int) error {
	read := func() (topSnapshot, error) {
		text, err := c.Metrics(ctx, ns)
		if err != nil {
			return topSnapshot{}, err
		}
		return parseTop(text, time.Now())
	}
	prev, err := read()
	if err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
		cur, err := read()
		if err != nil {
			return err
		}
		rows := topRows(prev, cur)
		if len(rows) > limit {
			rows = rows[:limit]
		}
		if output == "json" {
			if err := printJSON(w, rows); err != nil {
				return err
			}
		} else {
			if !once {
				io.WriteString(w, "\x1b[H\x1b[2J") // home and clear: redraw in place
			}
			fmt.Fprintf(w, "sless top  namespace %s  %s  every %s\n\n", ns, cur.at.Format(time.TimeOnly), interval)
			renderTop(w, rows)
		}
		if once {
			return nil
		}
		prev = cur
	}
}

// topFunction is what one reading says of a function.
type topFunction struct {
	calls, errors, colds float64
	outcomes             map[string]float64
	// buckets are the duration histogram's cumulative counts by bound.
	buckets                       map[float64]float64
	busy, idle, starting, waiting float64
}

// topSnapshot is one reading of the metrics.
type topSnapshot struct {
	at  time.Time
	fns map[string]*topFunction // by "namespace/function"
}

// errorOutcome reports whether an outcome of sless_invocations_total is an
// error: a 5xx answer or one of the platform's (not the function's own 2xx,
// 3xx or 4xx).
func errorOutcome(o string) bool { return o != "2xx" && o != "3xx" && o != "4xx" }

// parseTop reads the series top shows from the text format.
func parseTop(text []byte, at time.Time) (topSnapshot, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		return topSnapshot{}, fmt.Errorf("reading the metrics: %w", err)
	}
	s := topSnapshot{at: at, fns: map[string]*topFunction{}}
	fn := func(labels map[string]string) *topFunction {
		key := labels["namespace"] + "/" + labels["function"]
		f, ok := s.fns[key]
		if !ok {
			f = &topFunction{outcomes: map[string]float64{}, buckets: map[float64]float64{}}
			s.fns[key] = f
		}
		return f
	}
	for name, fam := range families {
		for _, m := range fam.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["function"] == "" {
				continue
			}
			switch name {
			case "sless_invocations_total":
				f, v := fn(labels), m.GetCounter().GetValue()
				f.calls += v
				f.outcomes[labels["outcome"]] += v
				if errorOutcome(labels["outcome"]) {
					f.errors += v
				}
			case "sless_invocation_cold_starts_total":
				fn(labels).colds = m.GetCounter().GetValue()
			case "sless_invocation_duration_seconds":
				f := fn(labels)
				for _, b := range m.GetHistogram().GetBucket() {
					f.buckets[b.GetUpperBound()] = float64(b.GetCumulativeCount())
				}
				f.buckets[math.Inf(1)] = float64(m.GetHistogram().GetSampleCount())
			case "sless_instances":
				f, v := fn(labels), m.GetGauge().GetValue()
				switch labels["state"] {
				case "busy":
					f.busy = v
				case "idle":
					f.idle = v
				case "starting":
					f.starting = v
				}
			case "sless_invocations_queued":
				fn(labels).waiting = m.GetGauge().GetValue()
			}
		}
	}
	return s, nil
}

// TopRow is one function's line of `sless top`: rates over the interval,
// instances now, totals since the function was deployed.
type TopRow struct {
	Namespace        string             `json:"namespace"`
	Function         string             `json:"function"`
	Rate             float64            `json:"invocations_per_second"`
	ErrorRate        float64            `json:"errors_per_second"`
	ErrorRatio       float64            `json:"error_ratio"`
	P50Seconds       float64            `json:"p50_seconds"`
	P99Seconds       float64            `json:"p99_seconds"`
	ColdStartsPerSec float64            `json:"cold_starts_per_second"`
	Busy             int                `json:"instances_busy"`
	Idle             int                `json:"instances_idle"`
	Starting         int                `json:"instances_starting"`
	Queued           int                `json:"queued"`
	Invocations      float64            `json:"invocations"`
	Errors           float64            `json:"errors"`
	ColdStarts       float64            `json:"cold_starts"`
	Outcomes         map[string]float64 `json:"outcomes"`
	latencyKnown     bool
}

// topRows computes the view of what happened between prev and cur, the
// busiest first. A counter that went down (the function was deployed anew)
// counts from zero.
func topRows(prev, cur topSnapshot) []TopRow {
	secs := cur.at.Sub(prev.at).Seconds()
	rows := make([]TopRow, 0, len(cur.fns))
	for key, f := range cur.fns {
		p := prev.fns[key]
		if p == nil {
			p = &topFunction{buckets: map[float64]float64{}}
		}
		ns, name, _ := strings.Cut(key, "/")
		r := TopRow{Namespace: ns, Function: name, Busy: int(f.busy), Idle: int(f.idle), Starting: int(f.starting),
			Queued: int(f.waiting), Invocations: f.calls, Errors: f.errors, ColdStarts: f.colds, Outcomes: f.outcomes}
		calls, errs := delta(f.calls, p.calls), delta(f.errors, p.errors)
		r.Rate, r.ErrorRate, r.ColdStartsPerSec = calls/secs, errs/secs, delta(f.colds, p.colds)/secs
		if calls > 0 {
			r.ErrorRatio = errs / calls
		}
		window := map[float64]float64{}
		for le, n := range f.buckets {
			window[le] = delta(n, p.buckets[le])
		}
		if window[math.Inf(1)] > 0 {
			r.P50Seconds, r.P99Seconds, r.latencyKnown = quantile(0.5, window), quantile(0.99, window), true
		}
		rows = append(rows, r)
	}
	slices.SortFunc(rows, func(a, b TopRow) int {
		return cmp.Or(cmp.Compare(b.Rate, a.Rate), cmp.Compare(b.Invocations, a.Invocations),
			cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Function, b.Function))
	})
	return rows
}

// delta is the increase of a counter from prev to cur; a reset counts
// from zero.
func delta(cur, prev float64) float64 {
	if cur < prev {
		return cur
	}
	return cur - prev
}

// quantile estimates the q-quantile of a histogram's cumulative bucket
// counts as PromQL's histogram_quantile does: linearly within the bucket
// the rank falls in, and the highest finite bound for the +Inf bucket.
func quantile(q float64, buckets map[float64]float64) float64 {
	bounds := make([]float64, 0, len(buckets))
	for le := range buckets {
		bounds = append(bounds, le)
	}
	slices.Sort(bounds)
	total := buckets[math.Inf(1)]
	rank := q * total
	lower, below := 0.0, 0.0
	for i, le := range bounds {
		n := buckets[le]
		if n >= rank {
			if math.IsInf(le, 1) {
				if i == 0 {
					return 0
				}
				return bounds[i-1]
			}
			if n == below {
				return le
			}
			return lower + (le-lower)*(rank-below)/(n-below)
		}
		lower, below = le, n
	}
	return lower
}

// renderTop prints rows as a table.
func renderTop(w io.Writer, rows []TopRow) {
	tw := newTable(w)
	fmt.Fprintln(tw, "FUNCTION\tRATE/s\tERR/s\tERR%\tP50\tP99\tCOLD/s\tBUSY\tIDLE\tSTART\tQUEUE\tTOTAL\tERRORS")
	for _, r := range rows {
		p50, p99 := "-", "-"
		if r.latencyKnown {
			p50, p99 = seconds(r.P50Seconds), seconds(r.P99Seconds)
		}
		fmt.Fprintf(tw, "%s/%s\t%.2f\t%.2f\t%.1f\t%s\t%s\t%.2f\t%d\t%d\t%d\t%d\t%s\t%s\n", r.Namespace, r.Function,
			r.Rate, r.ErrorRate, 100*r.ErrorRatio, p50, p99, r.ColdStartsPerSec, r.Busy, r.Idle, r.Starting, r.Queued,
			strconv.FormatFloat(r.Invocations, 'f', -1, 64), strconv.FormatFloat(r.Errors, 'f', -1, 64))
	}
	tw.Flush()
}

// seconds formats a duration in seconds for the table.
func seconds(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(100 * time.Microsecond).String()
}
