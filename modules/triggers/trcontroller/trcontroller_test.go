package trcontroller_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"sless.kube5s.ru/sless/internal/testenv/kubeenv"
	"sless.kube5s.ru/sless/modules/functions"
	fncrstore "sless.kube5s.ru/sless/modules/functions/crstore"
	"sless.kube5s.ru/sless/modules/invoke"
	"sless.kube5s.ru/sless/modules/reconciler/crdriver"
	"sless.kube5s.ru/sless/modules/runtime"
	"sless.kube5s.ru/sless/modules/triggers"
	"sless.kube5s.ru/sless/modules/triggers/control"
	"sless.kube5s.ru/sless/modules/triggers/crstore"
	"sless.kube5s.ru/sless/modules/triggers/trcontroller"
	"sless.kube5s.ru/sless/modules/triggers/triggersfx"
)

func TestMain(m *testing.M) { os.Exit(kubeenv.Main(m)) }

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// invoker records the invocations of one replica and answers 200, after
// delay.
type invoker struct {
	delay time.Duration
	mu    sync.Mutex
	calls []invoke.Request
}

func (i *invoker) Invoke(_ context.Context, req invoke.Request) (*invoke.Response, error) {
	time.Sleep(i.delay)
	i.mu.Lock()
	defer i.mu.Unlock()
	i.calls = append(i.calls, req)
	return &invoke.Response{InvocationID: req.InvocationID, StatusCode: 200, Body: []byte(`{"ok":true}`)}, nil
}

// bodies counts the invocations from trigger kind and name by request
// body.
func (i *invoker) bodies(kind, name string) map[string]int {
	i.mu.Lock()
	defer i.mu.Unlock()
	out := map[string]int{}
	for _, c := range i.calls {
		if c.TriggerKind == kind && c.TriggerName == name {
			out[string(c.Body)]++
		}
	}
	return out
}

// count returns how many invocations came from trigger kind and name.
func (i *invoker) count(kind, name string) int {
	i.mu.Lock()
	defer i.mu.Unlock()
	n := 0
	for _, c := range i.calls {
		if c.TriggerKind == kind && c.TriggerName == name {
			n++
		}
	}
	return n
}

// ledger knows no invocation: the job reconciler reads it only for a run
// a stopped server left Running.
type ledger struct{ invoke.Ledger }

func (ledger) Get(context.Context, string, string) (*invoke.Record, error) {
	return nil, invoke.ErrNotFound
}

// instances refuses prewarms, as the kube executor does until it routes
// invocations.
type instances struct{ runtime.Instances }

func (instances) Warm(context.Context, functions.Key, time.Time) error { return runtime.ErrUnavailable }

// cluster is the stores the replicas share, in namespaces of the test's
// own.
type cluster struct {
	env       *kubeenv.Env
	functions *fncrstore.Store
	triggers  *crstore.Triggers
	jobs      *crstore.Jobs
	lease     string
	// ingress is where the replicas started next make the Ingresses of
	// http triggers.
	ingress trcontroller.IngressOptions
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	env := kubeenv.Start(t)
	prefix := env.NamespacePrefix(t)
	fns, err := fncrstore.New(env.Client, fncrstore.Options{NamespacePrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return &cluster{env: env, functions: fns,
		triggers: crstore.NewTriggers(env.Client, crstore.Options{NamespacePrefix: prefix}),
		jobs:     crstore.NewJobs(env.Client, crstore.Options{NamespacePrefix: prefix}),
		lease:    "sless-test-" + strings.ToLower(rand.Text()[:8]),
		ingress:  trcontroller.IngressOptions{Namespace: "default", Service: "sless"}}
}

// replica is one server's triggers module and controllers, wired as the
// cluster mode wires them.
type replica struct {
	app     *fxtest.App
	invoker *invoker
	gate    *control.Gate
	mgr     manager.Manager
}

// start starts a replica that stands for election in the cluster's lease.
func (c *cluster) start(t *testing.T) *replica {
	t.Helper()
	return c.startSlow(t, 0)
}

// startSlow starts a replica whose invocations take delay.
func (c *cluster) startSlow(t *testing.T, delay time.Duration) *replica {
	t.Helper()
	r := &replica{invoker: &invoker{delay: delay}}
	r.app = fxtest.New(t,
		fx.NopLogger,
		fx.Supply(discard),
		fx.Provide(
			prometheus.NewRegistry,
			func() invoke.Invoker { return r.invoker },
			func() invoke.Ledger { return ledger{} },
			func() runtime.Instances { return instances{} },
			func() functions.Store { return c.functions },
			func() functions.ChangeNotifier { return functions.NotifierFunc(func(functions.Key) {}) },
			func() *crstore.Triggers { return c.triggers },
			func() triggers.Store { return c.triggers },
			func() *crstore.Jobs { return c.jobs },
			func() triggers.JobStore { return c.jobs },
			func() trcontroller.IngressOptions { return c.ingress },
			func() (manager.Manager, error) {
				return crdriver.NewManager(c.env.Config, c.env.Scheme, crdriver.ManagerOptions{LeaderElection: true,
					LeaderElectionNamespace: "default", LeaderElectionID: c.lease}, discard)
			},
		),
		triggersfx.Module,
		trcontroller.Module,
		fx.Invoke(crdriver.Run),
		fx.Populate(&r.gate, &r.mgr),
	)
	r.app.RequireStart()
	t.Cleanup(func() { r.stop() })
	return r
}

func (r *replica) stop() {
	if r.app != nil {
		r.app.RequireStop()
		r.app = nil
	}
}

// elected reports whether r leads.
func (r *replica) elected() bool {
	select {
	case <-r.mgr.Elected():
		return true
	default:
		return false
	}
}

// waitElected waits until r leads.
func (r *replica) waitElected(t *testing.T) {
	t.Helper()
	select {
	case <-r.mgr.Elected():
	case <-time.After(30 * time.Second):
		t.Fatal("after 30s: the replica is not elected")
	}
}

func eventually(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still %v after %v", what, err, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func newNamespace() string { return "t-" + strings.ToLower(rand.Text()[:10]) }

func (c *cluster) createFunction(t *testing.T, ns, name string) {
	t.Helper()
	_, err := c.functions.Create(context.Background(), &functions.Function{Name: name, Namespace: ns,
		Spec: functions.Spec{Runtime: "python3.11"}})
	if err != nil {
		t.Fatal(err)
	}
}

func (c *cluster) createTrigger(t *testing.T, tr *triggers.Trigger) {
	t.Helper()
	if _, err := c.triggers.Create(context.Background(), tr); err != nil {
		t.Fatal(err)
	}
}

// trigger reads a trigger's status.
func (c *cluster) trigger(t *testing.T, key triggers.Key) *triggers.Trigger {
	t.Helper()
	tr, err := c.triggers.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// TestCronFiresFromTheLeaderOnly: of two replicas, the elected one runs
// the cron trigger and writes its next run into the Trigger's status; the
// other fires nothing. When the leader stops, the other takes over.
func TestCronFiresFromTheLeaderOnly(t *testing.T) {
	c := newCluster(t)
	first := c.start(t)
	first.waitElected(t)
	second := c.start(t)
	ns := newNamespace()
	c.createFunction(t, ns, "tick")
	tr := &triggers.Trigger{Name: "every-second", Namespace: ns, Spec: triggers.Spec{Function: "tick", Type: triggers.TypeCron,
		CronSpec: triggers.CronSpec{Schedule: "@every 1s", Payload: json.RawMessage(`{"n":1}`)}}}
	c.createTrigger(t, tr)
	eventually(t, 20*time.Second, "the leader firing the trigger", func() error {
		if n := first.invoker.count(invoke.KindCron, tr.Name); n < 2 {
			return fmt.Errorf("%d runs", n)
		}
		return nil
	})
	eventually(t, 10*time.Second, "the next run and the runs in the status", func() error {
		st := c.trigger(t, tr.Key()).Status
		if st.Phase != triggers.PhaseActive || st.NextFireAt == nil || st.Fired < 1 || st.LastFiredAt == nil {
			return fmt.Errorf("status %+v", st)
		}
		if time.Until(*st.NextFireAt) > 2*time.Second {
			return fmt.Errorf("next run %v is not within a second or two", st.NextFireAt)
		}
		return nil
	})
	if n := second.invoker.count(invoke.KindCron, tr.Name); n != 0 || second.elected() {
		t.Errorf("the replica that is not the leader fired %d runs (elected: %v); want none", n, second.elected())
	}

	first.stop()
	eventually(t, 60*time.Second, "the second replica taking over", func() error {
		if n := second.invoker.count(invoke.KindCron, tr.Name); n < 1 {
			return fmt.Errorf("%d runs (elected: %v)", n, second.elected())
		}
		return nil
	})
}

// TestGateOnEveryReplica: every replica opens /fn for an enabled http
// trigger and closes it for a disabled one, in place, leader or not; the
// trigger's phase is the leader's.
func TestGateOnEveryReplica(t *testing.T) {
	c := newCluster(t)
	replicas := []*replica{c.start(t), c.start(t)}
	ns := newNamespace()
	c.createFunction(t, ns, "web")
	tr := &triggers.Trigger{Name: "web", Namespace: ns, Spec: triggers.Spec{Function: "web", Type: triggers.TypeHTTP}}
	c.createTrigger(t, tr)
	exposed := func(want bool) func() error {
		return func() error {
			for i, r := range replicas {
				if got := r.gate.Access(ns, "web").Exposed; got != want {
					return fmt.Errorf("replica %d: exposed %v", i, got)
				}
			}
			return nil
		}
	}
	eventually(t, 30*time.Second, "exposed on every replica", exposed(true))
	eventually(t, 10*time.Second, "phase Active", func() error {
		if p := c.trigger(t, tr.Key()).Status.Phase; p != triggers.PhaseActive {
			return fmt.Errorf("phase %q", p)
		}
		return nil
	})
	spec := tr.Spec
	spec.Enabled = ptr.To(false)
	if _, err := c.triggers.UpdateSpec(context.Background(), tr.Key(), spec); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "closed on every replica", exposed(false))
	eventually(t, 10*time.Second, "phase Disabled", func() error {
		if p := c.trigger(t, tr.Key()).Status.Phase; p != triggers.PhaseDisabled {
			return fmt.Errorf("phase %q", p)
		}
		return nil
	})
}

// TestTriggersReferToTheirOwnNamespace: a trigger names a function of its
// own namespace; the same name in another namespace is not it.
func TestTriggersReferToTheirOwnNamespace(t *testing.T) {
	c := newCluster(t)
	r := c.start(t)
	mine, other := newNamespace(), newNamespace()
	c.createFunction(t, other, "shared-name")
	tr := &triggers.Trigger{Name: "web", Namespace: mine, Spec: triggers.Spec{Function: "shared-name", Type: triggers.TypeHTTP}}
	c.createTrigger(t, tr)
	eventually(t, 30*time.Second, "the trigger in Error", func() error {
		st := c.trigger(t, tr.Key()).Status
		if st.Phase != triggers.PhaseError || !strings.Contains(st.Message, fmt.Sprintf("does not exist in namespace %q", mine)) {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	if r.gate.Access(other, "shared-name").Exposed || r.gate.Access(mine, "shared-name").Exposed {
		t.Error("a trigger exposed a function of another namespace")
	}
	// Its own function appearing makes it Active, through the watch of
	// Functions.
	c.createFunction(t, mine, "shared-name")
	eventually(t, 8*time.Second, "the trigger Active once its function exists", func() error {
		if p := c.trigger(t, tr.Key()).Status.Phase; p != triggers.PhaseActive {
			return fmt.Errorf("phase %q", p)
		}
		return nil
	})
}

// TestJobRunsOncePerRunID: run_id 0 runs nothing, a raised run_id runs
// once, an unchanged one never again, and the outcome is in the status.
func TestJobRunsOncePerRunID(t *testing.T) {
	c := newCluster(t)
	r := c.start(t)
	ns := newNamespace()
	c.createFunction(t, ns, "batch")
	ctx := context.Background()
	j := &triggers.Job{Name: "nightly", Namespace: ns, JobSpec: triggers.JobSpec{Function: "batch", Payload: json.RawMessage(`{}`)}}
	if _, err := c.jobs.Create(ctx, j); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if n := r.invoker.count(invoke.KindJob, "nightly"); n != 0 {
		t.Fatalf("run_id 0 ran %d times; want never", n)
	}
	for _, runID := range []int64{1, 2} {
		spec := j.JobSpec
		spec.RunID = runID
		if _, err := c.jobs.UpdateSpec(ctx, j.Key(), spec); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, fmt.Sprintf("run %d succeeded", runID), func() error {
			got, err := c.jobs.Get(ctx, j.Key())
			if err != nil {
				return err
			}
			if st := got.Status; st.RunID != runID || st.Phase != triggers.JobSucceeded || st.StatusCode != 200 || st.Result != `{"ok":true}` {
				return fmt.Errorf("status %+v", st)
			}
			return nil
		})
		// The same run_id again (a spec write that changes nothing else)
		// runs nothing.
		if _, err := c.jobs.UpdateSpec(ctx, j.Key(), spec); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
		if n := r.invoker.count(invoke.KindJob, "nightly"); n != int(runID) {
			t.Errorf("after run_id %d: %d runs; want %d", runID, n, runID)
		}
	}
}
