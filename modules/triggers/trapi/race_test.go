package trapi

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"

	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/storage/sqldb"
	"sless.kube5s.ru/sless/modules/triggers"
	"sless.kube5s.ru/sless/modules/triggers/trstore"
)

// vanishingFunctions is a functions.Store whose one function is deleted
// right after the first look-up: the delete of the function runs between
// the API's check and its write.
type vanishingFunctions struct {
	functions.Store
	lookups atomic.Int32
}

func (v *vanishingFunctions) Get(_ context.Context, k functions.Key) (*functions.Function, error) {
	if v.lookups.Add(1) == 1 {
		return &functions.Function{Namespace: k.Namespace, Name: k.Name}, nil
	}
	return nil, functions.ErrNotFound
}

func TestWriteRacingTheFunctionsDeleteLeavesNothing(t *testing.T) {
	gin.SetMode(gin.TestMode)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	db, _, err := sqldb.Open("sqlite:"+filepath.Join(t.TempDir(), "db.sqlite"), log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sqldb.Close(db) })
	if err := sqldb.Migrate(context.Background(), db, trstore.Migrations()); err != nil {
		t.Fatal(err)
	}
	trs, jobs := trstore.NewTriggers(db), trstore.NewJobs(db)
	types, err := triggers.NewTypes(nil, triggers.Capabilities{})
	if err != nil {
		t.Fatal(err)
	}
	k := triggers.Key{Namespace: "default", Name: "late"}

	for _, tc := range []struct {
		kind, method, path, body string
		existing                 func() error
		stored                   func() error
	}{
		{kind: "trigger", method: http.MethodPost, path: "/v1/namespaces/default/triggers",
			body:   `{"name": "late", "function": "gone", "type": "http"}`,
			stored: func() error { _, err := trs.Get(context.Background(), k); return err }},
		{kind: "trigger", method: http.MethodPut, path: "/v1/namespaces/default/triggers/late",
			body: `{"function": "gone", "type": "http"}`,
			existing: func() error {
				_, err := trs.Create(context.Background(), &triggers.Trigger{Namespace: "default", Name: "late",
					Spec: triggers.Spec{Function: "other", Type: "http"}})
				return err
			},
			stored: func() error { _, err := trs.Get(context.Background(), k); return err }},
		{kind: "job", method: http.MethodPost, path: "/v1/namespaces/default/jobs",
			body:   `{"name": "late", "function": "gone", "run_id": 1}`,
			stored: func() error { _, err := jobs.Get(context.Background(), k); return err }},
		{kind: "job", method: http.MethodPut, path: "/v1/namespaces/default/jobs/late",
			body: `{"function": "gone", "run_id": 1}`,
			existing: func() error {
				_, err := jobs.Create(context.Background(), &triggers.Job{Namespace: "default", Name: "late",
					JobSpec: triggers.JobSpec{Function: "other"}})
				return err
			},
			stored: func() error { _, err := jobs.Get(context.Background(), k); return err }},
	} {
		t.Run(tc.method+" "+tc.kind, func(t *testing.T) {
			if tc.existing != nil {
				if err := tc.existing(); err != nil {
					t.Fatal(err)
				}
			}
			var notified []triggers.Key
			note := func(k triggers.Key) { notified = append(notified, k) }
			api := New(trs, jobs, &vanishingFunctions{}, types, nil, triggers.NotifierFuncs{Triggers: note, Jobs: note}, log)
			r := gin.New()
			api.Register(r.Group("/v1"), r)
			w := httptest.NewRecorder()
			r.ServeHTTP(w, httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body)))

			if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), `does not exist`) {
				t.Errorf("got %d %s; want 400 saying the function does not exist", w.Code, w.Body)
			}
			if err := tc.stored(); !errors.Is(err, triggers.ErrNotFound) {
				t.Errorf("the %s is still stored (%v); want it removed", tc.kind, err)
			}
			if len(notified) != 1 || notified[0] != k {
				t.Errorf("notified %v; want %v once, so that nothing runs it", notified, k)
			}
		})
	}
}
