package gateway_test

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/idemflow/idemflow/internal/gateway"
	"github.com/idemflow/idemflow/internal/oauth"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
)

// gatewayResource is the gateway's resource URI in these tests: what a
// token's audience must name.
const gatewayResource = "https://gateway.idemflow.test/"

// oauthStack is a stack whose gateway accepts a real Ory Hydra's tokens
// beside idemflow's own, with the clients the tests use.
type oauthStack struct {
	*testenv.Stack
	hydra *testenv.Hydra
	// svcA and svcB are service agents (client credentials) of the two
	// tenants; reader may only read; opaque gets opaque tokens.
	svcA, svcB, reader, opaque testenv.Client
	// keysDown makes the JWKS endpoint fail; keysFetched counts its
	// answers; clock moves the verifier's time.
	keysDown    *atomic.Bool
	keysFetched *atomic.Int64
	clock       *atomic.Int64
}

func newOAuthStack(t *testing.T) *oauthStack {
	h := testenv.StartHydra(t, testenv.HydraOptions{})
	client := func(scope string, extra map[string]any) testenv.Client {
		meta := map[string]any{"grant_types": []string{"client_credentials"}, "token_endpoint_auth_method": "client_secret_post",
			"scope": scope, "audience": []string{gatewayResource, "https://other.idemflow.test/"}}
		for k, v := range extra {
			meta[k] = v
		}
		return h.CreateClient(meta)
	}
	o := &oauthStack{hydra: h, keysDown: &atomic.Bool{}, keysFetched: &atomic.Int64{}, clock: &atomic.Int64{},
		svcA: client("idemflow:call idemflow:read", nil), svcB: client("idemflow:call idemflow:read", nil),
		reader: client("idemflow:read", nil), opaque: client("idemflow:call idemflow:read", map[string]any{"access_token_strategy": "opaque"})}
	// The JWKS through a switch, so that a test can take it down.
	hydraURL, _ := url.Parse(h.Issuer)
	proxy := httputil.NewSingleHostReverseProxy(hydraURL)
	keys := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if o.keysDown.Load() {
			http.Error(w, "down", http.StatusBadGateway)
			return
		}
		o.keysFetched.Add(1)
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(keys.Close)
	v, err := oauth.New(oauth.Config{
		Issuer: h.Issuer, Resource: gatewayResource, JWKSURL: keys.URL + "/.well-known/jwks.json",
		IntrospectionURL: h.IntrospectionURL(), TenantClaim: "ext.tenant",
		Tenants: map[string]string{"client:" + o.svcA.ID: testenv.TenantA, "client:" + o.svcB.ID: testenv.TenantB,
			"client:" + o.reader.ID: testenv.TenantA, "client:" + o.opaque.ID: testenv.TenantA},
		ClockSkew: 5 * time.Second, KeysMaxAge: time.Minute, KeysGrace: time.Minute,
		Now: func() time.Time { return time.Now().Add(time.Duration(o.clock.Load())) },
	})
	if err != nil {
		t.Fatal(err)
	}
	o.Stack = testenv.NewStack(t, testenv.Options{Gateway: func(g *gateway.Gateway) { g.OAuth = v }})
	return o
}

func (o *oauthStack) token(c testenv.Client) string {
	return o.hydra.ClientCredentials(c, gatewayResource, "idemflow:call idemflow:read")
}

func (o *oauthStack) ticket(token, key, customer string) testenv.Response {
	return o.Do(testenv.Request{Path: "/v1/tickets", Token: token, Key: key,
		Body: `{"customer_id":"` + customer + `","title":"Printer on fire","priority":"high"}`})
}

// A service agent with client credentials calls the gateway with the
// authorization server's token: one ticket, a replay that says so, the
// same intent whichever credential of its tenant asks, and another
// tenant's token neither sees nor touches it.
func TestAServiceAgentsOAuthTokenRunsOneIntentPerKeyInItsOwnTenant(t *testing.T) {
	o := newOAuthStack(t)
	tokA := o.token(o.svcA)
	first := o.ticket(tokA, "oa-1", "c-oauth")
	if first.Status != http.StatusCreated || first.Header.Get("Idempotent-Replayed") != "false" {
		t.Fatalf("first call with an OAuth token: HTTP %d %s", first.Status, first.Body)
	}
	again := o.ticket(tokA, "oa-1", "c-oauth")
	if again.Status != http.StatusCreated || again.Header.Get("Idempotent-Replayed") != "true" || string(again.Body) != string(first.Body) {
		t.Fatalf("the retry: HTTP %d replayed %q %s", again.Status, again.Header.Get("Idempotent-Replayed"), again.Body)
	}
	// The tenant's own API token reaches the same intent.
	static := o.ticket(o.Tokens[testenv.TenantA], "oa-1", "c-oauth")
	if static.Header.Get("Idempotent-Replayed") != "true" || string(static.Body) != string(first.Body) {
		t.Fatalf("the same key with the tenant's API token: HTTP %d replayed %q", static.Status, static.Header.Get("Idempotent-Replayed"))
	}
	// The same key with another intent is a conflict, as with an API
	// token, and runs nothing.
	if conflict := o.ticket(tokA, "oa-1", "c-other"); conflict.Status != http.StatusUnprocessableEntity && conflict.Status != http.StatusConflict {
		t.Fatalf("the same key, another customer: HTTP %d %s", conflict.Status, conflict.Body)
	} else if !strings.Contains(string(conflict.Body), "idempotency-key-reused") {
		t.Fatalf("the same key, another customer: %s", conflict.Body)
	}
	// Another tenant's token: its own intent under the same key, and
	// the first tenant's operation is not found.
	tokB := o.token(o.svcB)
	other := o.ticket(tokB, "oa-1", "c-oauth")
	if other.Status != http.StatusCreated || other.Header.Get("Idempotent-Replayed") != "false" {
		t.Fatalf("tenant B, same key: HTTP %d replayed %q", other.Status, other.Header.Get("Idempotent-Replayed"))
	}
	if n := testenv.Count(t, o.Pool, "ticket", "tenant_id = $1", testenv.TenantA); n != 1 {
		t.Fatalf("tenant A has %d tickets, want 1", n)
	}
	opID := first.Header.Get("Operation-Id")
	if seen := o.Do(testenv.Request{Method: http.MethodGet, Path: "/v1/operations/" + opID, Token: tokB}); seen.Status != http.StatusNotFound {
		t.Fatalf("tenant B's token reads tenant A's operation: HTTP %d %s", seen.Status, seen.Body)
	}
	if seen := o.Do(testenv.Request{Method: http.MethodGet, Path: "/v1/operations/" + opID, Token: tokA}); seen.Status != http.StatusOK {
		t.Fatalf("tenant A's token reads its operation: HTTP %d %s", seen.Status, seen.Body)
	}
	if c := o.Do(testenv.Request{Path: "/v1/operations/" + opID + "/cancel", Token: tokB}); c.Status != http.StatusNotFound {
		t.Fatalf("tenant B's token cancels tenant A's operation: HTTP %d %s", c.Status, c.Body)
	}
	t.Logf("tenant A: 1 ticket for 3 calls (2 with its OAuth token, 1 with its API token), the key reused with another customer refused; tenant B's token: its own intent, and 404 on A's operation")
}

// The resource describes itself, and a refusal names where.
func TestTheGatewayPublishesItsProtectedResourceMetadata(t *testing.T) {
	o := newOAuthStack(t)
	resp, err := http.Get(o.URL + oauth.WellKnown)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var meta struct {
		Resource string   `json:"resource"`
		Servers  []string `json:"authorization_servers"`
		Scopes   []string `json:"scopes_supported"`
		Methods  []string `json:"bearer_methods_supported"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&meta); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("metadata: HTTP %d %v", resp.StatusCode, err)
	}
	if meta.Resource != gatewayResource || len(meta.Servers) != 1 || meta.Servers[0] != o.hydra.Issuer ||
		!strings.Contains(strings.Join(meta.Scopes, " "), "idemflow:call") || strings.Join(meta.Methods, ",") != "header" {
		t.Fatalf("metadata: %+v", meta)
	}
	none := o.ticket("", "oa-none", "c-none")
	if none.Status != http.StatusUnauthorized || !strings.Contains(none.Header.Get("WWW-Authenticate"), `resource_metadata="https://gateway.idemflow.test/.well-known/oauth-protected-resource"`) {
		t.Fatalf("no token: HTTP %d, WWW-Authenticate %q", none.Status, none.Header.Get("WWW-Authenticate"))
	}
}

// A token whose scopes do not cover the call is a 403 that names the
// scope, and writes nothing; the same token may read.
func TestAnOAuthTokenWithoutTheScopeIsRefusedWith403(t *testing.T) {
	o := newOAuthStack(t)
	tok := o.hydra.ClientCredentials(o.reader, gatewayResource, "idemflow:read")
	resp := o.ticket(tok, "oa-scope", "c-scope")
	challenge := resp.Header.Get("WWW-Authenticate")
	if resp.Status != http.StatusForbidden || !strings.Contains(challenge, `error="insufficient_scope"`) || !strings.Contains(challenge, `scope="idemflow:call:`) {
		t.Fatalf("a read-only token creates a ticket: HTTP %d, WWW-Authenticate %q, %s", resp.Status, challenge, resp.Body)
	}
	if n := countTickets(t, o.Stack) + countRecords(t, o.Stack); n != 0 {
		t.Fatalf("the refused call wrote %d rows", n)
	}
	if read := o.Do(testenv.Request{Method: http.MethodGet, Path: "/v1/tenant", Token: tok}); read.Status != http.StatusOK {
		t.Fatalf("the read-only token reads its tenant: HTTP %d", read.Status)
	}
	t.Logf("a read-only token: HTTP 403, %s; nothing written", challenge)
}

// Every bad credential is a 401 invalid_token (or, when the issuer's
// keys cannot be had past the grace, a 503: the token may be good), with
// nothing written.
func TestEveryBadOAuthCredentialIsRefusedAndWritesNothing(t *testing.T) {
	o := newOAuthStack(t)
	good := o.token(o.svcA)
	key := o.hydra.SigningKey()
	var claims map[string]any
	parsed, err := jwt.ParseSigned(good, []jose.SignatureAlgorithm{jose.RS256})
	if err != nil {
		t.Fatal(err)
	}
	if err := parsed.UnsafeClaimsWithoutVerification(&claims); err != nil {
		t.Fatal(err)
	}
	// sign makes a token like the good one, with changes, signed with
	// Hydra's own key (or another).
	sign := func(k jose.JSONWebKey, alg jose.SignatureAlgorithm, change map[string]any) string {
		c := map[string]any{}
		for n, v := range claims {
			c[n] = v
		}
		for n, v := range change {
			c[n] = v
		}
		signer, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: k}, (&jose.SignerOptions{}).WithType("JWT"))
		if err != nil {
			t.Fatal(err)
		}
		tok, err := jwt.Signed(signer).Claims(c).Serialize()
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	now := time.Now()
	alien, _ := rsa.GenerateKey(rand.Reader, 2048)
	pub, _ := x509.MarshalPKIXPublicKey(key.Public().Key)
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})
	parts := strings.Split(good, ".")
	b64 := base64.RawURLEncoding
	tampered := func() string {
		c := map[string]any{}
		for n, v := range claims {
			c[n] = v
		}
		c["client_id"] = o.svcB.ID // speak for tenant B
		body, _ := json.Marshal(c)
		return parts[0] + "." + b64.EncodeToString(body) + "." + parts[2]
	}
	opaque := o.hydra.ClientCredentials(o.opaque, gatewayResource, "idemflow:call")
	if resp := o.ticket(opaque, "oa-opaque", "c-opaque"); resp.Status != http.StatusCreated {
		t.Fatalf("an opaque token, introspected: HTTP %d %s", resp.Status, resp.Body)
	}
	revoked := o.hydra.ClientCredentials(o.opaque, gatewayResource, "idemflow:call")
	o.hydra.Revoke(o.opaque, revoked)
	before := countTickets(t, o.Stack)

	cases := []struct {
		name, token, reason string
	}{
		{"expired", sign(key, jose.RS256, map[string]any{"exp": now.Add(-time.Hour).Unix(), "iat": now.Add(-2 * time.Hour).Unix(), "nbf": now.Add(-2 * time.Hour).Unix()}), "expired"},
		{"not yet valid", sign(key, jose.RS256, map[string]any{"nbf": now.Add(time.Hour).Unix(), "exp": now.Add(2 * time.Hour).Unix()}), "not valid before"},
		{"another audience", o.hydra.ClientCredentials(o.svcA, "https://other.idemflow.test/", "idemflow:call"), "not for this resource"},
		{"another issuer", sign(key, jose.RS256, map[string]any{"iss": "https://issuer.example/"}), "issuer"},
		{"an unknown kid", sign(jose.JSONWebKey{Key: alien, KeyID: "not-hydras", Algorithm: "RS256"}, jose.RS256, nil), "no key"},
		{"alg none", b64.EncodeToString([]byte(`{"alg":"none","typ":"JWT","kid":"`+key.KeyID+`"}`)) + "." + parts[1] + ".", "unexpected signature algorithm"},
		{"HS256 keyed by the public key", sign(jose.JSONWebKey{Key: pubPEM, KeyID: key.KeyID}, jose.HS256, nil), "unexpected signature algorithm"},
		{"a tampered payload", tampered(), "signature"},
		{"a revoked opaque token (introspection)", revoked, "not active"},
		{"no tenant", o.hydra.ClientCredentials(o.hydra.CreateClient(map[string]any{"grant_types": []string{"client_credentials"},
			"token_endpoint_auth_method": "client_secret_post", "scope": "idemflow:call", "audience": []string{gatewayResource}}), gatewayResource, "idemflow:call"), "no tenant"},
		{"garbage", "not-a-token", "not active"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp := o.ticket(c.token, "oa-bad-"+string(rune('a'+i)), "c-bad")
			challenge := resp.Header.Get("WWW-Authenticate")
			if resp.Status != http.StatusUnauthorized || !strings.Contains(challenge, `error="invalid_token"`) ||
				!strings.Contains(challenge, "resource_metadata=") || !strings.Contains(string(resp.Body), c.reason) {
				t.Fatalf("HTTP %d, WWW-Authenticate %q, %s; want 401 invalid_token saying %q", resp.Status, challenge, resp.Body, c.reason)
			}
			t.Logf("HTTP 401: %s", resp.Body)
		})
	}
	if n := countTickets(t, o.Stack); n != before {
		t.Fatalf("the refused calls made %d tickets", n-before)
	}

	t.Run("unknown kids fetch the keys at most once per the minimum refresh", func(t *testing.T) {
		before := o.keysFetched.Load()
		for i := range 20 {
			tok := sign(jose.JSONWebKey{Key: alien, KeyID: fmt.Sprintf("made-up-%d", i), Algorithm: "RS256"}, jose.RS256, nil)
			if resp := o.ticket(tok, fmt.Sprintf("oa-kid-%d", i), "c-kid"); resp.Status != http.StatusUnauthorized {
				t.Fatalf("made-up kid %d: HTTP %d", i, resp.Status)
			}
		}
		if n := o.keysFetched.Load() - before; n > 1 {
			t.Fatalf("20 tokens with made-up kids fetched the keys %d times", n)
		}
		t.Logf("20 tokens with made-up kids: 401 each, the keys fetched %d time(s)", o.keysFetched.Load()-before)
	})

	t.Run("a JWKS endpoint down past the grace", func(t *testing.T) {
		// Keys held since the first call: 1 min old plus 1 min of grace.
		o.keysDown.Store(true)
		defer o.keysDown.Store(false)
		o.clock.Store(int64(90 * time.Second))
		if resp := o.ticket(good, "oa-grace", "c-grace"); resp.Status != http.StatusCreated {
			t.Fatalf("within the grace: HTTP %d %s", resp.Status, resp.Body)
		}
		o.clock.Store(int64(3 * time.Minute))
		resp := o.ticket(good, "oa-past-grace", "c-grace")
		if resp.Status != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("past the grace: HTTP %d %s", resp.Status, resp.Body)
		}
		if n := testenv.Count(t, o.Pool, "idempotency_record", "idem_key = $1", "oa-past-grace"); n != 0 {
			t.Fatalf("past the grace, %d records", n)
		}
		t.Logf("keys 90 s old, endpoint down: served; 3 min old: HTTP 503 %s", resp.Body)
	})

	t.Run("a rotated key is fetched at its first token", func(t *testing.T) {
		// Later, the endpoint answering again: the stale keys are
		// fetched anew.
		o.clock.Store(int64(4 * time.Minute))
		defer o.clock.Store(0)
		if resp := o.ticket(good, "oa-later", "c-rotated"); resp.Status != http.StatusCreated {
			t.Fatalf("the good token, later: HTTP %d %s", resp.Status, resp.Body)
		}
		// Hydra makes a new signing key; its next token names a kid the
		// verifier does not hold, which it fetches (past the minimum
		// refresh since its last fetch).
		o.hydra.RotateKeys()
		rotated := o.token(o.svcA)
		o.clock.Store(int64(4*time.Minute + 40*time.Second))
		before := o.keysFetched.Load()
		if resp := o.ticket(rotated, "oa-rotated", "c-rotated"); resp.Status != http.StatusCreated {
			t.Fatalf("a token signed with the new key: HTTP %d %s", resp.Status, resp.Body)
		}
		if o.keysFetched.Load() != before+1 {
			t.Fatalf("the new kid fetched the keys %d times", o.keysFetched.Load()-before)
		}
	})
}
