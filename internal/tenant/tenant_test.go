package tenant_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemflow/idemflow/internal/tenant"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
)

// A remembered token saves a read per request; a revoked one stops working
// within the TTL, and a new one works at once.
func TestRememberedTokensExpireAfterRevocation(t *testing.T) {
	pool, _ := testenv.Pool(t)
	ctx := context.Background()
	store := tenant.NewStore(pool)
	const tok = "tok-revocation-test-0123456789"
	auth := tenant.NewAuthenticator(store, 10, 200*time.Millisecond)
	if _, err := auth.Authenticate(ctx, tok); !errors.Is(err, tenant.ErrUnknownToken) {
		t.Fatalf("before it exists: %v", err)
	}
	if err := store.AddToken(ctx, "acme", tok, "test"); err != nil {
		t.Fatal(err)
	}
	if id, err := auth.Authenticate(ctx, tok); err != nil || id != "acme" {
		t.Fatalf("a new token must work at once: %q %v", id, err)
	}
	if _, err := pool.Exec(ctx, `UPDATE api_token SET revoked_at = now()`); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if _, err := auth.Authenticate(ctx, tok); !errors.Is(err, tenant.ErrUnknownToken) {
		t.Fatalf("revoked for longer than the TTL: %v", err)
	}
}

func TestParseBindingsNeverQuotesATokenAndNeedsOne(t *testing.T) {
	for _, s := range []string{",", " , ", "acme:", "acme-s3cret-token-123456", "acme:short-s3cret", "BAD:s3cret-token-0123456789"} {
		_, err := tenant.ParseBindings(s)
		if err == nil {
			t.Fatalf("%q parsed", s)
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Fatalf("%q: the error quotes the token: %v", s, err)
		}
	}
	b, err := tenant.ParseBindings(" acme:tok-0123456789abcdef , beta:tok-fedcba9876543210 ")
	if err != nil || len(b) != 2 || b[1].Tenant != "beta" || b[0].Token != "tok-0123456789abcdef" {
		t.Fatalf("%+v %v", b, err)
	}
}
