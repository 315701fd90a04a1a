package testenv

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
)

// Hydra is a real Ory Hydra (the version internal/tooling/hydra pins) on a
// database of its own on the tests' PostgreSQL, with a login and consent
// app of the tests' own that signs every user in at once: a browser's
// steps, driven headlessly.
type Hydra struct {
	// Issuer is the public URL (its token, authorization and discovery
	// endpoints); Admin the admin API's.
	Issuer, Admin string
	// Users maps a subject the login app signs in to the tenant its
	// consent puts in the access token (claim ext.tenant).
	Users map[string]string
	// Subject is who the login app signs in.
	Subject string
	bin     string
	dsn     string
	t       testing.TB
}

// HydraOptions tune the server.
type HydraOptions struct {
	// AccessTokenTTL is how long access tokens live (Hydra's default: 1h).
	AccessTokenTTL time.Duration
	// Users: see Hydra.Users; Subject: see Hydra.Subject.
	Users   map[string]string
	Subject string
}

// HydraBinary returns bin/hydra, built from internal/tooling/hydra's
// module (scripts/test.sh's build_hydra builds it first). A binary whose
// stamp (bin/.hydra-version: the module's go.sum digest) is not the
// module's is built again, into a temporary file renamed into place, so
// that packages testing at once never run a half-written one.
func HydraBinary(t testing.TB) string {
	t.Helper()
	root := repoRoot(t)
	module := filepath.Join(root, "internal", "tooling", "hydra")
	bin := filepath.Join(root, "bin", "hydra")
	sum, err := os.ReadFile(filepath.Join(module, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%x", sha256.Sum256(sum))
	stamp := filepath.Join(root, "bin", ".hydra-version")
	if got, err := os.ReadFile(stamp); err == nil && strings.TrimSpace(string(got)) == want {
		if _, err := os.Stat(bin); err == nil {
			return bin
		}
	}
	tmp, err := os.CreateTemp(filepath.Dir(bin), ".hydra-*")
	if err != nil {
		t.Fatal(err)
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	cmd := exec.Command("go", "build", "-o", tmp.Name(), "github.com/ory/hydra/v2")
	cmd.Dir = module
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("testenv: build Ory Hydra (internal/tooling/hydra): %v\n%s", err, out)
	}
	if err := os.Rename(tmp.Name(), bin); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stamp, []byte(want+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return bin
}

func repoRoot(t testing.TB) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "internal", "tooling", "hydra", "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("testenv: no idemflow checkout above the working directory")
		}
		dir = parent
	}
}

// StartHydra migrates a fresh database and serves Hydra on it until the
// test ends.
func StartHydra(t testing.TB, opts HydraOptions) *Hydra {
	t.Helper()
	h := &Hydra{bin: HydraBinary(t), dsn: EmptyDatabase(t), t: t, Users: opts.Users, Subject: opts.Subject}
	if h.Subject == "" {
		h.Subject = "alice"
	}
	if out, err := h.command("migrate", "sql", "up", "-e", "--yes").CombinedOutput(); err != nil {
		t.Fatalf("testenv: hydra migrate: %v\n%s", err, out)
	}
	app := httptest.NewServer(http.HandlerFunc(h.loginConsent))
	t.Cleanup(app.Close)
	public, admin := FreePort(t), FreePort(t)
	h.Issuer = fmt.Sprintf("http://127.0.0.1:%d/", public)
	h.Admin = fmt.Sprintf("http://127.0.0.1:%d", admin)
	ttl := opts.AccessTokenTTL
	if ttl <= 0 {
		ttl = time.Hour
	}
	cmd := h.command("serve", "all", "--dev")
	cmd.Env = append(cmd.Env,
		"URLS_SELF_ISSUER="+h.Issuer,
		"URLS_LOGIN="+app.URL+"/login",
		"URLS_CONSENT="+app.URL+"/consent",
		fmt.Sprintf("SERVE_PUBLIC_PORT=%d", public), "SERVE_PUBLIC_HOST=127.0.0.1",
		fmt.Sprintf("SERVE_ADMIN_PORT=%d", admin), "SERVE_ADMIN_HOST=127.0.0.1",
		"SECRETS_SYSTEM=idemflow-tests-hydra-system-secret",
		"STRATEGIES_ACCESS_TOKEN=jwt",
		"OIDC_DYNAMIC_CLIENT_REGISTRATION_ENABLED=true",
		// Hydra serves registration at /oauth2/register, but names it in
		// its discovery document only when told where it is.
		"WEBFINGER_OIDC_DISCOVERY_CLIENT_REGISTRATION_URL="+h.Issuer+"oauth2/register",
		"OIDC_DYNAMIC_CLIENT_REGISTRATION_DEFAULT_SCOPE=openid,offline_access,offline,idemflow:call,idemflow:read",
		"TTL_ACCESS_TOKEN="+ttl.String(),
		"LOG_LEVEL=warn")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(h.Issuer + ".well-known/openid-configuration")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return h
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("testenv: hydra did not serve its discovery document in 60 s: %v\n%s", err, out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (h *Hydra) command(args ...string) *exec.Cmd {
	cmd := exec.Command(h.bin, args...)
	cmd.Env = append(os.Environ(), "DSN="+h.dsn)
	return cmd
}

// Client is an OAuth client registered at the admin API.
type Client struct {
	ID, Secret string
}

// CreateClient registers a client (Hydra's admin API, POST
// /admin/clients) with the given metadata; the answer's ID and secret.
func (h *Hydra) CreateClient(meta map[string]any) Client {
	h.t.Helper()
	var out struct {
		ID     string `json:"client_id"`
		Secret string `json:"client_secret"`
	}
	h.adminJSON(http.MethodPost, "/admin/clients", meta, &out)
	return Client{ID: out.ID, Secret: out.Secret}
}

// ClientCredentials gets an access token for a client_credentials
// client, for audience and scope.
func (h *Hydra) ClientCredentials(c Client, audience, scope string) string {
	h.t.Helper()
	form := url.Values{"grant_type": {"client_credentials"}, "client_id": {c.ID}, "client_secret": {c.Secret}, "scope": {scope}}
	if audience != "" {
		form.Set("audience", audience)
	}
	resp, err := http.PostForm(h.Issuer+"oauth2/token", form)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &tok) != nil || tok.AccessToken == "" {
		h.t.Fatalf("testenv: hydra token for %s: HTTP %d %s", c.ID, resp.StatusCode, body)
	}
	return tok.AccessToken
}

// Revoke revokes a token of client c (RFC 7009).
func (h *Hydra) Revoke(c Client, token string) {
	h.t.Helper()
	resp, err := http.PostForm(h.Issuer+"oauth2/revoke", url.Values{"token": {token}, "client_id": {c.ID}, "client_secret": {c.Secret}})
	if err != nil {
		h.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		h.t.Fatalf("testenv: hydra revoke: HTTP %d", resp.StatusCode)
	}
}

// IntrospectionURL is the admin API's RFC 7662 endpoint.
func (h *Hydra) IntrospectionURL() string { return h.Admin + "/admin/oauth2/introspect" }

func (h *Hydra) adminJSON(method, path string, in, out any) {
	h.t.Helper()
	if err := h.admin(method, path, in, out); err != nil {
		h.t.Fatal(err)
	}
}

func (h *Hydra) admin(method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, h.Admin+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("hydra %s %s: HTTP %d %s", method, path, resp.StatusCode, b)
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// loginConsent is the tests' login and consent app: it signs Subject in
// and grants every scope asked for, the audience the client's resource
// indicator (RFC 8707) names, and the subject's tenant as a claim of the
// access token. Hydra knows audiences, not resource indicators: a
// consent app that grants the resource as the audience is how Hydra is
// told to honour them.
func (h *Hydra) loginConsent(w http.ResponseWriter, r *http.Request) {
	var redirect struct {
		To string `json:"redirect_to"`
	}
	var err error
	switch r.URL.Path {
	case "/login":
		ch := url.QueryEscape(r.URL.Query().Get("login_challenge"))
		err = h.admin(http.MethodPut, "/admin/oauth2/auth/requests/login/accept?login_challenge="+ch,
			map[string]any{"subject": h.Subject, "remember": false}, &redirect)
	case "/consent":
		ch := url.QueryEscape(r.URL.Query().Get("consent_challenge"))
		var req struct {
			Scopes   []string `json:"requested_scope"`
			Audience []string `json:"requested_access_token_audience"`
			URL      string   `json:"request_url"`
			Subject  string   `json:"subject"`
			Client   struct {
				ID       string   `json:"client_id"`
				Audience []string `json:"audience"`
			} `json:"client"`
		}
		if err = h.admin(http.MethodGet, "/admin/oauth2/auth/requests/consent?consent_challenge="+ch, nil, &req); err != nil {
			break
		}
		audience := req.Audience
		if u, perr := url.Parse(req.URL); perr == nil {
			audience = append(audience, u.Query()["resource"]...)
		}
		// Hydra checks a refresh's audience against the client's
		// allowed ones: the resource granted here is added to them.
		allowed := append(req.Client.Audience, audience...)
		if err = h.admin(http.MethodPatch, "/admin/clients/"+url.PathEscape(req.Client.ID),
			[]map[string]any{{"op": "add", "path": "/audience", "value": allowed}}, nil); err != nil {
			break
		}
		err = h.admin(http.MethodPut, "/admin/oauth2/auth/requests/consent/accept?consent_challenge="+ch, map[string]any{
			"grant_scope": req.Scopes, "grant_access_token_audience": audience, "remember": false,
			"session": map[string]any{"access_token": map[string]any{"tenant": h.Users[req.Subject]}},
		}, &redirect)
	default:
		http.NotFound(w, r)
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	http.Redirect(w, r, redirect.To, http.StatusFound)
}

// Authorize follows an authorization URL the way a browser would, through
// the login and consent app, to the client's redirect URI, and returns
// that final URL (its code and state), which it does not fetch.
func (h *Hydra) Authorize(authURL, redirectURI string) (*url.URL, error) {
	jar, err := cookiejar.New(nil)
	if err != nil {
		return nil, err
	}
	var final *url.URL
	hc := &http.Client{Jar: jar, CheckRedirect: func(req *http.Request, _ []*http.Request) error {
		if strings.HasPrefix(req.URL.String(), redirectURI) {
			final = req.URL
			return http.ErrUseLastResponse
		}
		return nil
	}}
	resp, err := hc.Get(authURL)
	if err != nil {
		return nil, err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if final == nil {
		return nil, fmt.Errorf("the authorization ended at %s (HTTP %d) without reaching %s: %s", resp.Request.URL, resp.StatusCode, redirectURI, body)
	}
	return final, nil
}

// SigningKey is the private key Hydra signs access tokens with (its
// admin API serves it): a test signs with it the tokens Hydra would not
// issue (expired, for another issuer), so that each differs from a good
// one in the one claim under test.
func (h *Hydra) SigningKey() jose.JSONWebKey {
	h.t.Helper()
	var set jose.JSONWebKeySet
	h.adminJSON(http.MethodGet, "/admin/keys/hydra.jwt.access-token", nil, &set)
	for _, k := range set.Keys {
		if !k.IsPublic() && k.Use != "enc" {
			return k
		}
	}
	h.t.Fatal("testenv: hydra serves no private signing key for access tokens")
	return jose.JSONWebKey{}
}

// RotateKeys makes Hydra sign access tokens with a new key (its admin
// API: a new key in the set, which it signs with from then on).
func (h *Hydra) RotateKeys() {
	h.t.Helper()
	h.adminJSON(http.MethodPost, "/admin/keys/hydra.jwt.access-token", map[string]any{"alg": "RS256", "use": "sig"}, nil)
}
