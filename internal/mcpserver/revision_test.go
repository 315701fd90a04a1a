package mcpserver_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemflow/idemflow/internal/mcpserver"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
)

// The released revision's error contract (2026-07-28 and the Tasks
// extension, as @modelcontextprotocol/conformance 0.2.0-alpha.12 checks
// it), while a 2025-11-25 session keeps what it has: the extension's
// methods from a client that did not declare it are -32021 (over HTTP a
// 400), tasks/result is gone (-32601), tasks/list is a JSON-RPC error in
// both, a taskId of another type is refused in the protocol's words, and
// the discover result declares the prompts it serves.
func TestTheReleasedRevisionsTaskErrorsAreItsOwn(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{NoWorker: true})
	hs := httptest.NewServer(mcpserver.HTTPHandler(mcpserver.Config{BaseURL: s.URL, Operations: s.Set.Operations()}, mcpserver.HTTPOptions{}))
	t.Cleanup(hs.Close)
	tok := s.Tokens[testenv.TenantA]
	code := func(msg map[string]any) float64 {
		e, _ := msg["error"].(map[string]any)
		c, _ := e["code"].(float64)
		return c
	}
	for _, tt := range []struct {
		method   string
		declared bool
		params   map[string]any
		status   int
		code     float64
	}{
		{"tasks/get", false, map[string]any{"taskId": "anything"}, http.StatusBadRequest, -32021},
		{"tasks/update", false, map[string]any{"taskId": "anything"}, http.StatusBadRequest, -32021},
		{"tasks/cancel", false, map[string]any{"taskId": "anything"}, http.StatusBadRequest, -32021},
		// 2026-07-28 over HTTP gives each error its status: 404 for a
		// method it does not have, 400 for params.
		{"tasks/result", true, map[string]any{"taskId": "anything"}, http.StatusNotFound, -32601},
		{"tasks/list", true, map[string]any{}, http.StatusNotFound, -32601},
		{"tasks/update", true, map[string]any{"taskId": "anything"}, http.StatusBadRequest, -32602},
		{"tasks/get", true, map[string]any{"taskId": 42}, http.StatusBadRequest, -32602},
		{"tasks/get", true, map[string]any{"taskId": "no-such-task"}, http.StatusBadRequest, -32602},
	} {
		if tt.declared {
			tt.params["_meta"] = declared
		}
		status, msg, _ := post2026(t, hs.URL, tok, tt.method, tt.params)
		e, _ := msg["error"].(map[string]any)
		text, _ := e["message"].(string)
		t.Logf("2026-07-28 %s (declared %v): %d %v %q", tt.method, tt.declared, status, code(msg), text)
		if status != tt.status || code(msg) != tt.code {
			t.Errorf("2026-07-28 %s (declared %v): HTTP %d, %+v; want HTTP %d, code %v", tt.method, tt.declared, status, msg, tt.status, tt.code)
		}
		// The revision's schema requires -32021 to name what is missing.
		data, _ := e["data"].(map[string]any)
		required, _ := data["requiredCapabilities"].(map[string]any)
		exts, _ := required["extensions"].(map[string]any)
		if _, ok := exts[mcpserver.ExtensionTasks]; tt.code == -32021 && !ok {
			t.Errorf("2026-07-28 %s: -32021 without data.requiredCapabilities naming the extension: %+v", tt.method, e)
		}
		for _, internal := range []string{"Go ", "struct", "unmarshal", "json:"} {
			if strings.Contains(text, internal) {
				t.Errorf("%s: the error names an internal type: %q", tt.method, text)
			}
		}
	}
	status, disc, _ := post2026(t, hs.URL, tok, "server/discover", map[string]any{})
	res, _ := disc["result"].(map[string]any)
	caps, _ := res["capabilities"].(map[string]any)
	if status != http.StatusOK || caps["prompts"] == nil {
		t.Errorf("server/discover: %d %+v, want prompts declared", status, disc)
	}

	// 2025-11-25: tasks/get and tasks/result as before, and neither
	// tasks/update nor tasks/list.
	legacy := testenv.DialMCP(t, hs.URL, tok)
	for method, want := range map[string]int{"tasks/get": -32602, "tasks/result": -32602, "tasks/update": -32601, "tasks/list": -32601} {
		if _, e := legacy.Call(method, map[string]any{"taskId": "no-such-task"}); e == nil || e.Code != want {
			t.Errorf("2025-11-25 %s: %+v, want %d", method, e, want)
		}
	}
}
