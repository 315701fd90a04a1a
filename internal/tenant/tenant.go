// Package tenant owns the tenant and api_token tables: who may call
// idemflow, and which tenant a bearer token speaks for.
package tenant

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/golang-lru/v2/expirable"
	"github.com/idemflow/idemflow/idem"
	"github.com/jackc/pgx/v5"
)

// ErrUnknownToken: the token is missing, unknown or revoked.
var ErrUnknownToken = errors.New("unknown or revoked API token")

// TokenPrefix marks idemflow tokens so that secret scanners can find them.
const TokenPrefix = "idf_"

// Store owns tenant and api_token.
type Store struct {
	db idem.Querier
}

// NewStore returns a Store over db.
func NewStore(db idem.Querier) *Store { return &Store{db: db} }

func hashToken(token string) []byte {
	sum := sha256.Sum256([]byte(token))
	return sum[:]
}

// NewToken makes a random token with 256 bits of entropy.
func NewToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("new token: %w", err)
	}
	return TokenPrefix + base64.RawURLEncoding.EncodeToString(b), nil
}

// Ensure creates the tenant if it does not exist.
func (s *Store) Ensure(ctx context.Context, id, name string) error {
	if err := idem.ValidateTenant(id); err != nil {
		return err
	}
	if name == "" {
		name = id
	}
	if _, err := s.db.Exec(ctx,
		`INSERT INTO tenant (id, name) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING`, id, name); err != nil {
		return fmt.Errorf("ensure tenant %s: %w", id, err)
	}
	return nil
}

// MinTokenLen is the shortest token accepted: shorter ones can be guessed.
const MinTokenLen = 16

// AddToken stores token (hashed) for tenantID, creating the tenant if needed.
// Adding a token that already exists for the same tenant is a no-op, so a
// bootstrap list can be applied at every start.
func (s *Store) AddToken(ctx context.Context, tenantID, token, label string) error {
	if len(token) < MinTokenLen {
		return fmt.Errorf("token for tenant %s is too short: at least %d characters", tenantID, MinTokenLen)
	}
	if err := s.Ensure(ctx, tenantID, ""); err != nil {
		return err
	}
	var owner string
	err := s.db.QueryRow(ctx, `
		INSERT INTO api_token (token_sha256, tenant_id, label) VALUES ($1, $2, $3)
		ON CONFLICT (token_sha256) DO UPDATE SET label = api_token.label
		RETURNING tenant_id`, hashToken(token), tenantID, label).Scan(&owner)
	if err != nil {
		return fmt.Errorf("add token for tenant %s: %w", tenantID, err)
	}
	if owner != tenantID {
		return fmt.Errorf("add token for tenant %s: the token already belongs to another tenant", tenantID)
	}
	return nil
}

// Authenticate returns the tenant a token speaks for.
func (s *Store) Authenticate(ctx context.Context, token string) (string, error) {
	if token == "" {
		return "", ErrUnknownToken
	}
	var tenantID string
	err := s.db.QueryRow(ctx,
		`SELECT tenant_id FROM api_token WHERE token_sha256 = $1 AND revoked_at IS NULL`,
		hashToken(token)).Scan(&tenantID)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrUnknownToken
	}
	if err != nil {
		return "", fmt.Errorf("authenticate: %w", err)
	}
	return tenantID, nil
}

// Binding is one tenant:token pair of a bootstrap list.
type Binding struct {
	Tenant string
	Token  string
}

// ParseBindings reads "tenant:token,tenant:token" (IDEMFLOW_BOOTSTRAP_TOKENS).
// A list with no binding in it is an error, and no error quotes a binding:
// it holds a token.
func ParseBindings(s string) ([]Binding, error) {
	var out []Binding
	n := 0
	for part := range strings.SplitSeq(s, ",") {
		n++
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		t, tok, ok := strings.Cut(part, ":")
		if !ok || t == "" || strings.TrimSpace(tok) == "" {
			return nil, fmt.Errorf("binding %d: want tenant:token", n)
		}
		if err := idem.ValidateTenant(t); err != nil {
			return nil, fmt.Errorf("binding %d: %w", n, err)
		}
		if len(strings.TrimSpace(tok)) < MinTokenLen {
			return nil, fmt.Errorf("binding %d: the token is shorter than %d characters", n, MinTokenLen)
		}
		out = append(out, Binding{Tenant: t, Token: strings.TrimSpace(tok)})
	}
	if len(out) == 0 {
		return nil, errors.New("no tenant:token binding in the list")
	}
	return out, nil
}

// Authenticator remembers recent token lookups for TTL, so that a replay
// does not read api_token every time. A revoked token keeps working for at
// most TTL; unknown tokens are never remembered, so a new token works at
// once.
type Authenticator struct {
	store *Store
	known *expirable.LRU[[32]byte, string]
}

// DefaultAuthTTL bounds how long a revoked token may still be accepted.
const DefaultAuthTTL = 5 * time.Second

// NewAuthenticator remembers up to size tokens for ttl each.
func NewAuthenticator(s *Store, size int, ttl time.Duration) *Authenticator {
	return &Authenticator{store: s, known: expirable.NewLRU[[32]byte, string](size, nil, ttl)}
}

// Authenticate is Store.Authenticate, remembered.
func (a *Authenticator) Authenticate(ctx context.Context, token string) (string, error) {
	k := sha256.Sum256([]byte(token))
	if tenantID, ok := a.known.Get(k); ok {
		return tenantID, nil
	}
	tenantID, err := a.store.Authenticate(ctx, token)
	if err == nil {
		a.known.Add(k, tenantID)
	}
	return tenantID, err
}
