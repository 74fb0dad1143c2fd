package runtimes_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"sless.kube5s.ru/sless/modules/runtime"
	"sless.kube5s.ru/sless/modules/runtime/nodejs"
	pyrt "sless.kube5s.ru/sless/modules/runtime/python"
)

// imageRuntime is a provider the crane builder builds images of.
type imageRuntime interface {
	runtime.Provider
	runtime.ImageRuntime
}

// TestImageLayoutAgrees checks that the three parties to the image layout
// agree: each runtimes/<runtime>/Dockerfile builds the base image the
// provider names, with the wrapper where the layout says, the same user,
// working directory, port, environment and entrypoint the crane builder
// sets; and the wrapper, started with that entrypoint, finds the code and
// the dependencies where the layout puts them.
func TestImageLayoutAgrees(t *testing.T) {
	for _, p := range []imageRuntime{pyrt.New(), nodejs.New()} {
		t.Run(p.Name(), func(t *testing.T) {
			layout := p.ImageLayout()
			df := parseDockerfile(t, filepath.Join(p.Name(), "Dockerfile"))

			image, version, _ := strings.Cut(p.BaseImage(), ":")
			if version == "" || version == "latest" {
				t.Errorf("base image %s has no version tag", p.BaseImage())
			}
			labels := df.labels()
			if labels["org.opencontainers.image.title"] != image || labels["org.opencontainers.image.version"] != version {
				t.Errorf("Dockerfile labels the image %q %q; the provider's base image is %s", labels["org.opencontainers.image.title"],
					labels["org.opencontainers.image.version"], p.BaseImage())
			}

			wrapperName, wrapper := p.Wrapper()
			if got, want := df.one(t, "COPY"), wrapperName+" "+layout.WrapperPath(); got != want {
				t.Errorf("COPY %s; want COPY %s", got, want)
			}
			onDisk, err := os.ReadFile(filepath.Join(p.Name(), wrapperName))
			if err != nil || !bytes.Equal(onDisk, wrapper) {
				t.Errorf("the file the Dockerfile copies is not the embedded wrapper (%v)", err)
			}
			for instr, want := range map[string]string{
				"WORKDIR": runtime.ImageCodeDir, "USER": runtime.ImageUser, "EXPOSE": strconv.Itoa(runtime.ImagePort),
			} {
				if got := df.one(t, instr); got != want {
					t.Errorf("%s %s; want %s", instr, got, want)
				}
			}
			var entrypoint []string
			if err := json.Unmarshal([]byte(df.one(t, "ENTRYPOINT")), &entrypoint); err != nil {
				t.Fatalf("ENTRYPOINT is not in exec form: %v", err)
			}
			if diff := cmp.Diff(layout.Entrypoint(), entrypoint); diff != "" {
				t.Errorf("ENTRYPOINT (-layout +Dockerfile):\n%s", diff)
			}
			if diff := cmp.Diff(layout.Env, df.env()); diff != "" {
				t.Errorf("ENV (-layout +Dockerfile):\n%s", diff)
			}

			runLayout(t, p.Name(), layout, entrypoint)
		})
	}
}

// runLayout lays a function out in a directory as the image would (the
// wrapper, the code, a dependency in DepsDir), starts the wrapper with the
// entrypoint's arguments mapped into it, and invokes the handler, which
// returns what it imported from the dependency.
func runLayout(t *testing.T, name string, layout runtime.ImageLayout, entrypoint []string) {
	t.Helper()
	i := slices.IndexFunc(wrapperRuntimes, func(rt *wrapperRuntime) bool { return rt.name == name })
	rt := wrapperRuntimes[i]
	interp, err := rt.locate()
	if errors.Is(err, errNotInstalled) {
		t.Skipf("%s is not installed: the wrapper is not run", name)
	}
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	at := func(p string) string { return filepath.Join(root, filepath.FromSlash(p)) }
	deps := runtime.ImageCodeDir + "/" + layout.DepsDir
	files := map[string]map[string]string{
		python: {
			deps + "/depmod.py":               "VALUE = 'from the dependency layer'\n",
			runtime.ImageCodeDir + "/main.py": "import depmod\ndef run(event, ctx):\n    return depmod.VALUE\n",
		},
		node: {
			deps + "/depmod/index.js":         "exports.VALUE = 'from the dependency layer';\n",
			runtime.ImageCodeDir + "/main.js": "const depmod = require('depmod');\nexports.run = () => depmod.VALUE;\n",
		},
	}[name]
	files[layout.WrapperPath()] = string(rt.source)
	for p, content := range files {
		if err := os.MkdirAll(filepath.Dir(at(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(at(p), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The suite's launcher passes the script and --listen itself.
	if entrypoint[1] != layout.WrapperPath() || entrypoint[2] != "--listen" {
		t.Fatalf("entrypoint %q does not run the wrapper then --listen", entrypoint)
	}
	var args []string
	for _, a := range entrypoint[4:] {
		if strings.HasPrefix(a, "/") {
			a = at(a)
		}
		args = append(args, a)
	}
	s := &suite{rt: rt, interp: interp, script: at(layout.WrapperPath())}
	in := s.start(t, startOptions{args: append(args, "--handler", "main.run")})
	res := in.get(t, "/")
	wantStatus(t, res, http.StatusOK)
	wantBody(t, res, `"from the dependency layer"`)
}

// dockerfile is the instructions of a Dockerfile: name (upper case) and
// arguments, continuation lines joined, comments dropped.
type dockerfile [][2]string

func parseDockerfile(t *testing.T, path string) dockerfile {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var df dockerfile
	var cur string
	for line := range strings.SplitSeq(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") || (trimmed == "" && cur == "") {
			continue
		}
		if rest, ok := strings.CutSuffix(trimmed, "\\"); ok {
			cur += rest + " "
			continue
		}
		cur += trimmed
		instr, args, _ := strings.Cut(cur, " ")
		df = append(df, [2]string{strings.ToUpper(instr), strings.Join(strings.Fields(args), " ")})
		cur = ""
	}
	return df
}

// one returns the arguments of the only instr of the file.
func (df dockerfile) one(t *testing.T, instr string) string {
	t.Helper()
	var found []string
	for _, i := range df {
		if i[0] == instr {
			found = append(found, i[1])
		}
	}
	if len(found) != 1 {
		t.Fatalf("the Dockerfile has %d %s instructions, want 1", len(found), instr)
	}
	return found[0]
}

// env is what the ENV instructions set, "K=V" in order.
func (df dockerfile) env() []string {
	var env []string
	for _, i := range df {
		if i[0] == "ENV" {
			env = append(env, strings.Fields(i[1])...)
		}
	}
	return env
}

// labels are the LABEL instructions' pairs, values unquoted.
func (df dockerfile) labels() map[string]string {
	labels := map[string]string{}
	for _, i := range df {
		if i[0] != "LABEL" {
			continue
		}
		for _, kv := range strings.Fields(i[1]) {
			k, v, _ := strings.Cut(kv, "=")
			labels[k] = strings.Trim(v, `"`)
		}
	}
	return labels
}
