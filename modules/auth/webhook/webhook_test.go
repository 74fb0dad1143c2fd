package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sless.kube5s.ru/sless/internal/testenv"
	"sless.kube5s.ru/sless/modules/auth"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// identity is a TokenReview server: "good-*" tokens belong to namespace
// team-a, "nons" is authenticated without a namespace, "boom" makes it fail,
// "slow" makes it hang; anything else is refused.
type identity struct {
	asked atomic.Int32
	auth  atomic.Value
	// held, when set, holds the review of token "held" until it is closed.
	held chan struct{}
}

func (id *identity) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id.asked.Add(1)
	id.auth.Store(r.Header.Get("Authorization"))
	var rev Review
	if r.Method != http.MethodPost || json.NewDecoder(r.Body).Decode(&rev) != nil || rev.Kind != "TokenReview" {
		http.Error(w, "bad review", http.StatusBadRequest)
		return
	}
	switch tok := rev.Spec.Token; {
	case tok == "boom":
		http.Error(w, "down", http.StatusInternalServerError)
		return
	case tok == "garbage":
		io.WriteString(w, "<html>")
		return
	case tok == "slow":
		<-r.Context().Done()
		return
	case tok == "held":
		<-id.held
		rev.Status = ReviewStatus{Authenticated: true, User: UserInfo{Username: tok, Extra: map[string][]string{NamespaceKey: {"team-a"}}}}
	case tok == "nons":
		rev.Status = ReviewStatus{Authenticated: true, User: UserInfo{Username: "x"}}
	case len(tok) > 5 && tok[:5] == "good-":
		rev.Status = ReviewStatus{Authenticated: true, User: UserInfo{Username: tok, Extra: map[string][]string{NamespaceKey: {"team-a"}}}}
	default:
		rev.Status = ReviewStatus{Error: "unknown token"}
	}
	json.NewEncoder(w).Encode(rev)
}

func newWebhook(t *testing.T, cfg Config) (*Webhook, *identity, *httptest.Server) {
	t.Helper()
	id := &identity{}
	srv := httptest.NewServer(id)
	t.Cleanup(srv.Close)
	cfg.URL = srv.URL
	return New(cfg, discard), id, srv
}

func TestAnswers(t *testing.T) {
	w, id, _ := newWebhook(t, Config{Timeout: 200 * time.Millisecond, BearerToken: "sless-to-idp"})
	tests := []struct {
		token   string
		want    auth.Principal
		wantErr error
	}{
		{"good-1", auth.Principal{Namespace: "team-a"}, nil},
		{"bad", auth.Principal{}, auth.ErrUnauthenticated},
		{"", auth.Principal{}, auth.ErrUnauthenticated},
		{"boom", auth.Principal{}, auth.ErrUnavailable},
		{"garbage", auth.Principal{}, auth.ErrUnavailable},
		{"slow", auth.Principal{}, auth.ErrUnavailable},
		{"nons", auth.Principal{}, auth.ErrUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.token, func(t *testing.T) {
			got, err := w.Authenticate(context.Background(), tt.token)
			if got != tt.want || !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Errorf("got %+v, %v; want %+v, %v", got, err, tt.want, tt.wantErr)
			}
			if errors.Is(err, auth.ErrUnavailable) && errors.Is(err, auth.ErrUnauthenticated) {
				t.Errorf("an unavailable service's error %v is also a plain refusal: a chain would ask on", err)
			}
		})
	}
	if got := id.auth.Load(); got != "Bearer sless-to-idp" {
		t.Errorf("the service got Authorization %q; want the configured bearer token", got)
	}
}

func TestCache(t *testing.T) {
	w, id, _ := newWebhook(t, Config{CacheTTL: time.Minute, NegativeCacheTTL: 10 * time.Second, CacheSize: 3})
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w.now = func() time.Time { return now }
	ctx := context.Background()
	steps := []struct {
		name      string
		token     string
		advance   time.Duration
		wantAsked int32
		wantOK    bool
	}{
		{"first acceptance asks", "good-1", 0, 1, true},
		{"cached acceptance", "good-1", 59 * time.Second, 1, true},
		{"acceptance expired", "good-1", time.Second, 2, true},
		{"first refusal asks", "bad", 0, 3, false},
		{"cached refusal", "bad", 9 * time.Second, 3, false},
		{"refusal expired", "bad", time.Second, 4, false},
		{"a failure is not cached", "boom", 0, 5, false},
		{"asked again after a failure", "boom", 0, 6, false},
	}
	for _, s := range steps {
		now = now.Add(s.advance)
		_, err := w.Authenticate(ctx, s.token)
		if got := id.asked.Load(); got != s.wantAsked || (err == nil) != s.wantOK {
			t.Fatalf("%s: asked %d times, err %v; want %d times, ok %t", s.name, got, err, s.wantAsked, s.wantOK)
		}
	}
	for _, tok := range []string{"good-2", "good-3", "good-4", "good-5", "x", "y"} {
		w.Authenticate(ctx, tok)
	}
	if n := len(w.cache); n > 3 {
		t.Errorf("cache holds %d answers; want at most its size, 3", n)
	}
}

func TestServiceDown(t *testing.T) {
	w, _, srv := newWebhook(t, Config{})
	if _, err := w.Authenticate(context.Background(), "good-1"); err != nil {
		t.Fatal(err)
	}
	srv.Close()
	// The cached acceptance still serves; a token not seen before fails
	// closed.
	if _, err := w.Authenticate(context.Background(), "good-1"); err != nil {
		t.Errorf("cached acceptance while the service is down: %v", err)
	}
	if p, err := w.Authenticate(context.Background(), "good-2"); !errors.Is(err, auth.ErrUnavailable) {
		t.Errorf("new token while the service is down: %+v, %v; want ErrUnavailable", p, err)
	}
}

// TestBurstPostsOnce checks that requests bringing the same new token at
// once share one review.
func TestBurstPostsOnce(t *testing.T) {
	w, id, _ := newWebhook(t, Config{})
	id.held = make(chan struct{})
	var release sync.Once
	t.Cleanup(func() { release.Do(func() { close(id.held) }) }) // before the server closes
	var lookups atomic.Int32
	w.now = func() time.Time { lookups.Add(1); return time.Now() }
	const n = 10
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := w.Authenticate(context.Background(), "held")
			errs <- err
		}()
	}
	// Every request missed the cache before the review is answered.
	testenv.Eventually(t, 10*time.Second, "every request to look in the cache", func() bool { return lookups.Load() >= n })
	release.Do(func() { close(id.held) })
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := id.asked.Load(); got != 1 {
		t.Errorf("the identity service got %d reviews for one token; want 1", got)
	}
}
