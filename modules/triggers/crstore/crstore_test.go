package crstore_test

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	"sless.kube5s.ru/sless/internal/testenv/kubeenv"
	"sless.kube5s.ru/sless/modules/triggers"
	"sless.kube5s.ru/sless/modules/triggers/crstore"
	"sless.kube5s.ru/sless/modules/triggers/trstoretest"
)

func TestMain(m *testing.M) { os.Exit(kubeenv.Main(m)) }

// options returns the options of stores of namespaces of t's own on the
// package's API server, and the server.
func options(t *testing.T) (*kubeenv.Env, crstore.Options) {
	t.Helper()
	env := kubeenv.Start(t)
	return env, crstore.Options{NamespacePrefix: env.NamespacePrefix(t)}
}

func TestTriggersConformance(t *testing.T) {
	trstoretest.RunTriggers(t, func(t *testing.T) triggers.Store {
		env, opts := options(t)
		return crstore.NewTriggers(env.Client, opts)
	})
}

func TestJobsConformance(t *testing.T) {
	trstoretest.RunJobs(t, func(t *testing.T) triggers.JobStore {
		env, opts := options(t)
		return crstore.NewJobs(env.Client, opts)
	})
}

// TestSameSpecKeepsTheGeneration checks the API server's rule that the
// stores follow: a spec write that changes nothing is no new generation.
func TestSameSpecKeepsTheGeneration(t *testing.T) {
	env, opts := options(t)
	ctx := context.Background()
	trs, jobs := crstore.NewTriggers(env.Client, opts), crstore.NewJobs(env.Client, opts)
	on := true
	tr, err := trs.Create(ctx, &triggers.Trigger{Namespace: "default", Name: "web",
		Spec: triggers.Spec{Function: "hello", Type: triggers.TypeHTTP, Enabled: &on, HTTPSpec: triggers.HTTPSpec{Auth: triggers.AuthNone}}})
	if err != nil {
		t.Fatal(err)
	}
	job, err := jobs.Create(ctx, &triggers.Job{Namespace: "default", Name: "run",
		JobSpec: triggers.JobSpec{Function: "hello", Payload: json.RawMessage(`{"a":1}`), RunID: 1}})
	if err != nil {
		t.Fatal(err)
	}
	sameTr, err := trs.UpdateSpec(ctx, tr.Key(), tr.Spec)
	if err != nil {
		t.Fatal(err)
	}
	sameJob, err := jobs.UpdateSpec(ctx, job.Key(), job.JobSpec)
	if err != nil {
		t.Fatal(err)
	}
	raised := job.JobSpec
	raised.RunID = 2
	newJob, err := jobs.UpdateSpec(ctx, job.Key(), raised)
	if err != nil {
		t.Fatal(err)
	}
	if sameTr.Generation != 1 || sameJob.Generation != 1 || newJob.Generation != 2 {
		t.Errorf("generations: same trigger spec %d, same job spec %d, raised run ID %d; want 1, 1, 2",
			sameTr.Generation, sameJob.Generation, newJob.Generation)
	}
}
