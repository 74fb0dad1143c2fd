package main

import (
	"archive/zip"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"sless.kube5s.ru/sless/client"
	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/triggers"
)

var (
	onlyScale      = flag.Bool("scale", false, "run only the scale measurement and print its table")
	scaleFunctions = flag.Int("scale-functions", 10000, "functions the scale measurement deploys, each with code of its own")
	scaleWarm      = flag.Int("scale-warm", 1000, "functions of those kept warm and sent load")
)

// scaleDeployers is how many functions are deployed at once: as a
// Terraform apply or a CI pipeline would, not one by one.
const scaleDeployers = 16

// scale deploys *scaleFunctions functions with distinct code (half python,
// half node) on a server of its own, keeps *scaleWarm of them warm, sends
// load spread over the warm ones, and writes what that costs to report:
// deploy time, the server's RSS, the PSS of a warm instance, the latency
// across the warm functions next to that of one function, and the idle
// server's CPU.
func scale(bin, tmp string, report *bytes.Buffer) error {
	n, warm := *scaleFunctions, min(*scaleWarm, *scaleFunctions)
	srv, err := startServer(bin, filepath.Join(tmp, "scale"), "--idle-timeout", "1h")
	if err != nil {
		return err
	}
	defer srv.stop()
	c := &client.Client{Endpoint: srv.endpoint, Token: token}
	ctx := context.Background()

	logf("scale: deploying %d functions with distinct code, %d at once", n, scaleDeployers)
	cpuBefore, err := cpuTicks(srv.cmd.Process.Pid)
	if err != nil {
		return err
	}
	start := time.Now()
	var deployed atomic.Int64
	err = forEach(n, scaleDeployers, func(i int) error {
		if err := deployScaleFunction(ctx, c, i); err != nil {
			return err
		}
		if d := deployed.Add(1); d%1000 == 0 {
			logf("scale: %d created and uploaded (%s)", d, time.Since(start).Round(time.Millisecond))
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := waitAllReady(ctx, c, n); err != nil {
		return err
	}
	deployTime := time.Since(start)
	cpuAfter, err := cpuTicks(srv.cmd.Process.Pid)
	if err != nil {
		return err
	}
	rssDeployed, err := rssOf(srv.cmd.Process.Pid)
	if err != nil {
		return err
	}
	apiTimes, err := deployRequestTimes(srv.endpoint)
	if err != nil {
		return err
	}

	logf("scale: warming %d functions", warm)
	paths := make([]string, warm)
	for i := range paths {
		paths[i] = "/fn/default/" + scaleName(i)
	}
	if err := forEach(warm, 8, func(i int) error { return get(srv.endpoint + paths[i]) }); err != nil {
		return err
	}
	procs, err := instanceMemory(srv.cmd.Process.Pid)
	if err != nil {
		return err
	}

	logf("scale: load over %d warm functions, then on one alone", warm)
	script := filepath.Join(tmp, "scale.lua")
	if err := writeSpreadScript(script, paths); err != nil {
		return err
	}
	spread, err := wrk(srv.endpoint+paths[0], 32, *duration, "-s", script)
	if err != nil {
		return err
	}
	// The bench's own client sends the spread through /fn before and after
	// sending it straight to the instances, so that what the first run
	// warms (or the machine's drift) shows as the two /fn runs' difference.
	logf("scale: the same spread from the bench's own client: through /fn, straight to the instances, through /fn")
	fnTargets := fnSpread(strings.TrimPrefix(srv.endpoint, "http://"), paths)
	var clientFn [2]load
	if clientFn[0], err = spreadLoad(fnTargets, 32, *duration); err != nil {
		return fmt.Errorf("the spread through /fn from the bench's client: %w", err)
	}
	clientDirect := "not measured: "
	if targets, err := instanceSpread(srv.cmd.Process.Pid); err != nil {
		clientDirect += err.Error()
	} else if l, err := spreadLoad(targets, 32, *duration); err != nil {
		return fmt.Errorf("the spread straight to the instances: %w", err)
	} else {
		clientDirect = fmt.Sprintf("%.0f, %s, %s (%d instances)", l.rps, msStr(l.p50), msStr(l.p99), len(targets))
	}
	if clientFn[1], err = spreadLoad(fnTargets, 32, *duration); err != nil {
		return fmt.Errorf("the spread through /fn from the bench's client: %w", err)
	}
	// The reference: one function taking the same load alone, as the main
	// table deploys it (one instance, concurrency 32).
	if err := srv.cli("deploy", "examples/hello-python", "--name", "single", "--runtime", "python3.11", "--concurrency", "32", "--max-instances", "1"); err != nil {
		return err
	}
	single, err := wrk(srv.endpoint+"/fn/default/single", 32, *duration)
	if err != nil {
		return err
	}
	rssWarm, err := rssOf(srv.cmd.Process.Pid)
	if err != nil {
		return err
	}
	threadsWarm, err := threadsOf(srv.cmd.Process.Pid)
	if err != nil {
		return err
	}

	logf("scale: idle CPU of the server over 10s")
	time.Sleep(2 * time.Second)
	idle, err := cpuOver(srv.cmd.Process.Pid, 10*time.Second)
	if err != nil {
		return err
	}

	fmt.Fprintf(report, "\nScale: %d functions deployed, each with code of its own (half python3.11, half nodejs20 hello), %d at once through the REST API; %d of them warm (one instance each), load from 32 connections spread over those at random.\n\n",
		n, scaleDeployers, warm)
	fmt.Fprintln(report, "| what | value |")
	fmt.Fprintln(report, "|---|---|")
	fmt.Fprintf(report, "| deploy of all (create, upload, http trigger, until every one is Ready) | %.1f s |\n", deployTime.Seconds())
	fmt.Fprintf(report, "| server CPU per function deployed (user + system, the list polling included) | %.1f ms |\n",
		float64(cpuAfter-cpuBefore)/ticksPerSecond*1000/float64(n))
	fmt.Fprintf(report, "| mean server time of a deploy's requests: create, upload, http trigger | %s |\n", apiTimes)
	fmt.Fprintf(report, "| server RSS with all deployed, none warm | %.0f MB |\n", rssDeployed/1e6)
	fmt.Fprintf(report, "| server RSS with %d warm, after the load | %.0f MB |\n", warm, rssWarm/1e6)
	fmt.Fprintf(report, "| server threads with %d warm | %.0f |\n", warm, threadsWarm)
	pythonPSS := 0.0
	for _, p := range procs {
		fmt.Fprintf(report, "| PSS per %s process (%d running) | %.1f MB |\n", p.comm, p.count, p.pss/float64(p.count)/1e6)
		if strings.HasPrefix(p.comm, "python") {
			pythonPSS += p.pss
		}
	}
	fmt.Fprintf(report, "| PSS of every python process (instances, spares, zygotes) ÷ warm python functions (%d) | %.1f MB |\n",
		(warm+1)/2, pythonPSS/float64((warm+1)/2)/1e6)
	fmt.Fprintf(report, "| /fn across the %d warm functions: req/s, p50, p99 | %.0f, %s, %s |\n", warm, spread.rps, msStr(spread.p50), msStr(spread.p99))
	fmt.Fprintf(report, "| /fn on one python function alone (concurrency 32): req/s, p50, p99 | %.0f, %s, %s |\n", single.rps, msStr(single.p50), msStr(single.p99))
	fmt.Fprintf(report, "| p99 across the warm functions ÷ p99 of the one alone | %.2f |\n", float64(spread.p99)/float64(single.p99))
	fmt.Fprintf(report, "| the same spread from the bench's own client (32 connections, keep-alive) through /fn, before and after the next row: req/s, p50, p99 | %.0f, %s, %s; %.0f, %s, %s |\n",
		clientFn[0].rps, msStr(clientFn[0].p50), msStr(clientFn[0].p99), clientFn[1].rps, msStr(clientFn[1].p50), msStr(clientFn[1].p99))
	fmt.Fprintf(report, "| the same client straight to the warm instances' sockets, no server in between: req/s, p50, p99 | %s |\n", clientDirect)
	fmt.Fprintf(report, "| idle server CPU, %% of one core | %.2f %% |\n", idle*100)
	return nil
}

// deployRequests are the routes of a deploy's requests, in their order, as
// the server's request histogram labels them.
var deployRequests = []string{
	"/v1/namespaces/:ns/functions",
	"/v1/namespaces/:ns/functions/:name/upload",
	"/v1/namespaces/:ns/triggers",
}

// deployRequestTimes returns the mean time the server took over each of a
// deploy's POST requests, from its /metrics: where a deploy's time goes.
func deployRequestTimes(endpoint string) (string, error) {
	families, err := serverMetrics(endpoint)
	if err != nil {
		return "", err
	}
	sum := map[string]float64{}
	count := map[string]uint64{}
	for _, m := range families["sless_http_request_duration_seconds"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["method"] == http.MethodPost {
			sum[labels["route"]] += m.GetHistogram().GetSampleSum()
			count[labels["route"]] += m.GetHistogram().GetSampleCount()
		}
	}
	means := make([]string, len(deployRequests))
	for i, route := range deployRequests {
		if count[route] == 0 {
			return "", fmt.Errorf("the server's metrics have no POST %s", route)
		}
		means[i] = msStr(time.Duration(sum[route] / float64(count[route]) * float64(time.Second)))
	}
	return strings.Join(means, ", "), nil
}

// serverMetrics reads the server's /metrics.
func serverMetrics(endpoint string) (map[string]*dto.MetricFamily, error) {
	resp, err := http.Get(endpoint + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("reading the server's metrics: %w", err)
	}
	return families, nil
}

// scaleName is the name of the i-th function of the scale run: even ones
// run python, odd ones node.
func scaleName(i int) string {
	if i%2 == 0 {
		return fmt.Sprintf("py-%05d", i)
	}
	return fmt.Sprintf("node-%05d", i)
}

// deployScaleFunction creates the i-th function with code of its own (the
// hello handler and a comment naming i), uploads it and exposes it on /fn.
func deployScaleFunction(ctx context.Context, c *client.Client, i int) error {
	name := scaleName(i)
	rt, file, src := "python3.11", "handler.py", "examples/hello-python/handler.py"
	comment := "#"
	if i%2 == 1 {
		rt, file, src, comment = "nodejs20", "handler.js", "examples/hello-node/handler.js", "//"
	}
	code, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	code = fmt.Appendf(code, "%s variant %d\n", comment, i)
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, err := zw.Create(file)
	if err == nil {
		_, err = w.Write(code)
	}
	if err == nil {
		err = zw.Close()
	}
	if err != nil {
		return err
	}
	fn := &functions.Function{Namespace: "default", Name: name, Spec: functions.Spec{Runtime: rt, MaxInstances: 1}}
	if _, err := c.CreateFunction(ctx, fn); err != nil {
		return fmt.Errorf("creating %s: %w", name, err)
	}
	if _, err := c.UploadCode(ctx, "default", name, buf.Bytes()); err != nil {
		return fmt.Errorf("uploading %s: %w", name, err)
	}
	t := &triggers.Trigger{Namespace: "default", Name: name, Spec: triggers.Spec{Function: name, Type: triggers.TypeHTTP}}
	if _, err := c.CreateTrigger(ctx, t); err != nil {
		return fmt.Errorf("exposing %s: %w", name, err)
	}
	return nil
}

// waitAllReady polls the function list until n functions are Ready, and
// fails on the first that failed.
func waitAllReady(ctx context.Context, c *client.Client, n int) error {
	deadline := time.Now().Add(30 * time.Minute)
	for {
		fns, err := c.ListFunctions(ctx, "default")
		if err != nil {
			return err
		}
		ready := 0
		for _, fn := range fns {
			switch fn.Status.Phase {
			case functions.PhaseReady:
				ready++
			case functions.PhaseFailed:
				return fmt.Errorf("function %s failed: %s", fn.Name, fn.Status.Message)
			}
		}
		if ready >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d functions are Ready after 30 minutes", ready, n)
		}
		// Listing every function is work for the server too: once a
		// second keeps it a small part of what is measured.
		time.Sleep(time.Second)
	}
}

// forEach runs f(0..n-1) on workers goroutines and returns the first error.
func forEach(n, workers int, f func(i int) error) error {
	var (
		next     atomic.Int64
		firstErr error
		once     sync.Once
		wg       sync.WaitGroup
	)
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					once.Do(func() { firstErr = err })
					next.Store(int64(n))
					return
				}
			}
		})
	}
	wg.Wait()
	return firstErr
}

// get requests url and fails unless it answers 200.
func get(url string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: HTTP %d", url, resp.StatusCode)
	}
	return nil
}

// writeSpreadScript writes a wrk script whose requests go to paths at random.
func writeSpreadScript(file string, paths []string) error {
	var b strings.Builder
	b.WriteString("local paths = {\n")
	for _, p := range paths {
		fmt.Fprintf(&b, "  %q,\n", p)
	}
	b.WriteString("}\n")
	b.WriteString("init = function(args) math.randomseed(os.time() + tonumber(tostring({}):sub(8), 16)) end\n")
	b.WriteString("request = function() return wrk.format(\"GET\", paths[math.random(#paths)]) end\n")
	return os.WriteFile(file, []byte(b.String()), 0o644)
}

// procMemory is the memory of the server's descendants with one command
// name.
type procMemory struct {
	comm  string
	count int
	pss   float64 // bytes, summed
}

// instanceMemory sums the proportional set size (PSS: shared pages divided
// among the processes that share them) of the descendants of pid by
// command name, the interpreters first; the processes of a zygote (its
// init, the zygote, the instances it forked, which keep its command line)
// are a group of their own.
func instanceMemory(pid int) ([]procMemory, error) {
	comm, err := descendants(pid)
	if err != nil {
		return nil, err
	}
	byComm := map[string]*procMemory{}
	var order []string
	for p, name := range comm {
		pss, err := pssOf(p)
		if err != nil {
			continue // exited meanwhile
		}
		if cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p)); strings.Contains(string(cmdline), "/zygote.py\x00") {
			name += " forked from a zygote (and the zygote, its init)"
		}
		m := byComm[name]
		if m == nil {
			m = &procMemory{comm: name}
			byComm[name] = m
			order = append(order, name)
		}
		m.count++
		m.pss += pss
	}
	slices.Sort(order)
	out := make([]procMemory, 0, len(order))
	for _, name := range order {
		out = append(out, *byComm[name])
	}
	return out, nil
}

// descendants returns the command names of pid's descendants by pid.
func descendants(pid int) (map[int]string, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	parent := map[int]int{}
	comm := map[int]string{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		s := string(stat)
		open, close := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || close < open {
			continue
		}
		fields := strings.Fields(s[close+1:])
		if len(fields) < 2 {
			continue
		}
		parent[p], _ = strconv.Atoi(fields[1])
		comm[p] = s[open+1 : close]
	}
	descends := func(p int) bool {
		for p > 1 {
			p = parent[p]
			if p == pid {
				return true
			}
		}
		return false
	}
	for p := range comm {
		if !descends(p) {
			delete(comm, p)
		}
	}
	return comm, nil
}

// pssOf returns the PSS of pid in bytes.
func pssOf(pid int) (float64, error) {
	kb, err := statusField(fmt.Sprintf("/proc/%d/smaps_rollup", pid), "Pss:")
	return kb * 1024, err
}

// rssOf returns the resident set of pid in bytes.
func rssOf(pid int) (float64, error) {
	kb, err := statusField(fmt.Sprintf("/proc/%d/status", pid), "VmRSS:")
	return kb * 1024, err
}

// threadsOf returns the number of threads of pid.
func threadsOf(pid int) (float64, error) {
	return statusField(fmt.Sprintf("/proc/%d/status", pid), "Threads:")
}

// statusField reads the number of a "Name: N [kB]" line of a /proc file.
func statusField(file, name string) (float64, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, name); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				break
			}
			return strconv.ParseFloat(f[0], 64)
		}
	}
	return 0, fmt.Errorf("%s has no %s line", file, name)
}

// cpuOver returns the CPU pid used over d, as a fraction of one core.
func cpuOver(pid int, d time.Duration) (float64, error) {
	before, err := cpuTicks(pid)
	if err != nil {
		return 0, err
	}
	time.Sleep(d)
	after, err := cpuTicks(pid)
	if err != nil {
		return 0, err
	}
	return float64(after-before) / ticksPerSecond / d.Seconds(), nil
}

// ticksPerSecond is USER_HZ on Linux, the unit of /proc/PID/stat's times.
const ticksPerSecond = 100

// cpuTicks returns the user and system time of pid in clock ticks.
func cpuTicks(pid int) (int64, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(stat)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	// After the comm: state is field 3 of stat(5), utime 14 and stime 15.
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("reading the CPU time of %d: %q", pid, s)
	}
	return utime + stime, nil
}
