package ledgerapi_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"sless.kube5s.ru/sless/modules/invoke"
	"sless.kube5s.ru/sless/modules/invoke/ledger"
	"sless.kube5s.ru/sless/modules/invoke/ledger/journal"
	"sless.kube5s.ru/sless/modules/invoke/ledgerapi"
	"sless.kube5s.ru/sless/modules/server/httpx"
	"sless.kube5s.ru/sless/modules/storage/sqldb"
)

// fixture is a server on a SQLite-backed ledger holding recs, oldest first.
type fixture struct {
	srv  http.Handler
	recs []*invoke.Record
}

// newFixture records 120 invocations in namespace ns, alternating between
// functions a and b and between statuses, kinds and triggers, and one in
// namespace other.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	db, _, err := sqldb.Open("sqlite:"+filepath.Join(t.TempDir(), "db.sqlite"), log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sqldb.Close(db) })
	if err := sqldb.Migrate(t.Context(), db, ledger.Migrations()); err != nil {
		t.Fatal(err)
	}
	l, err := ledger.New(db, ledger.Options{Log: log, Journal: journal.Options{Dir: t.TempDir(), SyncInterval: journal.DefaultSyncInterval}})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{}
	for i := range 120 {
		r := record("ns", []string{"a", "b"}[i%2])
		r.StatusCode = []int{200, 404, 504}[i%3]
		if i%5 == 0 {
			r.TriggerKind, r.TriggerName = invoke.KindCron, []string{"nightly", "hourly"}[i%10/5]
		}
		f.recs = append(f.recs, r)
		l.Record(r)
	}
	l.Record(record("other", "a"))
	// Stop writes what was recorded; the ledger still reads afterwards.
	if err := l.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	gin.SetMode(gin.TestMode)
	engine := gin.New()
	var routes httpx.Routes = ledgerapi.New(l, log)
	routes.Register(engine.Group("/v1"), engine)
	f.srv = engine
	return f
}

func record(ns, fn string) *invoke.Record {
	return &invoke.Record{
		ID: uuid.Must(uuid.NewV7()).String(), Namespace: ns, Function: fn,
		TriggerKind: invoke.KindHTTP, Method: "GET", Path: "/",
		StartedAt: time.Now().UTC().Truncate(time.Microsecond), DurationMS: 1.5, StatusCode: 200,
		Logs: "log of " + fn,
	}
}

// get requests path and returns the status and the body.
func (f *fixture) get(t *testing.T, path string) (int, []byte) {
	t.Helper()
	rec := httptest.NewRecorder()
	f.srv.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.Bytes()
}

// listAll follows the continue tokens from path and returns the ids of all pages and the
// size of each page.
func (f *fixture) listAll(t *testing.T, path string) (ids []string, sizes []int) {
	t.Helper()
	next := ""
	for range 100 {
		p := path
		if next != "" {
			p += "&continue=" + next
		}
		code, body := f.get(t, p)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", p, code, body)
		}
		var page httpx.ListResponse[*invoke.Record]
		if err := json.Unmarshal(body, &page); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(body), `"logs"`) {
			t.Errorf("GET %s: the list has logs", p)
		}
		for _, r := range page.Items {
			ids = append(ids, r.ID)
		}
		sizes = append(sizes, len(page.Items))
		if next = page.Continue; next == "" {
			if strings.Contains(string(body), `"continue"`) {
				t.Errorf("GET %s: the last page has a continue token: %s", p, body)
			}
			return ids, sizes
		}
	}
	t.Fatalf("GET %s: more than 100 pages", path)
	return nil, nil
}

// newestFirst returns the ids of the records that keep selects, newest
// first.
func (f *fixture) newestFirst(keep func(*invoke.Record) bool) []string {
	var out []string
	for _, r := range slices.Backward(f.recs) {
		if keep(r) {
			out = append(out, r.ID)
		}
	}
	return out
}

func TestList(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		path  string
		keep  func(*invoke.Record) bool
		sizes []int
	}{
		{"/v1/namespaces/ns/invocations?limit=50", func(*invoke.Record) bool { return true }, []int{50, 50, 20}},
		{"/v1/namespaces/ns/invocations?limit=500", func(*invoke.Record) bool { return true }, []int{120}},
		{"/v1/namespaces/ns/functions/a/invocations?limit=50", func(r *invoke.Record) bool { return r.Function == "a" }, []int{50, 10}},
		{"/v1/namespaces/ns/invocations?function=b&limit=25", func(r *invoke.Record) bool { return r.Function == "b" }, []int{25, 25, 10}},
		{"/v1/namespaces/ns/invocations?status=error&limit=30", func(r *invoke.Record) bool { return r.StatusCode >= 400 }, []int{30, 30, 20}},
		{"/v1/namespaces/ns/functions/b/invocations?status=success&limit=50", func(r *invoke.Record) bool {
			return r.Function == "b" && r.StatusCode < 400
		}, []int{20}},
		{"/v1/namespaces/ns/invocations?status=504&limit=50", func(r *invoke.Record) bool { return r.StatusCode == 504 }, []int{40}},
		{"/v1/namespaces/ns/invocations?trigger_kind=cron&trigger_name=hourly&limit=50", func(r *invoke.Record) bool {
			return r.TriggerName == "hourly"
		}, []int{12}},
		{"/v1/namespaces/ns/invocations?trigger_kind=http&limit=50", func(r *invoke.Record) bool { return r.TriggerKind == "http" }, []int{50, 46}},
		{"/v1/namespaces/empty/invocations?limit=50", func(*invoke.Record) bool { return false }, []int{0}},
	} {
		ids, sizes := f.listAll(t, tc.path)
		if diff := cmp.Diff(f.newestFirst(tc.keep), ids); diff != "" {
			t.Errorf("GET %s: ids (-want +got):\n%s", tc.path, diff)
		}
		if !slices.Equal(sizes, tc.sizes) {
			t.Errorf("GET %s: page sizes %v, want %v", tc.path, sizes, tc.sizes)
		}
	}

	// Without a limit, a page has 50 items, and no items is an empty list.
	for path, want := range map[string]string{
		"/v1/namespaces/ns/invocations":   `"continue":"` + f.recs[70].ID + `"`,
		"/v1/namespaces/none/invocations": `{"items":[]}`,
	} {
		if code, body := f.get(t, path); code != http.StatusOK || !strings.Contains(string(body), want) {
			t.Errorf("GET %s: %d %s; want 200 with %s", path, code, body, want)
		}
	}
}

func TestBadQuery(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct{ path, want string }{
		{"/v1/namespaces/ns/invocations?limit=0", `limit: must be a number from 1 to 500 (got \"0\")`},
		{"/v1/namespaces/ns/invocations?limit=501", `limit: must be a number from 1 to 500`},
		{"/v1/namespaces/ns/functions/a/invocations?limit=ten", `limit: must be a number from 1 to 500 (got \"ten\")`},
		{"/v1/namespaces/ns/invocations?status=failed", `status: must be \"success\", \"error\" or an HTTP status code from 100 to 599 (got \"failed\")`},
		{"/v1/namespaces/ns/invocations?status=600", `status: must be`},
		{"/v1/namespaces/ns/invocations?trigger_kind=webhook", `trigger_kind: must be one of http, cron, rabbitmq, job, cli (got \"webhook\")`},
		{"/v1/namespaces/ns/invocations?continue=abc", `continue: must be the continue token of a previous page`},
		{"/v1/namespaces/ns/invocations?stauts=error", `stauts: is not a parameter of this call; use limit, continue, status, trigger_kind, trigger_name, function`},
		{"/v1/namespaces/ns/functions/a/invocations?function=b", `function: is not a parameter of this call; use limit, continue, status, trigger_kind, trigger_name"`},
	} {
		code, body := f.get(t, tc.path)
		if code != http.StatusBadRequest || !strings.Contains(string(body), tc.want) {
			t.Errorf("GET %s: %d %s; want 400 with %s", tc.path, code, body, tc.want)
		}
	}
}

func TestGet(t *testing.T) {
	f := newFixture(t)
	want := f.recs[7]
	code, body := f.get(t, "/v1/namespaces/ns/invocations/"+want.ID)
	if code != http.StatusOK {
		t.Fatalf("GET: %d %s", code, body)
	}
	var got invoke.Record
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, &got); diff != "" {
		t.Errorf("GET returns the record with its logs (-want +got):\n%s", diff)
	}

	for _, c := range []struct{ ns, id string }{{"other", want.ID}, {"ns", uuid.Must(uuid.NewV7()).String()}, {"ns", "garbage"}} {
		code, body := f.get(t, "/v1/namespaces/"+c.ns+"/invocations/"+c.id)
		wantBody, _ := json.Marshal(httpx.ErrorBody{Error: `invocation "` + c.id + `" not found in namespace "` + c.ns + `"`})
		if code != http.StatusNotFound || string(body) != string(wantBody) {
			t.Errorf("GET %s/%s: %d %s; want 404 %s", c.ns, c.id, code, body, wantBody)
		}
	}
}

// The routes coexist with the functions API's /functions/:name routes.
func TestRoutesCoexist(t *testing.T) {
	gin.SetMode(gin.TestMode)
	engine := gin.New()
	v1 := engine.Group("/v1")
	v1.GET("/namespaces/:ns/functions/:name", func(c *gin.Context) { c.String(http.StatusOK, "function") })
	ledgerapi.New(nil, slog.New(slog.NewTextHandler(io.Discard, nil))).Register(v1, engine)
	rec := httptest.NewRecorder()
	engine.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/namespaces/ns/functions/a", nil))
	if rec.Body.String() != "function" {
		t.Errorf("GET a function: %d %s", rec.Code, rec.Body)
	}
}
