// Package auth is the contract for authenticating API tokens, and the static
// token authenticator of the embedded mode.
package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
)

// ErrUnauthenticated is returned (wrapped) for a missing or wrong token.
var ErrUnauthenticated = errors.New("invalid or missing API token")

// Principal is who a token belongs to.
type Principal struct {
	// Namespace is the token's own namespace, reported by GET /v1/whoami and
	// used by the CLI when no namespace is given.
	Namespace string
	// AllNamespaces lets the token act in every namespace.
	AllNamespaces bool
}

// CanAccess reports whether p may act in namespace ns.
func (p Principal) CanAccess(ns string) bool { return p.AllNamespaces || p.Namespace == ns }

// Authenticator validates bearer tokens. Implementations are safe for
// concurrent use and cheap enough to call on every request (cache remote
// lookups).
type Authenticator interface {
	Authenticate(ctx context.Context, token string) (Principal, error)
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
