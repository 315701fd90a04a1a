package typescript

import (
	"os"
	"testing"
	"time"

	"github.com/idemflow/idemflow/internal/tooling/oauthtest"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
)

// The official MCP TypeScript SDK's client, with its OAuth provider, and
// idemflow's TypeScript client with a token provider, against a real
// authorization server (Ory Hydra, with the tests' login and consent
// app): the host goes from a 401 through discovery, registration, PKCE,
// login and consent and the resource indicator to one ticket, and keeps
// working on a refreshed token; a service agent's client credentials are
// renewed by its provider. Each makes one ticket.
func TestOAuthClientsOfTheTypeScriptSDKAndClientMakeOneTicketEach(t *testing.T) {
	bin := node(t)
	o := oauthtest.New(t, 4*time.Second, "http://127.0.0.1:9/callback")
	nodeTest(t, bin, append(os.Environ(), o.Env...), "dist/test/oauth.test.js")
	for _, customer := range []string{"c-oauth-ts", "c-oauth-svc"} {
		if n := testenv.Count(t, o.Pool, "ticket", "customer_id = $1 AND tenant_id = $2", customer, testenv.TenantA); n != 1 {
			t.Errorf("%s: %d tickets in tenant %s, want 1", customer, n, testenv.TenantA)
		}
	}
}
