package oauth

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// Headers idemflow's MCP server sends to the gateway, with the secret
// they share as its bearer token, to act for the principal of an OAuth
// token it verified itself: the tenant, and the scopes without prefix.
const (
	HeaderActingTenant = "Idemflow-Acting-Tenant"
	HeaderActingScopes = "Idemflow-Acting-Scopes"
)

// WellKnown is where Protected Resource Metadata is served (RFC 9728 §3).
const WellKnown = "/.well-known/oauth-protected-resource"

// MetadataURL is where a client finds the metadata of resource: the
// well-known path inserted between the URI's host and its path.
func MetadataURL(resource string) string {
	u, err := url.Parse(resource)
	if err != nil {
		return ""
	}
	path := strings.TrimRight(u.Path, "/")
	return u.Scheme + "://" + u.Host + WellKnown + path
}

// MetadataPaths are the paths to serve the metadata at: the path-suffixed
// one RFC 9728 names and, for a client that looks only at the root, the
// root one.
func MetadataPaths(resource string) []string {
	u, err := url.Parse(resource)
	if err != nil {
		return []string{WellKnown}
	}
	paths := []string{WellKnown}
	if p := strings.TrimRight(u.Path, "/"); p != "" {
		paths = append(paths, WellKnown+p)
	}
	return paths
}

// MetadataHandler serves this resource's metadata; operations name the
// per-operation scopes it lists.
func (v *Verifier) MetadataHandler(operations []string) http.Handler {
	return auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
		Resource:               v.cfg.Resource,
		AuthorizationServers:   []string{v.cfg.Issuer},
		ScopesSupported:        append(v.Scopes(operations), v.cfg.ClientScopes...),
		BearerMethodsSupported: []string{"header"},
		ResourceName:           v.cfg.ResourceName,
		ResourceDocumentation:  v.cfg.Documentation,
	})
}

// Challenge is the WWW-Authenticate value of a refusal: errCode is ""
// (no token), "invalid_token" or "insufficient_scope" (RFC 6750 §3), and
// scope the scopes the request needs. A verifier (nil for idemflow's
// static tokens alone) adds where its metadata is.
func (v *Verifier) Challenge(errCode, description, scope string) string {
	parts := []string{`Bearer realm="idemflow"`}
	if v != nil {
		parts = append(parts, fmt.Sprintf("resource_metadata=%q", MetadataURL(v.cfg.Resource)))
	}
	if errCode != "" {
		parts = append(parts, fmt.Sprintf("error=%q", errCode))
	}
	if description != "" {
		parts = append(parts, fmt.Sprintf("error_description=%q", strings.ReplaceAll(description, `"`, "'")))
	}
	if scope != "" {
		parts = append(parts, fmt.Sprintf("scope=%q", scope))
	}
	return strings.Join(parts, ", ")
}
