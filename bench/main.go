// Command bench measures the data plane on this machine and prints markdown
// tables: each wrapper against a minimal server for the same handler,
// throughput, latency and server CPU per request through /fn next to calling
// the same wrapper directly and next to nginx in front of the minimal Python
// server, cold starts next to a bare interpreter start, overload, and the
// ledger's write rate. Run it with bench/run.sh (which installs wrk and nginx).
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"

	"sless.kube5s.ru/sless/runtimes"
)

var (
	duration     = flag.Duration("duration", 10*time.Second, "length of each load run")
	warmup       = flag.Duration("warmup", 2*time.Second, "length of the warm-up run before each target's measurements")
	coldSamples  = flag.Int("cold-samples", 15, "cold starts measured per runtime")
	bareSamples  = flag.Int("bare-samples", 20, "bare interpreter starts measured per runtime")
	ledgerTime   = flag.String("ledger-benchtime", "3s", "-benchtime of the ledger benchmark")
	quick        = flag.Bool("quick", false, "short runs (1s loads, 3 cold starts, ...) that finish in under two minutes; flags given explicitly still apply")
	writeReadme  = flag.Bool("write", false, "replace the results table in bench/README.md")
	onlyOverload = flag.Bool("overload", false, "run only the overload measurement and print its table")
	onlyBuilds   = flag.Bool("builds", false, "run only the build measurement (bench/build.go) and print its table")
	useBinary    = flag.String("bin", "", "the sless binary to measure, to compare two builds run after run (default: built from this tree)")
)

// quickSettings are the values -quick gives the flags not set on the command line.
var quickSettings = map[string]string{
	"duration": "1s", "warmup": "1s", "cold-samples": "3", "bare-samples": "5", "ledger-benchtime": "0.3s", "build-samples": "3",
	"scale-functions": "100", "scale-warm": "10", "overload-rounds": "3",
}

// applyQuick sets the flags -quick shortens, except those given explicitly.
func applyQuick() {
	given := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for name, value := range quickSettings {
		if !given[name] {
			flag.Set(name, value)
		}
	}
}

const token = "bench-token-0123456789"

func main() {
	flag.Parse()
	if *quick {
		applyQuick()
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type runtimeCase struct {
	name, example, interpreter, wrapperFile string
	wrapper                                 []byte
	minimal                                 string   // the minimal server for the same handler
	bare                                    []string // arguments of a bare start
}

func run() error {
	if *onlyBuilds {
		return builds(os.Stdout)
	}
	if _, err := exec.LookPath("wrk"); err != nil {
		return fmt.Errorf("wrk is needed (apt-get install wrk, or run bench/run.sh): %w", err)
	}
	if _, err := nginxPath(); err != nil && !*onlyOverload && !*onlyAPI {
		return err
	}
	tmp, err := os.MkdirTemp("", "sless-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin := *useBinary
	if bin == "" {
		bin = filepath.Join(tmp, "sless")
		logf("building sless")
		if err := command("go", "build", "-o", bin, "./cmd/sless").Run(); err != nil {
			return fmt.Errorf("building sless: %w", err)
		}
	}
	python, err := realPath("python3.11", "-c", "import sys; print(sys.executable)")
	if err != nil {
		return err
	}
	node, err := realPath("node", "-p", "process.execPath")
	if err != nil {
		return err
	}
	cases := []runtimeCase{
		{name: "python3.11", example: "examples/hello-python", interpreter: python, wrapperFile: "server.py", wrapper: runtimes.PythonServer,
			minimal: "bench/minimal/asyncio_server.py", bare: []string{"-S", "-c", "pass"}},
		{name: "nodejs20", example: "examples/hello-node", interpreter: node, wrapperFile: "server.js", wrapper: runtimes.NodeServer,
			minimal: "bench/minimal/http_server.js", bare: []string{"-e", "0"}},
	}

	if *onlyScale {
		var report bytes.Buffer
		if err := scale(bin, tmp, &report); err != nil {
			return err
		}
		os.Stdout.Write(report.Bytes())
		return nil
	}
	srv, err := startServer(bin, tmp)
	if err != nil {
		return err
	}
	defer srv.stop()
	var report bytes.Buffer
	if *onlyAPI {
		if err := apiLatency(srv, &report); err != nil {
			return err
		}
		os.Stdout.Write(report.Bytes())
		return nil
	}
	if *onlyOverload {
		if err := overload(srv, &report); err != nil {
			return err
		}
		os.Stdout.Write(report.Bytes())
		return nil
	}
	fmt.Fprintf(&report, "Measured %s on %s (%d CPUs, load average %s at the start), wrk %s per run.\n", time.Now().Format("2006-01-02"), hostname(), goruntime.NumCPU(), loadAverage(), *duration)
	var directRows, fnRows, nginxRows, coldRows, defaultRows []string
	for _, rc := range cases {
		fn := "hello-" + strings.ReplaceAll(rc.name, ".", "")
		logf("deploying %s", fn)
		if err := srv.cli("deploy", rc.example, "--name", fn, "--runtime", rc.name, "--concurrency", "32", "--max-instances", "1"); err != nil {
			return err
		}
		fnURL := srv.endpoint + "/fn/default/" + fn
		rows, err := throughput(rc, srv, fnURL, tmp)
		if err != nil {
			return err
		}
		directRows = append(directRows, rows.direct...)
		fnRows = append(fnRows, rows.fn...)
		nginxRows = append(nginxRows, rows.nginx...)

		logf("%s: default settings", rc.name)
		dflt := fn + "-defaults"
		if err := srv.cli("deploy", rc.example, "--name", dflt, "--runtime", rc.name); err != nil {
			return err
		}
		dURL := srv.endpoint + "/fn/default/" + dflt
		if err := warm(dURL, 32); err != nil {
			return err
		}
		dl, err := wrk(dURL, 32, *duration)
		if err != nil {
			return err
		}
		defaultRows = append(defaultRows, fmt.Sprintf("| %s | %.0f | %s | %s |", rc.name, dl.rps, msStr(dl.p50), msStr(dl.p99)))

		logf("%s: cold starts", rc.name)
		bare, err := bareStarts(rc, *bareSamples)
		if err != nil {
			return err
		}
		colds, err := coldStarts([]string{fnURL, dURL}, *coldSamples)
		if err != nil {
			return err
		}
		for i, settings := range []string{"concurrency 32", "defaults (concurrency 1)"} {
			cold := colds[i]
			coldRows = append(coldRows, fmt.Sprintf("| %s | %s | %s | %s | %s | %s | %.2fx |", rc.name, settings, msStr(pct(cold, 50)), msStr(pct(cold, 99)),
				msStr(pct(bare, 50)), strings.Join(rc.bareCmd(), " "), float64(pct(cold, 50))/float64(pct(bare, 50))))
		}
	}
	printTable(&report, "Each wrapper on its own (TCP, specialized at start with the example's code, as the cluster mode runs it; the Python wrapper on "+pythonLoop(python)+
		") against a minimal server for the same handler (`bench/minimal`: a raw asyncio protocol, a bare `http.createServer`); CPU/req is the serving process's CPU (user + system, `/proc/PID/stat`) over the run divided by the requests:",
		[]string{"runtime", "connections", "minimal req/s", "wrapper req/s", "wrapper ÷ minimal", "minimal CPU/req", "wrapper CPU/req", "minimal p50", "wrapper p50"}, directRows)
	printTable(&report, "Through /fn (`concurrency 32`, `max_instances 1`) against the same wrapper called directly (concurrency 32); server CPU/req is the `sless server` process's own CPU per `/fn` request:",
		[]string{"runtime", "connections", "direct req/s", "/fn req/s", "ratio", "direct p50", "/fn p50", "added p50", "direct p99", "/fn p99", "server CPU/req"}, fnRows)
	printTable(&report, fmt.Sprintf("Reference: nginx %s (one worker, keep-alive upstream) in front of the minimal Python server, next to `/fn` python3.11 from the table above; nginx CPU/req counts its master and worker:", nginxVersion()),
		[]string{"connections", "minimal req/s", "nginx req/s", "nginx ÷ minimal", "nginx p50", "nginx CPU/req", "/fn req/s", "/fn ÷ nginx", "server CPU/req"}, nginxRows)
	printTable(&report, "Through /fn with the default settings (concurrency 1, max_instances 10: up to 10 processes), 32 connections:",
		[]string{"runtime", "/fn req/s", "p50", "p99"}, defaultRows)
	printTable(&report, "Cold start: the first request through /fn after the function scaled to zero, end to end, next to a bare interpreter start; with concurrency above 1, the first call of a synchronous handler also starts its first worker thread.",
		[]string{"runtime", "function", "cold p50", "cold p99", "bare start p50", "bare command", "cold / bare"}, coldRows)
	if err := overload(srv, &report); err != nil {
		return err
	}
	account, err := ledgerAccount(srv.endpoint)
	if err != nil {
		return err
	}
	fmt.Fprintf(&report, "\nLedger of the server of the tables above, once its writer caught up: %s.\n", account)
	if err := builds(&report); err != nil {
		return err
	}
	logf("ledger")
	rate, err := ledgerRate()
	if err != nil {
		return err
	}
	fmt.Fprintf(&report, "\nLedger: %s records written per second (batched inserts into SQLite, `BenchmarkRecord`).\n", rate)
	if err := scale(bin, tmp, &report); err != nil {
		return err
	}
	fmt.Fprintf(&report, "\nLoad average at the end: %s.\n", loadAverage())

	os.Stdout.Write(report.Bytes())
	if *writeReadme {
		return replaceResults("bench/README.md", report.String())
	}
	return nil
}

// ledgerAccount waits up to a minute for the ledger of the server at
// endpoint to have written its journal to the database, and says from its
// /metrics what happened to the records of every invocation it answered:
// written, refused by the journal (kept in memory until it took them) and
// lost.
func ledgerAccount(endpoint string) (string, error) {
	value := func(families map[string]*dto.MetricFamily, name string) float64 {
		var sum float64
		for _, m := range families[name].GetMetric() {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
		return sum
	}
	deadline := time.Now().Add(time.Minute)
	for {
		families, err := serverMetrics(endpoint)
		if err != nil {
			return "", err
		}
		behind := value(families, "sless_ledger_behind_bytes")
		if behind == 0 || time.Now().After(deadline) {
			return fmt.Sprintf("%.0f records written to the database, %.0f refused by the journal, %.0f lost, %.0f bytes not written yet",
				value(families, "sless_ledger_written_records_total"), value(families, "sless_ledger_journal_refused_records_total"),
				value(families, "sless_ledger_lost_records_total"), behind), nil
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (rc runtimeCase) bareCmd() []string {
	return append([]string{filepath.Base(rc.interpreter)}, rc.bare...)
}

func logf(format string, args ...any) { fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...) }

func command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Stderr = os.Stderr
	return cmd
}

// realPath asks an interpreter for its real binary (not a version-manager shim).
func realPath(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		return "", fmt.Errorf("finding %s: %w", name, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// pythonLoop names the event loop the Python wrapper runs on with python:
// uvloop's when python has uvloop, else asyncio's.
func pythonLoop(python string) string {
	version, err := exec.Command(python, "-c", "import uvloop; print(uvloop.__version__)").Output()
	if err != nil {
		return "asyncio's loop, without uvloop"
	}
	return "uvloop " + strings.TrimSpace(string(version))
}

type server struct {
	cmd      *exec.Cmd
	endpoint string
	dataDir  string
	bin      string
}

// startServer starts bin as a server with its data under tmp; extra flags
// override the defaults.
func startServer(bin, tmp string, extra ...string) (*server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &server{bin: bin, dataDir: filepath.Join(tmp, "data"), endpoint: "http://127.0.0.1:" + port}
	// A short idle timeout lets the cold start runs scale to zero quickly.
	s.cmd = exec.Command(bin, "server", "--listen", "127.0.0.1:"+port, "--data-dir", s.dataDir,
		"--api-token", token, "--log-level", "warn", "--idle-timeout", "1s")
	s.cmd.Args = append(s.cmd.Args, extra...)
	s.cmd.Stderr = os.Stderr
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if resp, err := http.Get(s.endpoint + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return s, nil
			}
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("sless server did not start")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *server) stop() {
	s.cmd.Process.Signal(syscall.SIGTERM)
	s.cmd.Wait()
}

func (s *server) cli(args ...string) error {
	cmd := command(s.bin, args...)
	cmd.Env = append(os.Environ(), "SLESS_ENDPOINT="+s.endpoint, "SLESS_TOKEN="+token)
	cmd.Stdout = io.Discard
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("sless %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

// startWrapper runs the runtime's wrapper on a TCP port, specialized at start
// with the example's code (as the cluster mode runs it), with the given
// concurrency.
func startWrapper(rc runtimeCase, tmp string, concurrency int) (*listener, error) {
	wrapper := filepath.Join(tmp, rc.name+"-"+rc.wrapperFile)
	if err := os.WriteFile(wrapper, rc.wrapper, 0o644); err != nil {
		return nil, err
	}
	port, code, err := listenArgs(rc)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(rc.interpreter, wrapper, "--listen", "tcp:127.0.0.1:"+port, "--code-dir", code, "--handler", "handler.handle")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "SLESS_FUNCTION=hello", "SLESS_NAMESPACE=default", "SLESS_CONCURRENCY=" + strconv.Itoa(concurrency)}
	return startListener("the "+rc.name+" wrapper", cmd, port)
}

type load struct {
	rps      float64
	p50, p99 time.Duration
	requests int
}

var (
	rpsLine = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
	pctLine = regexp.MustCompile(`(?m)^\s+(50|99)%\s+([0-9.]+)(us|ms|s)\s*$`)
)

// wrk runs wrk with one thread per two connections (at most two: this is a
// two-core machine shared with the server); extra are more wrk flags.
func wrk(url string, conns int, d time.Duration, extra ...string) (load, error) {
	threads := min(max(conns/16, 1), 2)
	args := append([]string{"--latency", "-t", strconv.Itoa(threads), "-c", strconv.Itoa(conns),
		"-d", fmt.Sprintf("%ds", int(d.Seconds()))}, extra...)
	out, err := exec.Command("wrk", append(args, url)...).CombinedOutput()
	if err != nil {
		return load{}, fmt.Errorf("wrk %s: %w\n%s", url, err, out)
	}
	if strings.Contains(string(out), "Non-2xx") || strings.Contains(string(out), "Socket errors") {
		return load{}, errSawErrors(fmt.Sprintf("wrk %s saw errors:\n%s", url, out))
	}
	var l load
	m := rpsLine.FindSubmatch(out)
	if m == nil {
		return load{}, fmt.Errorf("no Requests/sec in wrk output:\n%s", out)
	}
	l.rps, _ = strconv.ParseFloat(string(m[1]), 64)
	if m := requestsLine.FindSubmatch(out); m != nil {
		l.requests, _ = strconv.Atoi(string(m[1]))
	}
	for _, m := range pctLine.FindAllSubmatch(out, -1) {
		v, _ := strconv.ParseFloat(string(m[2]), 64)
		unit := map[string]time.Duration{"us": time.Microsecond, "ms": time.Millisecond, "s": time.Second}[string(m[3])]
		d := time.Duration(v * float64(unit))
		if string(m[1]) == "50" {
			l.p50 = d
		} else {
			l.p99 = d
		}
	}
	return l, nil
}

// warm runs wrk for -warmup to start the instances a measurement needs. Its
// errors are logged, not returned (starting ten instances at once on a busy
// machine may time a request out): the measured run after it checks its own.
func warm(url string, conns int) error {
	_, err := wrk(url, conns, *warmup)
	var saw errSawErrors
	if errors.As(err, &saw) {
		logf("warming up %s: some requests failed; measuring anyway", url)
		return nil
	}
	return err
}

// errSawErrors is wrk's output when it ran but some requests failed.
type errSawErrors string

func (e errSawErrors) Error() string { return string(e) }

// coldStarts measures n cold starts of each function of urls, the
// functions in turn: it waits for them to scale to zero (idle timeout 1s
// plus the reaper's period) and times a request to each, leaving
// coldSettle between two so that one's replacement spare starts while
// nothing is measured. Functions idling together take half the time of
// measuring them one after the other.
func coldStarts(urls []string, n int) ([][]time.Duration, error) {
	out := make([][]time.Duration, len(urls))
	for slices.ContainsFunc(out, func(d []time.Duration) bool { return len(d) < n }) {
		time.Sleep(2500 * time.Millisecond)
		for i, url := range urls {
			if len(out[i]) == n {
				continue
			}
			if i > 0 {
				time.Sleep(coldSettle)
			}
			took, cold, err := coldRequest(url)
			if err != nil {
				return nil, err
			}
			if !cold {
				logf("a request after idling found a warm instance; not counted")
				continue
			}
			out[i] = append(out[i], took)
		}
	}
	return out, nil
}

// coldSettle is the pause between two functions' cold starts of a round.
const coldSettle = 500 * time.Millisecond

// coldRequest times one request to url and reports whether it started an
// instance.
func coldRequest(url string) (time.Duration, bool, error) {
	start := time.Now()
	resp, err := http.Get(url)
	if err != nil {
		return 0, false, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	if resp.StatusCode != 200 {
		return 0, false, fmt.Errorf("cold request: HTTP %d", resp.StatusCode)
	}
	return took, !strings.Contains(resp.Header.Get("Server-Timing"), "cold;dur=0.000"), nil
}

// bareStarts times n runs of the bare interpreter.
func bareStarts(rc runtimeCase, n int) ([]time.Duration, error) {
	var out []time.Duration
	for range n {
		start := time.Now()
		if err := exec.Command(rc.interpreter, rc.bare...).Run(); err != nil {
			return nil, err
		}
		out = append(out, time.Since(start))
	}
	return out, nil
}

func ledgerRate() (string, error) {
	out, err := exec.Command("go", "test", "-run", "^$", "-bench", "^BenchmarkRecord$/sqlite", "-benchtime", *ledgerTime, "./modules/invoke/ledger/").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("ledger benchmark: %w\n%s", err, out)
	}
	m := regexp.MustCompile(`([0-9.]+) records/s`).FindSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("no records/s in the ledger benchmark output:\n%s", out)
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return fmt.Sprintf("%.0f", v), nil
}

func pct(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, (len(s)*p)/100)]
}

func msStr(d time.Duration) string {
	return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
}

func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port, nil
}

func hostname() string {
	h, _ := os.Hostname()
	return h
}

// replaceResults puts report between the results markers of the README.
func replaceResults(path, report string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	const begin, end = "<!-- results -->", "<!-- /results -->"
	i, j := bytes.Index(data, []byte(begin)), bytes.Index(data, []byte(end))
	if i < 0 || j < i {
		return fmt.Errorf("%s lacks the %s ... %s markers", path, begin, end)
	}
	out := append(append(append([]byte{}, data[:i+len(begin)]...), "\n"+report...), data[j:]...)
	return os.WriteFile(path, out, 0o644)
}
