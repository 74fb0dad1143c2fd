// Package tokens keeps the tokens that an admin makes for tenants: each acts
// in one namespace (or only invokes one function of it), may expire, and is
// stored only as its SHA-256. Store is an auth.Authenticator; API serves
// /v1/tokens.
package tokens

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"sless.kube5s.ru/sless/modules/auth"
	"sless.kube5s.ru/sless/modules/storage/sqldb"
)

// ErrNotFound is returned (wrapped) for an unknown token id.
var ErrNotFound = errors.New("token not found")

// Prefix starts every token this package makes, so that a leaked one is
// recognised by secret scanners and told from the server's own token.
const Prefix = "sless_"

// row is the api_tokens table.
type row struct {
	ID          string `gorm:"primaryKey;size:32"`
	Namespace   string `gorm:"size:63;not null;index:api_tokens_namespace"`
	Function    string `gorm:"size:63;not null"`
	Description string `gorm:"size:200;not null"`
	// Hash is the hex SHA-256 of the token: a token has 256 bits of
	// entropy, so an unsalted fast hash is safe and lets a lookup use the
	// index.
	Hash      string `gorm:"size:64;not null;uniqueIndex:api_tokens_hash"`
	CreatedAt time.Time
	ExpiresAt *time.Time
}

func (row) TableName() string { return "api_tokens" }

// Migrations are the tokens module's schema versions.
func Migrations() []sqldb.Migration {
	return []sqldb.Migration{{
		Module: "tokens", Version: 1, Name: "create api_tokens",
		// row is frozen for version 1.
		Up: func(tx *gorm.DB) error { return tx.Migrator().CreateTable(&row{}) },
	}}
}

// Store keeps tokens in the database. It is safe for concurrent use and
// reads the database on every Authenticate, so that a revoked token fails on
// the very next request.
type Store struct {
	db  *gorm.DB
	now func() time.Time
}

var _ auth.Authenticator = (*Store)(nil)

// New returns a store on db; the migrations must have run.
func New(db *gorm.DB) *Store { return &Store{db: db, now: sqldb.Now} }

// Create makes a token for t's namespace and function, valid for ttl (0:
// until revoked), and returns it as stored with its secret, which is not
// kept and cannot be shown again.
func (s *Store) Create(ctx context.Context, t auth.Token, ttl time.Duration) (*auth.Token, string, error) {
	secret := Prefix + randomString(32)
	r := row{ID: "tok_" + hex.EncodeToString(randomBytes(8)), Namespace: t.Namespace, Function: t.Function,
		Description: t.Description, Hash: hash(secret), CreatedAt: s.now()}
	if ttl > 0 {
		exp := r.CreatedAt.Add(ttl)
		r.ExpiresAt = &exp
	}
	if err := s.db.WithContext(ctx).Create(&r).Error; err != nil {
		return nil, "", fmt.Errorf("storing a token for namespace %s: %w", t.Namespace, err)
	}
	return fromRow(&r), secret, nil
}

// List returns a page of tokens ordered by id, after the id after ("": from
// the first), at most limit of them; more reports whether more follow.
func (s *Store) List(ctx context.Context, after string, limit int) (items []*auth.Token, more bool, err error) {
	var rows []row
	q := s.db.WithContext(ctx).Order("id").Limit(limit + 1)
	if after != "" {
		q = q.Where("id > ?", after)
	}
	if err := q.Find(&rows).Error; err != nil {
		return nil, false, fmt.Errorf("listing tokens: %w", err)
	}
	if len(rows) > limit {
		rows, more = rows[:limit], true
	}
	items = make([]*auth.Token, len(rows))
	for i := range rows {
		items[i] = fromRow(&rows[i])
	}
	return items, more, nil
}

// Revoke deletes the token id, or fails with ErrNotFound. The token fails
// from the next request on.
func (s *Store) Revoke(ctx context.Context, id string) error {
	res := s.db.WithContext(ctx).Where("id = ?", id).Delete(&row{})
	if res.Error != nil {
		return fmt.Errorf("revoking token %s: %w", id, res.Error)
	}
	if res.RowsAffected == 0 {
		return fmt.Errorf("token %s: %w", id, ErrNotFound)
	}
	return nil
}

// Authenticate implements auth.Authenticator: a stored token that has not
// expired is its namespace's (or function's) principal.
func (s *Store) Authenticate(ctx context.Context, token string) (auth.Principal, error) {
	var r row
	err := s.db.WithContext(ctx).Where("hash = ?", hash(token)).Take(&r).Error
	switch {
	case errors.Is(err, gorm.ErrRecordNotFound):
		return auth.Principal{}, auth.ErrUnauthenticated
	case err != nil:
		return auth.Principal{}, fmt.Errorf("looking up a token: %w", err)
	}
	if fromRow(&r).Expired(s.now()) {
		return auth.Principal{}, fmt.Errorf("token %s: %w", r.ID, auth.ErrExpired)
	}
	return auth.Principal{Namespace: r.Namespace, Function: r.Function}, nil
}

func fromRow(r *row) *auth.Token {
	t := &auth.Token{ID: r.ID, Namespace: r.Namespace, Function: r.Function, Description: r.Description, CreatedAt: r.CreatedAt.UTC()}
	if r.ExpiresAt != nil {
		exp := r.ExpiresAt.UTC()
		t.ExpiresAt = &exp
	}
	return t
}

func hash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b) // never fails (crypto/rand)
	return b
}

// randomString returns n random bytes, base64url-encoded.
func randomString(n int) string { return base64.RawURLEncoding.EncodeToString(randomBytes(n)) }
