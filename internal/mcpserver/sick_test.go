package mcpserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
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
	// lose is how many more answers to an intent (a POST) are lost after
	// the gateway acted on it: the connection is cut before its answer.
	lose atomic.Int32
	// partitioned: every request reaches the gateway, and every answer
	// is lost (the connection cut), until the partition heals.
	partitioned atomic.Bool
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
		if g.partitioned.Load() || r.Method == http.MethodPost && g.lose.Add(-1) >= 0 {
			rec := httptest.NewRecorder()
			rp.ServeHTTP(rec, r)
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				conn.Close()
			}
			return
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
	meta := map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28",
		"io.modelcontextprotocol/clientCapabilities": map[string]any{}, "io.modelcontextprotocol/clientInfo": map[string]any{"name": "raw", "version": "1"}}
	if m, ok := params["_meta"].(map[string]any); ok {
		for k, v := range m {
			meta[k] = v
		}
	}
	params["_meta"] = meta
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	req, _ := http.NewRequest(http.MethodPost, mcpURL, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", method)
	// 2026-07-28 routes by headers: a call names its tool, a task request its task.
	for _, member := range []string{"name", "taskId"} {
		if v, ok := params[member].(string); ok {
			req.Header.Set("Mcp-Name", v)
		}
	}
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
	if !within(15*time.Second, func() bool {
		code, _, _ = post2026(t, withGrace, tokA, "tools/list", map[string]any{})
		return code == http.StatusUnauthorized
	}) {
		t.Fatalf("a revoked token still answered %d after the gateway came back", code)
	}
}

// within reports whether ok came true within d, asking it every 200 ms.
func within(d time.Duration, ok func() bool) bool {
	for end := time.Now().Add(d); !ok(); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(end) {
			return false
		}
	}
	return true
}

// Every wait a caller is promised is a bound while the gateway hangs
// (it holds every request) or is partitioned (it acts on every request,
// and every answer is lost): a call that takes tasks gets its handle
// within --task-wait and TaskSlack (under 2026-07-28's extension and
// 2025-11-25's tasks), and a call that takes none gets NO ANSWER YET
// within --call-wait, in both revisions, in words that name no Go error.
// Once the gateway answers again each task ends with its call's answer,
// one ticket per key, replayed false (the call ran it, however often it
// was sent); another tenant's tasks/get of it finds nothing and sends
// nothing.
func TestEveryWaitIsABoundWhileTheGatewayIsSick(t *testing.T) {
	for _, sickness := range []struct {
		name         string
		sicken, heal func(*sickGateway)
	}{
		{"hung", (*sickGateway).hang, (*sickGateway).heal},
		{"partitioned", func(g *sickGateway) { g.partitioned.Store(true) }, func(g *sickGateway) { g.partitioned.Store(false) }},
	} {
		t.Run(sickness.name, func(t *testing.T) { everyWaitIsABound(t, sickness.sicken, sickness.heal) })
	}
}

func everyWaitIsABound(t *testing.T, sicken, heal func(*sickGateway)) {
	s := testenv.NewStack(t, testenv.Options{})
	sick := newSickGateway(t, s.URL)
	const taskWait, callWait = time.Second, 2 * time.Second
	hs := httptest.NewServer(mcpserver.HTTPHandler(mcpserver.Config{BaseURL: sick.URL, Operations: s.Set.Operations(), TaskWait: taskWait, CallTimeout: callWait},
		mcpserver.HTTPOptions{}))
	t.Cleanup(hs.Close)
	tokA, tokB := s.Tokens[testenv.TenantA], s.Tokens[testenv.TenantB]
	for _, tok := range []string{tokA, tokB} { // verified while the gateway answers
		if code, _, _ := post2026(t, hs.URL, tok, "tools/list", map[string]any{}); code != http.StatusOK {
			t.Fatalf("tools/list: %d", code)
		}
	}
	legacy := testenv.DialMCP(t, hs.URL, tokA)
	sicken(sick)
	const slack = 700 * time.Millisecond
	ticket := func(key string) map[string]any {
		return map[string]any{"idempotency_key": key, "customer_id": "c-" + key, "title": "While the gateway hangs"}
	}

	code, ext, took := post2026(t, hs.URL, tokA, "tools/call", map[string]any{"name": "create_ticket", "arguments": ticket("sick-ext"), "_meta": declared})
	res, _ := ext["result"].(map[string]any)
	t.Logf("2026-07-28 with the extension: %d %v in %s", code, res["resultType"], took.Round(time.Millisecond))
	if code != http.StatusOK || res["resultType"] != "task" || res["taskId"] == nil || took > taskWait+mcpserver.TaskSlack+slack {
		t.Fatalf("a task-mode call while the gateway is sick: %d %+v in %s, want a task within %s", code, ext, took, taskWait+mcpserver.TaskSlack)
	}
	extTask := res["taskId"].(string)

	start := time.Now()
	lres, lerr := legacy.Call("tools/call", map[string]any{"name": "create_ticket", "arguments": ticket("sick-legacy"), "task": map[string]any{}})
	took = time.Since(start)
	lt, _ := lres["task"].(map[string]any)
	t.Logf("2025-11-25 tasks: %v in %s", lt["status"], took.Round(time.Millisecond))
	if lerr != nil || lt["taskId"] == nil || took > taskWait+mcpserver.TaskSlack+slack {
		t.Fatalf("a 2025-11-25 task-mode call while the gateway is sick: %+v %+v in %s", lres, lerr, took)
	}

	code, plain, took := post2026(t, hs.URL, tokA, "tools/call", map[string]any{"name": "create_ticket", "arguments": ticket("sick-plain")})
	pres, _ := plain["result"].(map[string]any)
	t.Logf("a call without tasks: %d in %s: %v", code, took.Round(time.Millisecond), pres["content"])
	if words := fmt.Sprint(pres["content"]); strings.Contains(words, "deadline") {
		t.Errorf("the model reads Go's words for the wait: %s", words)
	}
	if code != http.StatusOK || pres["isError"] != true || !strings.Contains(fmt.Sprint(pres["content"]), "NO ANSWER YET") || took > callWait+slack {
		t.Fatalf("a call without tasks while the gateway is sick: %d %+v in %s, want NO ANSWER YET within %s", code, plain, took, callWait)
	}

	start = time.Now()
	lplain, lerr := legacy.Call("tools/call", map[string]any{"name": "create_ticket", "arguments": ticket("sick-legacy-plain")})
	took = time.Since(start)
	t.Logf("2025-11-25 without tasks: in %s: %v", took.Round(time.Millisecond), lplain["content"])
	if words := fmt.Sprint(lplain["content"]); lerr != nil || lplain["isError"] != true || !strings.Contains(words, "NO ANSWER YET") || strings.Contains(words, "deadline") || took > callWait+slack {
		t.Fatalf("a 2025-11-25 call without tasks while the gateway is sick: %+v %+v in %s, want NO ANSWER YET within %s", lplain, lerr, took, callWait)
	}

	// Another tenant reads A's task: nothing, and nothing sent.
	if _, other, _ := post2026(t, hs.URL, tokB, "tasks/get", map[string]any{"taskId": extTask, "_meta": declared}); other["error"] == nil {
		t.Fatalf("tenant B read A's task: %+v", other)
	}

	heal(sick)
	for key, read := range map[string]func() map[string]any{
		"sick-ext": func() map[string]any {
			_, got, _ := post2026(t, hs.URL, tokA, "tasks/get", map[string]any{"taskId": extTask, "_meta": declared})
			r, _ := got["result"].(map[string]any)
			return r
		},
		"sick-legacy": func() map[string]any {
			got, _ := legacy.Call("tasks/get", map[string]any{"taskId": lt["taskId"]})
			return got
		},
	} {
		var got map[string]any
		if !within(60*time.Second, func() bool { got = read(); return got["status"] == "completed" }) {
			t.Fatalf("%s: the task is still %+v", key, got)
		}
		if n := testenv.Count(t, s.Pool, "ticket", "customer_id = $1", "c-"+key); n != 1 {
			t.Fatalf("%s: %d tickets", key, n)
		}
	}
	// Each task's answer is its own call's, which ran the intent however
	// many times it was sent: not a replay.
	_, got, _ := post2026(t, hs.URL, tokA, "tasks/get", map[string]any{"taskId": extTask, "_meta": declared})
	r, _ := got["result"].(map[string]any)
	lout, lerr := legacy.Call("tasks/result", map[string]any{"taskId": lt["taskId"]})
	for name, res := range map[string]any{"the extension's task": r["result"], "the 2025-11-25 task": lout} {
		m, _ := res.(map[string]any)
		if sc, _ := m["structuredContent"].(map[string]any); sc["replayed"] != false {
			t.Errorf("%s: %+v %v, want its call's answer, replayed false", name, res, lerr)
		}
	}
	if n := testenv.Count(t, s.Pool, "ticket", "tenant_id = $1", testenv.TenantB); n != 0 {
		t.Fatalf("tenant B has %d tickets", n)
	}
}

// The call that ran the intent is told so, however many attempts it took:
// the gateway acts on the first attempt and its answer is lost (the
// connection cut), the MCP server sends the call again under its key, and
// the answer it gets is the first one with replayed false, for a call
// without tasks, a task of the extension and a 2025-11-25 task alike. The
// model's own retry of the call, another call under the same key, is the
// replay. One ticket each.
func TestTheCallThatRanTheIntentIsNotAReplayAfterItsAnswerWasLost(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	sick := newSickGateway(t, s.URL)
	hs := httptest.NewServer(mcpserver.HTTPHandler(mcpserver.Config{BaseURL: sick.URL, Operations: s.Set.Operations(), TaskWait: 5 * time.Second},
		mcpserver.HTTPOptions{}))
	t.Cleanup(hs.Close)
	tok := s.Tokens[testenv.TenantA]
	legacy := testenv.DialMCP(t, hs.URL, tok)
	ticket := func(key string) map[string]any {
		return map[string]any{"idempotency_key": key, "customer_id": "c-" + key, "title": "Its answer was lost"}
	}
	replayed := func(result any) any {
		r, _ := result.(map[string]any)
		sc, _ := r["structuredContent"].(map[string]any)
		return sc["replayed"]
	}
	calls := map[string]func(key string) any{
		"a call without tasks (2026-07-28)": func(key string) any {
			_, msg, _ := post2026(t, hs.URL, tok, "tools/call", map[string]any{"name": "create_ticket", "arguments": ticket(key)})
			return replayed(msg["result"])
		},
		"a task of the extension (2026-07-28)": func(key string) any {
			_, msg, _ := post2026(t, hs.URL, tok, "tools/call", map[string]any{"name": "create_ticket", "arguments": ticket(key), "_meta": declared})
			r, _ := msg["result"].(map[string]any)
			if r["resultType"] == "task" {
				id := r["taskId"]
				within(30*time.Second, func() bool {
					_, got, _ := post2026(t, hs.URL, tok, "tasks/get", map[string]any{"taskId": id, "_meta": declared})
					r, _ = got["result"].(map[string]any)
					return r["status"] != "working"
				})
				return replayed(r["result"])
			}
			return replayed(r)
		},
		"a 2025-11-25 task": func(key string) any {
			res, err := legacy.Call("tools/call", map[string]any{"name": "create_ticket", "arguments": ticket(key), "task": map[string]any{}})
			tk, _ := res["task"].(map[string]any)
			if err != nil || tk["taskId"] == nil {
				t.Fatalf("2025-11-25 task-mode call: %+v %+v", res, err)
			}
			out, err := legacy.Call("tasks/result", map[string]any{"taskId": tk["taskId"]})
			if err != nil {
				t.Fatalf("tasks/result: %+v", err)
			}
			return replayed(out)
		},
	}
	n := 0
	for name, call := range calls {
		n++
		key := fmt.Sprintf("lost-answer-%d", n)
		sick.lose.Store(1)
		first := call(key)
		if left := sick.lose.Load(); left >= 1 {
			t.Fatalf("%s: no answer was lost (%d left to lose)", name, left)
		}
		again := call(key) // the model calls again, under the same key
		t.Logf("%s: the call that ran it: replayed %v; the model's retry: replayed %v", name, first, again)
		if first != false || again != true {
			t.Errorf("%s: replayed %v for the call that ran the intent (want false), %v for the model's retry (want true)", name, first, again)
		}
		if c := testenv.Count(t, s.Pool, "ticket", "customer_id = $1", "c-"+key); c != 1 {
			t.Errorf("%s: %d tickets", name, c)
		}
	}
}
