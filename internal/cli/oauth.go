package cli

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/idemflow/idemflow/internal/oauth"
)

// oauthFlags configure the resource server of the gateway and of the MCP
// server over HTTP (package oauth). Without --oauth-issuer, OAuth is off
// and idemflow's own API tokens are the only credential.
type oauthFlags struct {
	issuer, resource, jwks, introspection, introspectionID, introspectionSecret string
	algorithms, tenantClaim, tenants, scopePrefix, clientScopes                 string
	skew, keysMaxAge, keysGrace, keysMinRefresh                                 time.Duration
	apiTokens, registered                                                       bool
}

func (o *oauthFlags) register(fs *flag.FlagSet, what string) {
	o.registered = true
	fs.StringVar(&o.issuer, "oauth-issuer", "", "accept access tokens of this OAuth authorization server (its issuer URL) beside idemflow's API tokens; off when empty (env IDEMFLOW_OAUTH_ISSUER)")
	fs.StringVar(&o.resource, "oauth-resource", "", "with --oauth-issuer: the "+what+"'s canonical URI, which a token's audience must name and clients are told (env IDEMFLOW_OAUTH_RESOURCE)")
	fs.StringVar(&o.jwks, "oauth-jwks-url", "", "the issuer's JWKS URL; default: from its discovery document (env IDEMFLOW_OAUTH_JWKS_URL)")
	fs.StringVar(&o.introspection, "oauth-introspection-url", "", "verify opaque tokens at this introspection endpoint (RFC 7662); default: opaque tokens are refused (env IDEMFLOW_OAUTH_INTROSPECTION_URL)")
	fs.StringVar(&o.introspectionID, "oauth-introspection-client-id", "", "the client ID that authenticates introspection calls, if the endpoint asks for one (env IDEMFLOW_OAUTH_INTROSPECTION_CLIENT_ID)")
	fs.StringVar(&o.introspectionSecret, "oauth-introspection-secret", "", "its secret (env IDEMFLOW_OAUTH_INTROSPECTION_SECRET)")
	fs.StringVar(&o.algorithms, "oauth-algorithms", strings.Join(oauth.DefaultAlgorithms, ","), "the signature algorithms a JWT may use; asymmetric ones only (env IDEMFLOW_OAUTH_ALGORITHMS)")
	fs.DurationVar(&o.skew, "oauth-clock-skew", oauth.DefaultClockSkew, "how far a token's exp and nbf may be off this clock (env IDEMFLOW_OAUTH_CLOCK_SKEW)")
	fs.DurationVar(&o.keysMaxAge, "oauth-keys-max-age", oauth.DefaultKeysMaxAge, "fetch the issuer's keys again after this long (env IDEMFLOW_OAUTH_KEYS_MAX_AGE)")
	fs.DurationVar(&o.keysGrace, "oauth-keys-grace", oauth.DefaultKeysGrace, "keep using the keys this much longer while the JWKS endpoint does not answer; past it, tokens get 503 (env IDEMFLOW_OAUTH_KEYS_GRACE)")
	fs.DurationVar(&o.keysMinRefresh, "oauth-keys-min-refresh", oauth.DefaultKeysMinRefresh, "a token with an unknown kid fetches the keys again at most this often (env IDEMFLOW_OAUTH_KEYS_MIN_REFRESH)")
	fs.StringVar(&o.tenantClaim, "oauth-tenant-claim", oauth.DefaultTenantClaim, "the claim that holds the tenant; a dotted path reaches into an object, e.g. ext.tenant (env IDEMFLOW_OAUTH_TENANT_CLAIM)")
	fs.StringVar(&o.tenants, "oauth-tenants", "", "tenants of tokens without the claim: client:<client_id>=<tenant> or sub:<subject>=<tenant>, comma-separated (env IDEMFLOW_OAUTH_TENANTS)")
	fs.StringVar(&o.scopePrefix, "oauth-scope-prefix", oauth.DefaultScopePrefix, "what begins each scope idemflow reads: <prefix>call, <prefix>call:<operation>, <prefix>read (env IDEMFLOW_OAUTH_SCOPE_PREFIX)")
	fs.StringVar(&o.clientScopes, "oauth-client-scopes", strings.Join(oauth.DefaultClientScopes, " "), "scopes the resource metadata lists beside idemflow's own, for clients to ask for with them: offline_access gets a host a refresh token; empty: none (env IDEMFLOW_OAUTH_CLIENT_SCOPES)")
	fs.BoolVar(&o.apiTokens, "api-tokens", true, "with --oauth-issuer: also accept idemflow's own API tokens; false: OAuth alone (env IDEMFLOW_API_TOKENS)")
}

// verifier is nil when OAuth is off.
func (o *oauthFlags) verifier(name string) (*oauth.Verifier, error) {
	if o.issuer == "" {
		if o.registered && !o.apiTokens {
			return nil, fmt.Errorf("%w: --api-tokens=false needs --oauth-issuer: nothing else could authenticate", errUsage)
		}
		return nil, nil
	}
	tenants := map[string]string{}
	for part := range strings.SplitSeq(o.tenants, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, t, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("%w: --oauth-tenants: %q: want client:<client_id>=<tenant> or sub:<subject>=<tenant>", errUsage, part)
		}
		tenants[strings.TrimSpace(k)] = strings.TrimSpace(t)
	}
	var algs []string
	for a := range strings.SplitSeq(o.algorithms, ",") {
		if a = strings.TrimSpace(a); a != "" {
			algs = append(algs, a)
		}
	}
	v, err := oauth.New(oauth.Config{
		Issuer: o.issuer, Resource: o.resource, JWKSURL: o.jwks,
		IntrospectionURL: o.introspection, IntrospectionClientID: o.introspectionID, IntrospectionSecret: o.introspectionSecret,
		Algorithms: algs, ClockSkew: o.skew, KeysMaxAge: o.keysMaxAge, KeysGrace: o.keysGrace, KeysMinRefresh: o.keysMinRefresh,
		TenantClaim: o.tenantClaim, Tenants: tenants, ScopePrefix: o.scopePrefix, ResourceName: name,
		ClientScopes: append([]string{}, strings.Fields(o.clientScopes)...),
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errUsage, err)
	}
	return v, nil
}

// mcpSecretUsage is the one variable both sides of the MCP server's
// delegation read.
const mcpSecretUsage = "the secret the gateway and 'idemflow mcp --http' share, with which the MCP server calls the gateway " +
	"for the tenant and scopes of an OAuth token it verified itself (the token is never passed on); at least 32 characters (env IDEMFLOW_MCP_SECRET)"

func checkMCPSecret(s string) error {
	if s != "" && len(s) < 32 {
		return fmt.Errorf("%w: the MCP secret (IDEMFLOW_MCP_SECRET) is shorter than 32 characters", errUsage)
	}
	return nil
}
