// Package oauth makes idemflow an OAuth 2.1 resource server: it verifies
// an authorization server's access tokens (JWTs against the issuer's
// JWKS, opaque ones by introspection, RFC 7662), finds the tenant and the
// scopes a token grants, and describes the resource to clients that
// discover it (Protected Resource Metadata, RFC 9728).
//
// It accepts only tokens issued for its own resource (the audience, RFC
// 8707) by the one issuer it was configured with: a token for another
// resource is refused, never passed on.
package oauth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/idemflow/idemflow/idem"
)

// Config is one issuer trusted for one resource.
type Config struct {
	// Issuer is the authorization server's issuer identifier, compared
	// exactly with a token's iss.
	Issuer string
	// Resource is this server's canonical URI: a token's aud must name it.
	Resource string
	// JWKSURL is where the issuer publishes its keys; empty: found by
	// discovery (RFC 8414, then OpenID Connect Discovery) at first use.
	JWKSURL string
	// IntrospectionURL verifies opaque tokens (RFC 7662); empty: an
	// opaque token is refused. IntrospectionClientID and
	// IntrospectionSecret authenticate the call (HTTP Basic) where the
	// endpoint asks for it.
	IntrospectionURL      string
	IntrospectionClientID string
	IntrospectionSecret   string
	// Algorithms are the signature algorithms a JWT may use: asymmetric
	// ones only (none and the HMACs are refused whatever this says).
	// Empty: DefaultAlgorithms.
	Algorithms []string
	// ClockSkew is how far exp and nbf may be off the local clock.
	ClockSkew time.Duration
	// KeysMaxAge is how long fetched keys are used before they are
	// fetched again; KeysGrace how much longer they are used while the
	// JWKS endpoint does not answer. KeysMinRefresh bounds how often an
	// unknown kid makes the keys be fetched again.
	KeysMaxAge, KeysGrace, KeysMinRefresh time.Duration
	// TenantClaim names the claim that holds the tenant (a dotted path
	// reaches into an object: "ext.tenant"). Tenants maps a token with no
	// such claim: "client:<client_id>" or "sub:<subject>" to a tenant.
	TenantClaim string
	Tenants     map[string]string
	// ScopePrefix begins every scope idemflow reads (DefaultScopePrefix).
	ScopePrefix string
	// ClientScopes are scopes the metadata lists beside idemflow's own,
	// which a client asks for with them: DefaultClientScopes when nil.
	// Hosts ask for exactly what the metadata lists, and without
	// offline_access an authorization server issues no refresh token.
	ClientScopes []string
	// ResourceName and Documentation describe the resource to people.
	ResourceName, Documentation string
	// HTTP fetches keys, discovery documents and introspections.
	HTTP *http.Client
	// Now is the clock; nil: time.Now.
	Now func() time.Time
}

// Defaults, stated in flags' help and the docs.
const (
	DefaultClockSkew      = 30 * time.Second
	DefaultKeysMaxAge     = time.Hour
	DefaultKeysGrace      = 15 * time.Minute
	DefaultKeysMinRefresh = 30 * time.Second
	DefaultScopePrefix    = "idemflow:"
	DefaultTenantClaim    = "tenant"
)

// DefaultClientScopes: a refresh token, from the authorization servers
// that issue one for this scope (Hydra, Keycloak, Okta, Auth0, Entra ID).
var DefaultClientScopes = []string{"offline_access"}

// DefaultAlgorithms are the asymmetric algorithms accepted by default.
var DefaultAlgorithms = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}

// asymmetric is every algorithm a token may ever use.
var asymmetric = map[string]jose.SignatureAlgorithm{
	"RS256": jose.RS256, "RS384": jose.RS384, "RS512": jose.RS512,
	"PS256": jose.PS256, "PS384": jose.PS384, "PS512": jose.PS512,
	"ES256": jose.ES256, "ES384": jose.ES384, "ES512": jose.ES512,
	"EdDSA": jose.EdDSA,
}

// What a scope lets a token do. A token needs ScopeCall, or the
// operation's own ScopeCall+":"+name, to run an operation; ScopeRead to
// read intents and operations' answers.
const (
	ScopeCall = "call"
	ScopeRead = "read"
)

// Principal is who a verified token speaks for, and what it may do.
type Principal struct {
	Tenant   string
	Subject  string
	ClientID string
	// Scopes are the token's scopes that idemflow reads, without their
	// prefix; All is set for idemflow's own API tokens, which may do
	// anything their tenant may.
	Scopes []string
	All    bool
}

// Need is the scope a request needs, as idemflow names it (without the
// prefix): NeedNone, NeedRead, NeedCall (every operation's: a cancel) or
// CallOf an operation.
type Need string

// The needs of requests that name no operation.
const (
	NeedNone Need = ""
	NeedRead Need = ScopeRead
	NeedCall Need = ScopeCall
)

// CallOf is what running one operation needs: ScopeCall+":"+operation,
// which ScopeCall also covers.
func CallOf(operation string) Need { return Need(ScopeCall + ":" + operation) }

// Allows says whether p's scopes cover n.
func (p Principal) Allows(n Need) bool {
	if n == NeedNone || p.All || slices.Contains(p.Scopes, string(n)) {
		return true
	}
	return strings.HasPrefix(string(n), ScopeCall+":") && slices.Contains(p.Scopes, ScopeCall)
}

// TokenError refuses a token: the caller's 401, invalid_token.
type TokenError struct{ Reason string }

func (e *TokenError) Error() string { return "invalid token: " + e.Reason }

// UnavailableError: the token could not be checked (the issuer's keys or
// its introspection did not answer). The caller's 503: the token may be
// good, and getting another would not help.
type UnavailableError struct{ Err error }

func (e *UnavailableError) Error() string { return "cannot verify the token: " + e.Err.Error() }
func (e *UnavailableError) Unwrap() error { return e.Err }

func invalid(format string, args ...any) error {
	return &TokenError{Reason: fmt.Sprintf(format, args...)}
}

// Verifier verifies one issuer's tokens for one resource.
type Verifier struct {
	cfg  Config
	algs []jose.SignatureAlgorithm
	keys *keySet
	meta *discovery
}

// New checks cfg and returns its verifier. It fetches nothing: the
// issuer may start after idemflow, and is asked at the first token.
func New(cfg Config) (*Verifier, error) {
	if cfg.Issuer == "" || cfg.Resource == "" {
		return nil, errors.New("oauth: an issuer and this resource's URI are both required")
	}
	if cfg.TenantClaim == "" && len(cfg.Tenants) == 0 {
		return nil, errors.New("oauth: name the tenant claim or map clients or subjects to tenants")
	}
	for k, t := range cfg.Tenants {
		if !strings.HasPrefix(k, "client:") && !strings.HasPrefix(k, "sub:") {
			return nil, fmt.Errorf("oauth: tenant mapping %q: want client:<client_id> or sub:<subject>", k)
		}
		if err := idem.ValidateTenant(t); err != nil {
			return nil, fmt.Errorf("oauth: tenant mapping %q: %w", k, err)
		}
	}
	names := cfg.Algorithms
	if len(names) == 0 {
		names = DefaultAlgorithms
	}
	v := &Verifier{cfg: cfg}
	for _, n := range names {
		a, ok := asymmetric[n]
		if !ok {
			return nil, fmt.Errorf("oauth: algorithm %q is not an asymmetric signature algorithm; allowed: %s", n, strings.Join(DefaultAlgorithms, ", "))
		}
		v.algs = append(v.algs, a)
	}
	if v.cfg.ClockSkew < 0 {
		v.cfg.ClockSkew = 0
	}
	v.cfg.KeysMaxAge = orDefault(v.cfg.KeysMaxAge, DefaultKeysMaxAge)
	v.cfg.KeysGrace = max(v.cfg.KeysGrace, 0)
	v.cfg.KeysMinRefresh = orDefault(v.cfg.KeysMinRefresh, DefaultKeysMinRefresh)
	if v.cfg.ClientScopes == nil {
		v.cfg.ClientScopes = DefaultClientScopes
	}
	if v.cfg.ScopePrefix == "" {
		v.cfg.ScopePrefix = DefaultScopePrefix
	}
	if v.cfg.HTTP == nil {
		v.cfg.HTTP = &http.Client{Timeout: 10 * time.Second}
	}
	if v.cfg.Now == nil {
		v.cfg.Now = time.Now
	}
	v.meta = &discovery{issuer: cfg.Issuer, http: v.cfg.HTTP, jwks: cfg.JWKSURL}
	v.keys = &keySet{v: v}
	return v, nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// Resource is the URI tokens must be issued for.
func (v *Verifier) Resource() string { return v.cfg.Resource }

// Scopes are the scopes idemflow reads for these operations, as an
// authorization server names them.
func (v *Verifier) Scopes(operations []string) []string {
	out := []string{v.Scope(ScopeCall), v.Scope(ScopeRead)}
	for _, o := range operations {
		out = append(out, v.Scope(string(CallOf(o))))
	}
	return out
}

// Scope is one scope as the authorization server names it (with no
// verifier: as DefaultScopePrefix names it).
func (v *Verifier) Scope(s string) string {
	if v == nil {
		return DefaultScopePrefix + s
	}
	return v.cfg.ScopePrefix + s
}

// IsJWT says whether a bearer token has a JWT's shape (three parts
// joined by dots): a server that takes both kinds of credential verifies
// such a token here, and looks any other up among its own API tokens
// first (theirs have no dots).
func IsJWT(token string) bool { return strings.Count(token, ".") == 2 }

// Introspects says whether opaque tokens can be verified.
func (v *Verifier) Introspects() bool { return v != nil && v.cfg.IntrospectionURL != "" }

// Verify checks a bearer token and returns whom it speaks for. Its error
// is a *TokenError (refuse it) or an *UnavailableError (answer later).
func (v *Verifier) Verify(ctx context.Context, token string) (Principal, error) {
	if IsJWT(token) {
		return v.verifyJWT(ctx, token)
	}
	if v.cfg.IntrospectionURL == "" {
		return Principal{}, invalid("not a JWT, and no introspection endpoint is configured for opaque tokens")
	}
	return v.introspect(ctx, token)
}

// principal reads the tenant and the scopes out of a token's claims.
func (v *Verifier) principal(claims map[string]any) (Principal, error) {
	p := Principal{}
	p.Subject, _ = claims["sub"].(string)
	p.ClientID, _ = claims["client_id"].(string)
	if p.ClientID == "" {
		p.ClientID, _ = claims["azp"].(string)
	}
	var scopes []string
	switch s := claims["scope"].(type) {
	case string:
		scopes = strings.Fields(s)
	}
	switch s := claims["scp"].(type) {
	case []any:
		for _, x := range s {
			if str, ok := x.(string); ok {
				scopes = append(scopes, str)
			}
		}
	case string:
		scopes = append(scopes, strings.Fields(s)...)
	}
	for _, s := range scopes {
		if rest, ok := strings.CutPrefix(s, v.cfg.ScopePrefix); ok && !slices.Contains(p.Scopes, rest) {
			p.Scopes = append(p.Scopes, rest)
		}
	}
	if v.cfg.TenantClaim != "" {
		if t, ok := lookup(claims, v.cfg.TenantClaim).(string); ok && t != "" {
			p.Tenant = t
		}
	}
	if p.Tenant == "" && p.ClientID != "" {
		p.Tenant = v.cfg.Tenants["client:"+p.ClientID]
	}
	if p.Tenant == "" && p.Subject != "" {
		p.Tenant = v.cfg.Tenants["sub:"+p.Subject]
	}
	if p.Tenant == "" {
		return Principal{}, invalid("the token names no tenant (claim %q, or a mapping of its client or subject)", v.cfg.TenantClaim)
	}
	if err := idem.ValidateTenant(p.Tenant); err != nil {
		return Principal{}, invalid("the token's tenant: %v", err)
	}
	return p, nil
}

// lookup follows a dotted path into nested objects.
func lookup(claims map[string]any, path string) any {
	var cur any = claims
	for part := range strings.SplitSeq(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[part]
	}
	return cur
}
