// Package oauthtest starts idemflow as OAuth resource servers of a real
// authorization server, for the tests of the clients and SDKs that sign
// in to it (TypeScript's and Python's).
package oauthtest

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemflow/idemflow/internal/gateway"
	"github.com/idemflow/idemflow/internal/mcpserver"
	"github.com/idemflow/idemflow/internal/oauth"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
)

// Stack is a testenv.Stack whose gateway and MCP server over HTTP are OAuth
// resource servers of a real Hydra, for the SDKs' and clients' OAuth
// tests: a host signs in as the user alice, of testenv.TenantA; Service is a
// service agent's client-credentials client, of testenv.TenantA too.
type Stack struct {
	*testenv.Stack
	Hydra   *testenv.Hydra
	MCPURL  string
	Service testenv.Client
	// Env is what a client's test process needs (see its names below).
	Env []string
}

// GatewayResource is the gateway's resource URI in OAuth tests.
const GatewayResource = "https://gateway.idemflow.test/"

// New starts Hydra (access tokens living ttl), the stack, and
// the MCP server at .../mcp; a host's redirect URI is callback.
func New(t *testing.T, ttl time.Duration, callback string) *Stack {
	t.Helper()
	h := testenv.StartHydra(t, testenv.HydraOptions{AccessTokenTTL: ttl, Users: map[string]string{"alice": testenv.TenantA}})
	svc := h.CreateClient(map[string]any{"grant_types": []string{"client_credentials"}, "token_endpoint_auth_method": "client_secret_post",
		"scope": "idemflow:call idemflow:read", "audience": []string{GatewayResource}})
	const secret = "an-mcp-secret-of-at-least-32-characters"
	gv, err := oauth.New(oauth.Config{Issuer: h.Issuer, Resource: GatewayResource, TenantClaim: "ext.tenant",
		Tenants: map[string]string{"client:" + svc.ID: testenv.TenantA}})
	if err != nil {
		t.Fatal(err)
	}
	s := testenv.NewStack(t, testenv.Options{Gateway: func(g *gateway.Gateway) { g.OAuth, g.MCPSecret = gv, secret }})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mcpURL := "http://" + ln.Addr().String() + "/mcp"
	mv, err := oauth.New(oauth.Config{Issuer: h.Issuer, Resource: mcpURL, TenantClaim: "ext.tenant"})
	if err != nil {
		t.Fatal(err)
	}
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: mcpserver.HTTPHandler(
		mcpserver.Config{BaseURL: s.URL, CallTimeout: 30 * time.Second, Operations: s.Set.Operations()},
		mcpserver.HTTPOptions{OAuth: mv, GatewaySecret: secret})}}
	srv.Start()
	t.Cleanup(srv.Close)
	// The browser: POST an authorization URL, get the redirect it ends at.
	driver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		final, err := h.Authorize(strings.TrimSpace(string(body)), callback)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		_, _ = io.WriteString(w, final.String())
	}))
	t.Cleanup(driver.Close)
	// A host registers for every scope the metadata lists: it asks for
	// them all.
	var names []string
	for _, o := range s.Set.Operations() {
		names = append(names, o.Name)
	}
	scopes := strings.Join(append(mv.Scopes(names), oauth.DefaultClientScopes...), " ")
	return &Stack{Stack: s, Hydra: h, MCPURL: mcpURL, Service: svc, Env: []string{
		"IDEMFLOW_URL=" + s.URL, "DATABASE_URL=" + s.DatabaseURL,
		"IDEMFLOW_OAUTH_MCP_URL=" + mcpURL, "IDEMFLOW_OAUTH_DRIVER=" + driver.URL, "IDEMFLOW_OAUTH_CALLBACK=" + callback,
		fmt.Sprintf("IDEMFLOW_OAUTH_TTL_MS=%d", ttl.Milliseconds()), "IDEMFLOW_OAUTH_SCOPES=" + scopes,
		"IDEMFLOW_OAUTH_ISSUER=" + h.Issuer, "IDEMFLOW_OAUTH_CLIENT_ID=" + svc.ID, "IDEMFLOW_OAUTH_CLIENT_SECRET=" + svc.Secret,
		"IDEMFLOW_OAUTH_AUDIENCE=" + GatewayResource,
	}}
}
