package deploy

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"sigs.k8s.io/yaml"

	"sless.kube5s.ru/sless/internal/testenv"
)

// pendingFlags are flags the manifests give that `sless server` does not
// have yet, with what brings them. The test fails once the binary has one,
// so that the entry is removed with the change that adds the flag.
var pendingFlags = map[string]string{}

// binary is the sless binary the image runs, built once by slessBinary.
var binary struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// slessBinary builds cmd/sless as deploy/Dockerfile does (-tags cluster,
// without cgo; -trimpath and the linker flags change no flag) and returns
// its path. TestMain removes it.
func slessBinary(t *testing.T) string {
	t.Helper()
	binary.once.Do(func() {
		root, err := testenv.FindRepoRoot()
		if err != nil {
			binary.err = err
			return
		}
		if binary.dir, binary.err = os.MkdirTemp("", "sless-deploy-"); binary.err != nil {
			return
		}
		binary.path = filepath.Join(binary.dir, "sless")
		cmd := exec.Command("go", "build", "-tags", "cluster", "-o", binary.path, "./cmd/sless")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			binary.err = fmt.Errorf("go build -tags cluster ./cmd/sless: %v\n%s", err, out)
		}
	})
	if binary.err != nil {
		t.Fatal(binary.err)
	}
	return binary.path
}

// serverHelp is what `sless server --help` lists: the server's flags (not
// the CLI's global ones), their variables, and the defaults it prints.
type serverHelp struct {
	flags    map[string]bool
	env      map[string]bool
	defaults map[string]string
}

var (
	helpFlag    = regexp.MustCompile(`^\s+(?:-\w, )?--([a-z0-9-]+)`)
	helpEnv     = regexp.MustCompile(`\(env (SLESS_[A-Z0-9_]+)\)`)
	helpDefault = regexp.MustCompile(`\(default "?([^")]*)"?\)\s*$`)
)

// parseHelp reads the "Flags:" section of `sless server --help`.
func parseHelp(out string) serverHelp {
	h := serverHelp{flags: map[string]bool{}, env: map[string]bool{}, defaults: map[string]string{}}
	in := false
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "Flags:":
			in = true
			continue
		case !strings.HasPrefix(line, " "):
			in = false
		}
		m := helpFlag.FindStringSubmatch(line)
		if !in || m == nil {
			continue
		}
		h.flags[m[1]] = true
		if e := helpEnv.FindStringSubmatch(line); e != nil {
			h.env[e[1]] = true
		}
		if d := helpDefault.FindStringSubmatch(line); d != nil {
			h.defaults[m[1]] = d[1]
		}
	}
	return h
}

// TestFlagsExist: every setting the manifests give the server (its
// arguments, its SLESS_ variables, the keys of its config file) is one
// that `sless server --help` of the image's binary lists, and the
// namespace of kaniko builds is the one the server uses by default.
func TestFlagsExist(t *testing.T) {
	out, err := exec.Command(slessBinary(t), "server", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("sless server --help: %v\n%s", err, out)
	}
	help := parseHelp(string(out))
	if !help.flags["listen"] || !help.env["SLESS_LISTEN"] {
		t.Fatalf("sless server --help lists no --listen (env SLESS_LISTEN): the parser does not read it:\n%s", out)
	}
	for flag, why := range pendingFlags {
		if help.flags[flag] {
			t.Errorf("--%s is in sless server --help now: remove it from pendingFlags (%s)", flag, why)
		}
	}
	if got := help.defaults["kaniko-namespace"]; got != kanikoNamespace {
		t.Errorf("the server's --kaniko-namespace default is %q; the kaniko component makes %q", got, kanikoNamespace)
	}
	known := func(flag string) bool {
		if help.flags[flag] {
			return true
		}
		_, pending := pendingFlags[flag]
		return pending
	}
	for _, r := range renderAll(t) {
		_, c := slessPods(t, r)
		for _, a := range c.Args {
			flag, ok := strings.CutPrefix(a, "--")
			flag, _, _ = strings.Cut(flag, "=")
			if ok && !known(flag) {
				t.Errorf("%s: argument %s: sless server has no flag --%s", r.name, a, flag)
			}
		}
		for _, e := range c.Env {
			if strings.HasPrefix(e.Name, "SLESS_") && !help.env[e.Name] {
				t.Errorf("%s: env %s: sless server reads no such variable", r.name, e.Name)
			}
		}
		cfg := flagValue(c.Args, "config")
		cm := r.generated("ConfigMap", slessNamespace, "sless-config")
		if cm == nil {
			t.Fatalf("%s: no ConfigMap sless-config", r.name)
		}
		data, _ := cm.Object["data"].(map[string]any)[filepath.Base(cfg)].(string)
		var settings map[string]any
		if err := yaml.Unmarshal([]byte(data), &settings); err != nil {
			t.Fatalf("%s: %s: %v", r.name, cfg, err)
		}
		for k := range settings {
			if !known(k) || k == "config" || k == "help" {
				t.Errorf("%s: %s: sless server has no setting %q", r.name, filepath.Base(cfg), k)
			}
		}
	}
}

func TestParseHelp(t *testing.T) {
	const out = `Run the sless server.

Flags:
      --api-token string     bearer token (env SLESS_API_TOKEN)
  -h, --help                 help for server
      --kaniko-namespace string   Kubernetes namespace (env SLESS_KANIKO_NAMESPACE) (default "sless-builds")
      --prestart int         interpreters (env SLESS_PRESTART) (default 1)

Global Flags:
  -n, --namespace string   namespace (default: SLESS_NAMESPACE, else the token's own namespace)
`
	h := parseHelp(out)
	for _, f := range []string{"api-token", "help", "kaniko-namespace", "prestart"} {
		if !h.flags[f] {
			t.Errorf("flag %s not found", f)
		}
	}
	if h.flags["namespace"] {
		t.Error("a global flag (the CLI's) taken for a server flag")
	}
	if !h.env["SLESS_API_TOKEN"] || h.env["SLESS_NAMESPACE"] {
		t.Errorf("variables %v; want SLESS_API_TOKEN and not the CLI's SLESS_NAMESPACE", h.env)
	}
	if h.defaults["kaniko-namespace"] != "sless-builds" || h.defaults["prestart"] != "1" {
		t.Errorf("defaults %v", h.defaults)
	}
}
