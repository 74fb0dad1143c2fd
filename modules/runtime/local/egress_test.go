package local_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sless.kube5s.ru/sless/internal/testenv"
	"sless.kube5s.ru/sless/modules/meta"
	"sless.kube5s.ru/sless/modules/runtime"
	"sless.kube5s.ru/sless/modules/runtime/local"
	"sless.kube5s.ru/sless/modules/runtime/sandbox"
)

// connectProbe connects to the TCP address of its event and answers "ok" or
// the errno's name.
const connectProbe = `import errno, socket
def handle(event, context):
    host, port = event.rsplit(":", 1)
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect((host, int(port)))
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e))
    finally:
        s.close()
`

// An instance of a function with public egress cannot reach loopback, one
// with egress all can, and the network cgroups go with the instances and
// the executor.
func TestPublicEgressInstances(t *testing.T) {
	sb, reason, err := sandbox.New(sandbox.Config{Mode: sandbox.ModeAuto})
	if err != nil {
		t.Fatal(err)
	}
	if sb == nil {
		t.Skipf("no sandbox here: %s", reason)
	}
	policy, err := sandbox.HostEgressPolicy("/etc/resolv.conf")
	if err != nil {
		t.Fatal(err)
	}
	filter, err := sandbox.NewEgressFilter(policy)
	if err != nil {
		t.Skipf("no egress filter here: %v", err)
	}
	defer filter.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()

	for _, zygotes := range []bool{false, true} {
		t.Run(fmt.Sprintf("zygotes %v", zygotes), func(t *testing.T) {
			testPublicEgress(t, local.Config{Spares: 1, Sandbox: sb, Egress: filter, Zygotes: zygotes}, ln.Addr().String())
		})
	}
}

func testPublicEgress(t *testing.T, cfg local.Config, addr string) {
	e := newExecutor(t, cfg)
	dir := local.EgressDirOf(e)
	if dir == "" {
		t.Fatal("the executor has the filter but no egress cgroup")
	}
	zygote := 0
	if cfg.Zygotes {
		if !local.Forks(e) {
			t.Skip("instances are not forked here")
		}
		deployIn(t, e, "default", "warmup", forkedProbe)
		invokeIn(t, e, "default", "warmup", "{}")
		zygote = zygoteOf(t, e, "default")
	}
	for egress, want := range map[runtime.Egress]string{runtime.EgressPublic: "EPERM", runtime.EgressAll: "ok"} {
		name := "net-" + string(egress)
		tg := target(name, "python3.11", code(t, map[string]string{"handler.py": connectProbe}))
		tg.Egress = egress
		if _, err := e.Deploy(context.Background(), tg); err != nil {
			t.Fatal(err)
		}
		if r := invoke(t, e, name, fmt.Sprintf("%q", addr)); r.err != nil || r.body != `"`+want+`"` {
			t.Errorf("%s: connect to %s: %+v; want %s", name, addr, r, want)
		}
		if pids := local.InstancePids(e, "default", name); zygote != 0 && (len(pids) != 1 || parentOf(t, pids[0]) != zygote) {
			t.Errorf("%s: instances %v, want one forked by the zygote's init %d", name, pids, zygote)
		}
		if err := e.Undeploy(context.Background(), meta.Key{Namespace: "default", Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	// Only the keeper stays, and the cgroups of processes still running
	// (the spares', the warm-up's, a zygote's on a cgroup v2 machine).
	testenv.Eventually(t, 30*time.Second, "the instances' network cgroups removed", func() bool {
		entries, _ := os.ReadDir(dir)
		for _, en := range entries {
			if !en.IsDir() || en.Name() == "egress-hooks" {
				continue
			}
			procs, err := os.ReadFile(filepath.Join(dir, en.Name(), "cgroup.procs"))
			if err != nil || len(procs) == 0 {
				return false
			}
		}
		return true
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after Stop, %s: %v; want it removed", dir, err)
	}
}

// Where public egress cannot be enforced, Deploy refuses a function that
// asks for it, saying why, and an executor that must give it to every
// function does not start.
func TestPublicEgressUnavailable(t *testing.T) {
	e := newExecutor(t, local.Config{EgressUnavailable: "the test says so"})
	tg := target("pub", "python3.11", code(t, map[string]string{"handler.py": connectProbe}))
	tg.Egress = runtime.EgressPublic
	_, err := e.Deploy(context.Background(), tg)
	if !errors.Is(err, runtime.ErrUnsupported) ||
		runtime.PublicMessage(err, "") != `egress "public" is not available on this server: the test says so` {
		t.Errorf("Deploy: %v; want ErrUnsupported saying why", err)
	}
	if _, err := e.Acquire(context.Background(), meta.Key{Namespace: "default", Name: "pub"}); !errors.Is(err, runtime.ErrNotDeployed) {
		t.Errorf("Acquire after the refusal: %v; want ErrNotDeployed", err)
	}
	tg.Egress = runtime.EgressAll
	if _, err := e.Deploy(context.Background(), tg); err != nil {
		t.Errorf("Deploy with egress all: %v", err)
	}

	strict := local.New(local.Config{PublicEgress: true, EgressUnavailable: "the test says so"}, nil, slog.New(slog.DiscardHandler))
	if err := strict.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "the test says so") {
		t.Errorf("Start with PublicEgress and no filter: %v; want an error saying why", err)
	}
}
