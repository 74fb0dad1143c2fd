package local_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"sless.kube5s.ru/sless/internal/testenv"
	"sless.kube5s.ru/sless/modules/meta"
	"sless.kube5s.ru/sless/modules/runtime/local"
	"sless.kube5s.ru/sless/modules/runtime/sandbox"
)

func TestMain(m *testing.M) {
	sandbox.Init()
	os.Exit(m.Run())
}

// sandboxedProbe reports what an instance sees of itself, and starts a
// process of its own in a new session that must not outlive it.
const sandboxedProbe = `import os, subprocess
def handle(event, context):
    subprocess.Popen(["/bin/sleep", event], start_new_session=True)
    try:
        open("/code/handler.py", "a").close()
        code = "writable"
    except OSError as e:
        code = "read-only"
    return [os.getuid(), os.getcwd(), code, os.environ.get("PYTHONHASHSEED", "")]
`

// Sandboxed instances get their code at /code read-only, from a spare and
// from a process started with the function's env alike, and take their
// processes with them when the function is undeployed.
func TestSandboxedInstances(t *testing.T) {
	sb, reason, err := sandbox.New(sandbox.Config{Mode: sandbox.ModeAuto})
	if err != nil {
		t.Fatal(err)
	}
	if sb == nil {
		t.Skipf("no sandbox here: %s", reason)
	}
	e := newExecutor(t, local.Config{Spares: 1, Sandbox: sb})
	for i, env := range []map[string]string{nil, {"PYTHONHASHSEED": "7"}} {
		name := "boxed" + strconv.Itoa(i)
		t.Run(name, func(t *testing.T) {
			tg := target(name, "python3.11", code(t, map[string]string{"handler.py": sandboxedProbe}))
			tg.Env = env
			if ro, err := e.Deploy(context.Background(), tg); err != nil || !ro.Ready {
				t.Fatalf("Deploy: %+v, %v; want ready", ro, err)
			}
			marker := fmt.Sprintf("%d.%d", 9000+i, os.Getpid()) // sleep takes decimals; unique on the machine
			r := invoke(t, e, name, `"`+marker+`"`)
			if r.err != nil || r.result.StatusCode != 200 {
				t.Fatalf("invoke: %+v", r)
			}
			var got []any
			if err := json.Unmarshal([]byte(r.body), &got); err != nil || len(got) != 4 || got[0] == 0.0 ||
				got[1] != "/code" || got[2] != "read-only" || got[3] != env["PYTHONHASHSEED"] {
				t.Errorf("got %s; want an unprivileged uid, /code read-only and the function's env", r.body)
			}
			// The handler returns as soon as it forked: the child may not
			// have exec'd sleep yet.
			testenv.Eventually(t, 30*time.Second, "the handler's process running", func() bool { return len(pidsWith(marker)) > 0 })
			if err := e.Undeploy(context.Background(), meta.Key{Namespace: "default", Name: name}); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, 30*time.Second, "the handler's process gone with the instance", func() bool { return len(pidsWith(marker)) == 0 })
		})
	}
}

// pidsWith returns the pids whose command line has the argument arg.
func pidsWith(arg string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if pid, perr := strconv.Atoi(e.Name()); perr == nil && err == nil && strings.Contains(string(cmdline), "\x00"+arg+"\x00") {
			pids = append(pids, pid)
		}
	}
	return pids
}
