package fnapi_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"sless.kube5s.ru/sless/modules/build/safezip"
	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/functions/fnapi"
	"sless.kube5s.ru/sless/modules/functions/fnstore"
	"sless.kube5s.ru/sless/modules/runtime"
	"sless.kube5s.ru/sless/modules/runtime/python"
	"sless.kube5s.ru/sless/modules/server/httpx"
	"sless.kube5s.ru/sless/modules/storage/blobfs"
	"sless.kube5s.ru/sless/modules/storage/sqldb"
)

// The REST answers show a function's phase and conditions, and never the
// reconciler's bookkeeping (the artifact is a path on the server), which
// the store keeps.
func TestAnswersLeaveTheBookkeepingOut(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	db, _, err := sqldb.Open("sqlite:"+filepath.Join(t.TempDir(), "db"), log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sqldb.Close(db) })
	if err := sqldb.Migrate(ctx, db, fnstore.Migrations()); err != nil {
		t.Fatal(err)
	}
	store := fnstore.New(db)
	blobs, err := blobfs.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	reg, err := runtime.NewRegistry([]runtime.Provider{python.New()})
	if err != nil {
		t.Fatal(err)
	}
	gin.SetMode(gin.TestMode)
	engine := gin.New()
	var routes httpx.Routes = fnapi.New(store, reg, functions.NotifierFunc(func(functions.Key) {}), nil, blobs,
		safezip.DefaultLimits(), t.TempDir(), log)
	routes.Register(engine.Group("/v1"), engine)
	do := func(method, path, body string) (int, string) {
		t.Helper()
		rec := httptest.NewRecorder()
		engine.ServeHTTP(rec, httptest.NewRequest(method, path, strings.NewReader(body)))
		return rec.Code, rec.Body.String()
	}

	if code, body := do("POST", "/v1/namespaces/default/functions", `{"name": "f", "runtime": "python3.11"}`); code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, body)
	}
	key := functions.Key{Namespace: "default", Name: "f"}
	st := functions.Status{Phase: functions.PhaseReady, CodeSHA256: "c1", ObservedGeneration: 1,
		Artifact: "/srv/data/artifacts/0123", ArtifactRuntime: "python3.11", ArtifactHandler: "handler.handle", BuildKey: "k1",
		Conditions: []functions.Condition{{Type: functions.ConditionReady, Status: functions.ConditionTrue, Reason: functions.ReasonServing,
			ObservedGeneration: 1, LastTransitionTime: time.Now()}}}
	if err := store.UpdateStatus(ctx, key, st); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/v1/namespaces/default/functions/f", "/v1/namespaces/default/functions"} {
		code, body := do("GET", path, "")
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, code, body)
		}
		for _, hidden := range []string{`"artifact`, `"build_key"`, "/srv/data"} {
			if strings.Contains(body, hidden) {
				t.Errorf("GET %s shows %s: %s", path, hidden, body)
			}
		}
		if !strings.Contains(body, `"conditions":[{"type":"Ready","status":"True","reason":"Serving"`) {
			t.Errorf("GET %s lacks the conditions: %s", path, body)
		}
	}
	code, body := do("PUT", "/v1/namespaces/default/functions/f", `{"runtime": "python3.11", "env": {"A": "1"}}`)
	var fn functions.Function
	if err := json.Unmarshal([]byte(body), &fn); code != http.StatusOK || err != nil || fn.Status.Artifact != "" {
		t.Errorf("PUT: %d %s; want the function without its artifact", code, body)
	}
	kept, err := store.Get(ctx, key)
	if err != nil || kept.Status.Artifact != st.Artifact || kept.Status.BuildKey != st.BuildKey {
		t.Errorf("the store's status: %+v, %v; want the bookkeeping kept", kept.Status, err)
	}
}
