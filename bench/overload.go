package main

import (
	"bytes"
	"flag"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"time"
)

var (
	requestsLine = regexp.MustCompile(`(\d+) requests in ([0-9.]+)(us|ms|s|m)`)
	non2xxLine   = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
)

// overloadConns are the connection counts of the overload runs: below the
// function's capacity plus its queue (2 instances + 100 waiting), and past
// it, where most requests are refused.
var overloadConns = []int{16, 64, 256}

// overloadRounds is how many times each connection count runs, the counts
// interleaved round by round, so that the machine's drift (other work, CPU
// steal) falls on every count alike and the medians compare.
var overloadRounds = flag.Int("overload-rounds", 5, "interleaved rounds of the overload measurement")

// overload measures goodput (2xx answers per second) of a function with
// max_instances 2 and concurrency 1 as the connections grow past what it
// and its wait queue hold, and writes the table to report. A refusal must
// cost so little that the answered requests keep their rate.
func overload(srv *server, report *bytes.Buffer) error {
	const fn = "overload"
	logf("overload: deploying %s", fn)
	if err := srv.cli("deploy", "examples/hello-python", "--name", fn, "--runtime", "python3.11", "--max-instances", "2", "--concurrency", "1"); err != nil {
		return err
	}
	url := srv.endpoint + "/fn/default/" + fn
	if err := warm(url, 8); err != nil {
		return err
	}
	rounds := *overloadRounds
	good := make([][]float64, len(overloadConns))
	refused := make([][]float64, len(overloadConns))
	// ofBest[i] holds, round by round, the goodput at overloadConns[i] over
	// the best goodput of the same round: paired within a round, the ratio
	// is not moved by the drift between rounds.
	ofBest := make([][]float64, len(overloadConns))
	for round := 1; round <= rounds; round++ {
		for i, conns := range overloadConns {
			logf("overload: round %d/%d, %d connections", round, rounds, conns)
			g, r, err := wrkCounts(url, conns, *duration)
			if err != nil {
				return err
			}
			good[i], refused[i] = append(good[i], g), append(refused[i], r)
		}
		best := 0.0
		for i := range overloadConns {
			best = max(best, good[i][round-1])
		}
		for i := range overloadConns {
			ofBest[i] = append(ofBest[i], good[i][round-1]/best)
		}
	}
	fmt.Fprintf(report, "\nOverload: python3.11 hello with `max_instances 2`, `concurrency 1`, `--queue-depth 100`; goodput is 2xx answers per second, refused the 503s per second; medians of %d interleaved rounds, the range in brackets; goodput / best compares each round's goodput with the best of the same round.\n\n", rounds)
	fmt.Fprintln(report, "| connections | goodput req/s | refused req/s | goodput / best |")
	fmt.Fprintln(report, "|---|---|---|---|")
	for i, conns := range overloadConns {
		fmt.Fprintf(report, "| %d | %.0f (%.0f–%.0f) | %.0f | %.2f (%.2f–%.2f) |\n", conns, median(good[i]), slices.Min(good[i]), slices.Max(good[i]),
			median(refused[i]), median(ofBest[i]), slices.Min(ofBest[i]), slices.Max(ofBest[i]))
	}
	return nil
}

// median returns the median of xs, which is not empty.
func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// wrkCounts runs wrk and returns 2xx and other answers per second.
func wrkCounts(url string, conns int, d time.Duration) (good, other float64, err error) {
	threads := min(max(conns/16, 1), 2)
	out, err := exec.Command("wrk", "-t", strconv.Itoa(threads), "-c", strconv.Itoa(conns),
		"-d", fmt.Sprintf("%ds", int(d.Seconds())), url).CombinedOutput()
	if err != nil {
		return 0, 0, fmt.Errorf("wrk %s: %w\n%s", url, err, out)
	}
	m := requestsLine.FindSubmatch(out)
	if m == nil {
		return 0, 0, fmt.Errorf("no request count in wrk output:\n%s", out)
	}
	total, _ := strconv.ParseFloat(string(m[1]), 64)
	v, _ := strconv.ParseFloat(string(m[2]), 64)
	secs := v * map[string]float64{"us": 1e-6, "ms": 1e-3, "s": 1, "m": 60}[string(m[3])]
	bad := 0.0
	if m := non2xxLine.FindSubmatch(out); m != nil {
		bad, _ = strconv.ParseFloat(string(m[1]), 64)
	}
	return (total - bad) / secs, bad / secs, nil
}
