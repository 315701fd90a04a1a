package mcpserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemflow/idemflow/internal/mcpserver"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
)

// sickGateway stands between an MCP server and the real gateway: it
// passes requests on, or holds each one (a hung gateway) until the
// request is given up or the sickness ends.
type sickGateway struct {
	URL  string
	hung atomic.Bool
	cure chan struct{}
}

func newSickGateway(t *testing.T, gateway string) *sickGateway {
	t.Helper()
	target, _ := url.Parse(gateway)
	rp := httputil.NewSingleHostReverseProxy(target)
	g := &sickGateway{cure: make(chan struct{})}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g.hung.Load() {
			select {
			case <-r.Context().Done():
				return
			case <-g.cure:
			}
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { g.heal(); hs.Close() })
	g.URL = hs.URL
	return g
}

func (g *sickGateway) hang() { g.hung.Store(true); g.cure = make(chan struct{}) }

func (g *sickGateway) heal() {
	if g.hung.Swap(false) {
		close(g.cure)
	}
}

// post2026 sends one MCP 2026-07-28 request (no session) and returns the
// HTTP status, the JSON-RPC message and how long it took.
func post2026(t *testing.T, mcpURL, token, method string, params map[string]any) (int, map[string]any, time.Duration) {
	t.Helper()
	params["_meta"] = map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28",
		"io.modelcontextprotocol/clientCapabilities": map[string]any{}, "io.modelcontextprotocol/clientInfo": map[string]any{"name": "raw", "version": "1"}}
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	req, _ := http.NewRequest(http.MethodPost, mcpURL, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", method)
	req.Header.Set("Authorization", "Bearer "+token)
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	took := time.Since(start)
	var msg map[string]any
	if i := bytes.Index(body, []byte("data: ")); i >= 0 {
		body = bytes.TrimSpace(body[i+len("data: "):])
	}
	_ = json.Unmarshal(body, &msg)
	return resp.StatusCode, msg, took
}

// A token the gateway verified stays good while the gateway hangs, for
// the grace, and a verification holds no request longer than
// VerifyTimeout: tools/list is answered, not a 503 a framework hands to
// the model. A token never verified gets the 503 within the same bound;
// a token the gateway refuses is refused once it answers again. Without
// the grace (the control), the same request is the 503.
func TestATokenVerifiedRecentlyStaysGoodWhileTheGatewayHangs(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{NoWorker: true})
	sick := newSickGateway(t, s.URL)
	serve := func(grace time.Duration) string {
		hs := httptest.NewServer(mcpserver.HTTPHandler(mcpserver.Config{BaseURL: sick.URL, Operations: s.Set.Operations()},
			mcpserver.HTTPOptions{VerifyTTL: 200 * time.Millisecond, VerifyTimeout: 500 * time.Millisecond, VerifyGrace: grace}))
		t.Cleanup(hs.Close)
		return hs.URL
	}
	withGrace, without := serve(0), serve(-1)
	tokA := s.Tokens[testenv.TenantA]
	for _, u := range []string{withGrace, without} {
		if code, msg, _ := post2026(t, u, tokA, "tools/list", map[string]any{}); code != http.StatusOK || msg["result"] == nil {
			t.Fatalf("tools/list with a healthy gateway: %d %+v", code, msg)
		}
	}
	sick.hang()
	time.Sleep(300 * time.Millisecond) // past VerifyTTL: the token is asked about again
	const bound = 500*time.Millisecond + 700*time.Millisecond
	code, msg, took := post2026(t, withGrace, tokA, "tools/list", map[string]any{})
	t.Logf("a verified token while the gateway hangs: %d in %s", code, took.Round(time.Millisecond))
	if code != http.StatusOK || msg["result"] == nil || took > bound {
		t.Fatalf("tools/list while the gateway hangs: %d %+v in %s, want its answer within %s", code, msg, took, bound)
	}
	code, _, took = post2026(t, withGrace, "idf_never_verified_token_x", "tools/list", map[string]any{})
	if code != http.StatusServiceUnavailable || took > bound {
		t.Fatalf("a token never verified while the gateway hangs: %d in %s, want 503 within %s", code, took, bound)
	}
	if code, _, _ := post2026(t, without, tokA, "tools/list", map[string]any{}); code != http.StatusServiceUnavailable {
		t.Fatalf("without the grace: %d, want the 503 the grace prevents", code)
	}

	// Revoked while the gateway hangs: refused once the gateway answers
	// again, within the gateway's own memory of it.
	if _, err := s.Pool.Exec(context.Background(), `UPDATE api_token SET revoked_at = now() WHERE tenant_id = $1`, testenv.TenantA); err != nil {
		t.Fatal(err)
	}
	sick.heal()
	deadline := time.Now().Add(15 * time.Second)
	for {
		code, _, _ := post2026(t, withGrace, tokA, "tools/list", map[string]any{})
		if code == http.StatusUnauthorized {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a revoked token still answered %d after the gateway came back", code)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
