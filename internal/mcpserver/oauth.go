package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/idemflow/idemflow/internal/oauth"
	"github.com/idemflow/idemflow/internal/problem"
	"github.com/modelcontextprotocol/go-sdk/auth"
)

// acting is the principal of an OAuth token this server verified, and
// the secret it calls the gateway with on that principal's behalf.
type acting struct {
	secret string
	p      oauth.Principal
}

// client is base with the principal's tenant and scopes on each request.
func (a acting) client(base *http.Client) *http.Client {
	if base == nil {
		base = http.DefaultClient
	}
	c := *base
	rt := c.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	c.Transport = roundTripper(func(r *http.Request) (*http.Response, error) {
		r = r.Clone(r.Context())
		r.Header.Set(oauth.HeaderActingTenant, a.p.Tenant)
		r.Header.Set(oauth.HeaderActingScopes, strings.Join(a.p.Scopes, " "))
		return rt.RoundTrip(r)
	})
	return &c
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

type verifiedKey struct{}

// oauthGate verifies an OAuth access token for this server and checks a
// tool call's scope before the SDK sees the request. It answers and
// returns false, or returns the request with the verified token in its
// context (read by the SDK's verifier, preVerified).
func oauthGate(w http.ResponseWriter, r *http.Request, opts HTTPOptions, cfg Config, token string) (*http.Request, bool) {
	v := opts.OAuth
	p, err := v.Verify(r.Context(), token)
	var te *oauth.TokenError
	switch {
	case errors.As(err, &te):
		w.Header().Set("WWW-Authenticate", v.Challenge("invalid_token", "", ""))
		deny(w, http.StatusUnauthorized, problem.TypeUnauthorized, te.Reason)
		return nil, false
	case err != nil:
		slog.WarnContext(r.Context(), "mcp: cannot verify an OAuth token", "error", err)
		w.Header().Set("Retry-After", "5")
		deny(w, http.StatusServiceUnavailable, problem.TypeUnavailable, "the authorization server's keys or introspection did not answer; retry")
		return nil, false
	}
	if need := neededScope(r, cfg); !p.Allows(need) {
		scope := v.Scope(string(need))
		w.Header().Set("WWW-Authenticate", v.Challenge("insufficient_scope", "", scope))
		deny(w, http.StatusForbidden, problem.TypeInsufficientScope, "the token's scopes do not allow this call; it needs "+scope)
		return nil, false
	}
	scopes := make([]string, len(p.Scopes))
	for i, s := range p.Scopes {
		scopes[i] = v.Scope(s)
	}
	info := &auth.TokenInfo{UserID: p.Tenant, Scopes: scopes, Expiration: time.Now().Add(time.Minute),
		Extra: map[string]any{"acting": acting{secret: opts.GatewaySecret, p: p}}}
	return r.WithContext(context.WithValue(r.Context(), verifiedKey{}, info)), true
}

// neededScope is the scope a tools/call asks for (none for every other
// request, which any valid token may send). The body is read and put
// back.
func neededScope(r *http.Request, cfg Config) oauth.Need {
	if r.Method != http.MethodPost || r.Body == nil {
		return oauth.NeedNone
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxPeek))
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
	if err != nil {
		return oauth.NeedNone
	}
	var msg struct {
		Method string `json:"method"`
		Params struct {
			Name string `json:"name"`
		} `json:"params"`
	}
	if json.Unmarshal(body, &msg) != nil || msg.Method != "tools/call" {
		return oauth.NeedNone
	}
	if msg.Params.Name == "get_operation" {
		return oauth.NeedRead
	}
	for _, o := range cfg.Operations {
		if o.Tool == msg.Params.Name {
			return oauth.CallOf(o.Name)
		}
	}
	return oauth.NeedNone
}

// maxPeek bounds how much of a request is read to find its tool.
const maxPeek = 4 << 20

// preVerified hands the SDK the token oauthGate verified, and asks the
// gateway about any other.
func preVerified(next auth.TokenVerifier) auth.TokenVerifier {
	return func(ctx context.Context, token string, r *http.Request) (*auth.TokenInfo, error) {
		if info, ok := r.Context().Value(verifiedKey{}).(*auth.TokenInfo); ok {
			return info, nil
		}
		return next(ctx, token, r)
	}
}
