// Package auth is the contract for authenticating API tokens, the static
// token authenticator of the embedded mode, and the Chain that combines
// authenticators. Stored tokens are in package tokens, the identity-service
// webhook in package webhook.
package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrUnauthenticated is returned (wrapped) for a missing token or one that
// the authenticator does not know; a Chain then asks the next one.
var ErrUnauthenticated = errors.New("invalid or missing API token")

// ErrExpired is returned (wrapped) for a token that an authenticator knows
// but that has expired. It wraps ErrUnauthenticated; a Chain stops at it.
var ErrExpired = fmt.Errorf("%w: the token has expired", ErrUnauthenticated)

// ErrUnavailable is returned (wrapped) when a token cannot be checked
// because the service that knows it does not answer. The request is refused
// (503), never let through.
var ErrUnavailable = errors.New("the identity service is unavailable")

// Principal is who a token belongs to.
type Principal struct {
	// Namespace is the token's own namespace, reported by GET /v1/whoami and
	// used by the CLI when no namespace is given.
	Namespace string
	// AllNamespaces lets the token act in every namespace and manage tokens:
	// the server's own token.
	AllNamespaces bool
	// Function, when set, limits the token to invoking that function of
	// Namespace on /fn (an invoker token): it cannot use the API.
	Function string
}

// CanAccess reports whether p may act in namespace ns through the API.
func (p Principal) CanAccess(ns string) bool {
	return p.AllNamespaces || (p.Namespace == ns && p.Function == "")
}

// CanInvoke reports whether p may invoke function fn of namespace ns on /fn.
func (p Principal) CanInvoke(ns, fn string) bool {
	return p.AllNamespaces || (p.Namespace == ns && (p.Function == "" || p.Function == fn))
}

// Refusal says, in the API's terms, why p may not act in namespace ns
// through the API; it names what the token may do instead.
func (p Principal) Refusal(ns string) string {
	if p.Function != "" {
		return fmt.Sprintf("this token only invokes function %q of namespace %q on /fn", p.Function, p.Namespace)
	}
	return fmt.Sprintf("this token may not act in namespace %q; it may act only in namespace %q", ns, p.Namespace)
}

// Authenticator validates bearer tokens. Implementations are safe for
// concurrent use and cheap enough to call on every request (cache remote
// lookups). They return an error wrapping ErrUnauthenticated for a token
// they do not accept, ErrUnavailable when they cannot tell.
type Authenticator interface {
	Authenticate(ctx context.Context, token string) (Principal, error)
}

// BearerToken returns the token of an Authorization header value of the
// Bearer scheme, whose name is case-insensitive (RFC 7235, section 2.1).
func BearerToken(header string) (string, bool) {
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// Chain asks its authenticators in order. A token that one does not know
// goes to the next; the first acceptance, expiry or failure is the answer.
// Put the cheap and local ones first: a token that the server knows is then
// never sent to a remote service.
type Chain []Authenticator

// Authenticate implements Authenticator.
func (c Chain) Authenticate(ctx context.Context, token string) (Principal, error) {
	for _, a := range c {
		p, err := a.Authenticate(ctx, token)
		if err == nil || !errors.Is(err, ErrUnauthenticated) || errors.Is(err, ErrExpired) {
			return p, err
		}
	}
	return Principal{}, ErrUnauthenticated
}

// StaticToken accepts one token, the server's API token, as an administrator
// whose own namespace is "default".
type StaticToken struct {
	sum [sha256.Size]byte
}

// DefaultNamespace is the namespace of the static token.
const DefaultNamespace = "default"

// NewStaticToken returns an authenticator for token.
func NewStaticToken(token string) *StaticToken {
	return &StaticToken{sum: sha256.Sum256([]byte(token))}
}

// Authenticate implements Authenticator. Comparing fixed-size hashes in
// constant time leaks neither the token nor its length.
func (s *StaticToken) Authenticate(_ context.Context, token string) (Principal, error) {
	sum := sha256.Sum256([]byte(token))
	if token == "" || subtle.ConstantTimeCompare(sum[:], s.sum[:]) != 1 {
		return Principal{}, ErrUnauthenticated
	}
	return Principal{Namespace: DefaultNamespace, AllNamespaces: true}, nil
}

type principalKey struct{}

// NewContext returns ctx carrying p, the authenticated caller of a request.
func NewContext(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// FromContext returns the principal NewContext put in ctx, and whether there
// is one.
func FromContext(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}

// Token is a tenant token as the API shows it: never its secret, which is
// shown only once, when it is made (NewToken).
type Token struct {
	// ID names the token in list and revoke.
	ID string `json:"id"`
	// Namespace is the one namespace the token acts in.
	Namespace string `json:"namespace"`
	// Function, when set, limits the token to invoking this function of
	// Namespace on /fn (an invoker token for a private function).
	Function    string    `json:"function,omitempty"`
	Description string    `json:"description,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
	// ExpiresAt is when the token stops working; nil: never.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// Expired reports whether t has expired at now.
func (t *Token) Expired(now time.Time) bool { return t.ExpiresAt != nil && !now.Before(*t.ExpiresAt) }

// TokenRequest is the body of POST /v1/tokens.
type TokenRequest struct {
	// Namespace is required.
	Namespace string `json:"namespace"`
	// Function, when set, makes an invoker token of that function.
	Function    string `json:"function,omitempty"`
	Description string `json:"description,omitempty"`
	// TTLSeconds is how long the token works; 0 or absent: until revoked.
	TTLSeconds int64 `json:"ttl_seconds,omitempty"`
}

// NewToken is the answer of POST /v1/tokens: the token as stored and its
// secret, shown only this once.
type NewToken struct {
	Token
	Secret string `json:"token"`
}
