package gateway

import (
	"crypto/subtle"
	"errors"
	"net/http"
	"strings"

	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/internal/oauth"
	"github.com/idemflow/idemflow/internal/problem"
	"github.com/idemflow/idemflow/internal/tenant"
)

// authed resolves the bearer token to a tenant before anything else is
// read, so an unknown caller learns nothing and writes nothing. Either
// kind of credential gives a principal, and what follows does not know
// which it was: tenants, keys, limits and replays are the same.
// need is the scope the route asks of an OAuth token (API tokens may do
// anything their tenant may).
func (g *Gateway) authed(need oauth.Need, next tenantHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		token = strings.TrimSpace(token)
		if !strings.EqualFold(scheme, "Bearer") || token == "" {
			g.refuse(w, "", "send Authorization: Bearer <token>")
			return
		}
		p, ok := g.principal(w, r, token)
		if !ok {
			return
		}
		if !p.Allows(need) {
			scope := g.OAuth.Scope(string(need))
			w.Header().Set("WWW-Authenticate", g.OAuth.Challenge("insufficient_scope", "", scope))
			writeProblem(w, problem.New(problem.TypeInsufficientScope, http.StatusForbidden,
				"the token's scopes do not allow this request; it needs "+scope))
			return
		}
		noteRequest(r.Context(), func(i *requestInfo) { i.tenantID = p.Tenant })
		next(w, r, p.Tenant)
	}
}

// principal verifies the token; on failure it has answered.
func (g *Gateway) principal(w http.ResponseWriter, r *http.Request, token string) (oauth.Principal, bool) {
	if g.MCPSecret != "" && subtle.ConstantTimeCompare([]byte(token), []byte(g.MCPSecret)) == 1 {
		t := r.Header.Get(oauth.HeaderActingTenant)
		if idem.ValidateTenant(t) != nil {
			writeProblem(w, problem.New(problem.TypeInvalidRequest, http.StatusBadRequest, "the MCP server's request names no valid "+oauth.HeaderActingTenant))
			return oauth.Principal{}, false
		}
		return oauth.Principal{Tenant: t, Scopes: strings.Fields(r.Header.Get(oauth.HeaderActingScopes))}, true
	}
	// A JWT is the authorization server's; any other token is looked up
	// among the tenants' API tokens, then (an opaque access token)
	// introspected.
	if g.OAuth == nil || !oauth.IsJWT(token) && !g.APITokensOff {
		tenantID, err := g.Tenants.Authenticate(r.Context(), token)
		switch {
		case err == nil:
			return oauth.Principal{Tenant: tenantID, All: true}, true
		case !errors.Is(err, tenant.ErrUnknownToken):
			g.unavailable(w, r, err)
			return oauth.Principal{}, false
		case !g.OAuth.Introspects():
			g.refuse(w, "invalid_token", "the bearer token is unknown or revoked")
			return oauth.Principal{}, false
		}
	}
	p, err := g.OAuth.Verify(r.Context(), token)
	var te *oauth.TokenError
	switch {
	case errors.As(err, &te):
		g.refuse(w, "invalid_token", te.Reason)
		return oauth.Principal{}, false
	case err != nil:
		g.logger().WarnContext(r.Context(), "oauth: cannot verify a token", "error", err)
		w.Header().Set("Retry-After", "5")
		writeProblem(w, problem.New(problem.TypeUnavailable, http.StatusServiceUnavailable,
			"the authorization server's keys or introspection did not answer, so the token could not be checked; nothing was executed: retry with the same token and key"))
		return oauth.Principal{}, false
	}
	return p, true
}

// refuse answers 401 with a challenge that names the resource's metadata
// when OAuth is on.
func (g *Gateway) refuse(w http.ResponseWriter, errCode, detail string) {
	w.Header().Set("WWW-Authenticate", g.OAuth.Challenge(errCode, "", ""))
	writeProblem(w, problem.New(problem.TypeUnauthorized, http.StatusUnauthorized, detail))
}
