// Package webhook is an auth.Authenticator that asks an external identity
// service about a token, in the shape of Kubernetes' TokenReview: sless
// posts the token, the service answers whether it is authenticated and for
// which namespace. Answers are cached for a while, positive and negative
// ones for their own time; a service that does not answer is a refusal
// (auth.ErrUnavailable), never an acceptance.
package webhook

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"sless.kube5s.ru/sless/internal/validation"
	"sless.kube5s.ru/sless/modules/auth"
)

// NamespaceKey is the key of status.user.extra whose first value is the
// namespace of an authenticated token.
const NamespaceKey = "sless.kube5s.ru/namespace"

// Config configures the webhook.
type Config struct {
	// URL receives the TokenReview POSTs.
	URL string
	// BearerToken, when set, is sent as the Authorization of each POST, so
	// that the identity service knows the caller is sless.
	BearerToken string
	// Timeout bounds one POST; default 5s.
	Timeout time.Duration
	// CacheTTL is how long an acceptance is reused; default 2m.
	CacheTTL time.Duration
	// NegativeCacheTTL is how long a refusal is reused; default 10s.
	NegativeCacheTTL time.Duration
	// CacheSize bounds the cached answers; default 10,000.
	CacheSize int
	// HTTP is the client; nil means a new one.
	HTTP *http.Client
}

// Review is the TokenReview sless posts and the service answers.
type Review struct {
	APIVersion string       `json:"apiVersion"`
	Kind       string       `json:"kind"`
	Spec       ReviewSpec   `json:"spec"`
	Status     ReviewStatus `json:"status,omitzero"`
}

// ReviewSpec carries the token.
type ReviewSpec struct {
	Token string `json:"token"`
}

// ReviewStatus is the service's answer.
type ReviewStatus struct {
	Authenticated bool     `json:"authenticated"`
	User          UserInfo `json:"user,omitzero"`
	// Error says why the token could not be checked; it is logged.
	Error string `json:"error,omitempty"`
}

// UserInfo is the authenticated user; Extra[NamespaceKey] is its namespace.
type UserInfo struct {
	Username string              `json:"username,omitempty"`
	UID      string              `json:"uid,omitempty"`
	Groups   []string            `json:"groups,omitempty"`
	Extra    map[string][]string `json:"extra,omitempty"`
}

// maxAnswerBytes caps the service's answer.
const maxAnswerBytes = 1 << 20

// Webhook implements auth.Authenticator. It is safe for concurrent use.
type Webhook struct {
	cfg Config
	log *slog.Logger
	now func() time.Time

	mu    sync.Mutex
	cache map[[sha256.Size]byte]answer
	// flights shares one review among the requests that bring the same
	// token at once, so that a burst with a new token posts it once.
	flights singleflight.Group
}

// answer is a cached result: a principal, or a refusal (ok false).
type answer struct {
	p       auth.Principal
	ok      bool
	expires time.Time
}

var _ auth.Authenticator = (*Webhook)(nil)

// New returns a webhook authenticator for cfg, whose URL is set.
func New(cfg Config, log *slog.Logger) *Webhook {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.CacheTTL <= 0 {
		cfg.CacheTTL = 2 * time.Minute
	}
	if cfg.NegativeCacheTTL <= 0 {
		cfg.NegativeCacheTTL = 10 * time.Second
	}
	if cfg.CacheSize <= 0 {
		cfg.CacheSize = 10_000
	}
	if cfg.HTTP == nil {
		cfg.HTTP = &http.Client{}
	}
	return &Webhook{cfg: cfg, log: log, now: time.Now, cache: map[[sha256.Size]byte]answer{}}
}

// Authenticate implements auth.Authenticator: a cached answer, else the
// service's. Only answers are cached: after a failure to ask, the next
// request asks again.
func (w *Webhook) Authenticate(ctx context.Context, token string) (auth.Principal, error) {
	if token == "" {
		return auth.Principal{}, auth.ErrUnauthenticated
	}
	key := sha256.Sum256([]byte(token))
	if a, ok := w.cached(key); ok {
		return a.result()
	}
	v, err, _ := w.flights.Do(string(key[:]), func() (any, error) {
		// The review is shared: one caller going away must not fail the
		// others (the timeout still bounds it).
		a, err := w.ask(context.WithoutCancel(ctx), token)
		if err == nil {
			w.store(key, a)
		}
		return a, err
	})
	if err != nil {
		return auth.Principal{}, fmt.Errorf("%w: %w", auth.ErrUnavailable, err)
	}
	return v.(answer).result()
}

func (a answer) result() (auth.Principal, error) {
	if !a.ok {
		return auth.Principal{}, auth.ErrUnauthenticated
	}
	return a.p, nil
}

func (w *Webhook) cached(key [sha256.Size]byte) (answer, bool) {
	now := w.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	a, ok := w.cache[key]
	if ok && !now.Before(a.expires) {
		delete(w.cache, key)
		return answer{}, false
	}
	return a, ok
}

// store caches a; when the cache is full it drops the expired answers, then,
// if it is still full, arbitrary ones (a map's order is random), so that a
// flood of distinct tokens cannot grow it.
func (w *Webhook) store(key [sha256.Size]byte, a answer) {
	ttl := w.cfg.NegativeCacheTTL
	if a.ok {
		ttl = w.cfg.CacheTTL
	}
	now := w.now()
	a.expires = now.Add(ttl)
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.cache) >= w.cfg.CacheSize {
		for k, old := range w.cache {
			if !now.Before(old.expires) {
				delete(w.cache, k)
			}
		}
		for k := range w.cache {
			if len(w.cache) < w.cfg.CacheSize {
				break
			}
			delete(w.cache, k)
		}
	}
	w.cache[key] = a
}

// ask posts a TokenReview. An error means there is no answer to cache: the
// service is unreachable, slow, failing or answers something else.
func (w *Webhook) ask(ctx context.Context, token string) (answer, error) {
	body, err := json.Marshal(Review{APIVersion: "authentication.k8s.io/v1", Kind: "TokenReview", Spec: ReviewSpec{Token: token}})
	if err != nil {
		return answer{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, w.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if w.cfg.BearerToken != "" {
		req.Header.Set("Authorization", "Bearer "+w.cfg.BearerToken)
	}
	resp, err := w.cfg.HTTP.Do(req)
	if err != nil {
		return answer{}, fmt.Errorf("posting a TokenReview: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return answer{}, fmt.Errorf("reading the TokenReview answer: %w", err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return answer{}, fmt.Errorf("the identity service answered %s", resp.Status)
	}
	var review Review
	if err := json.Unmarshal(data, &review); err != nil {
		return answer{}, fmt.Errorf("decoding the TokenReview answer: %w", err)
	}
	st := review.Status
	if !st.Authenticated {
		if st.Error != "" {
			w.log.InfoContext(ctx, "identity service refused a token", "reason", st.Error)
		}
		return answer{}, nil
	}
	var ns string
	if v := st.User.Extra[NamespaceKey]; len(v) > 0 {
		ns = v[0]
	}
	if msg := validation.CheckName(ns); msg != "" {
		return answer{}, fmt.Errorf("the identity service authenticated user %q without a valid namespace in user.extra[%q] (%q: %s)",
			st.User.Username, NamespaceKey, ns, msg)
	}
	return answer{ok: true, p: auth.Principal{Namespace: ns}}, nil
}
