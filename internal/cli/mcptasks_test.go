//go:build !nodev

package cli_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemflow/idemflow/internal/tooling/testenv"
)

// heldService is a keyed refund API that holds every call until released,
// then makes one refund per Idempotency-Key, whatever how often it is
// called: the downstream of an MCP task that stays working as long as the
// test needs.
type heldService struct {
	release chan struct{}
	mu      sync.Mutex
	refunds map[string]int
	calls   atomic.Int32
}

func (h *heldService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	h.calls.Add(1)
	select {
	case <-h.release:
	case <-r.Context().Done():
		return // the caller died: nothing was done
	}
	key := r.Header.Get("Idempotency-Key")
	h.mu.Lock()
	if _, ok := h.refunds[key]; !ok {
		h.refunds[key] = len(h.refunds) + 1
	}
	id := h.refunds[key]
	h.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"id":"re_%d","status":"succeeded"}`, id)
}

// A task made on one MCP replica (idemflow mcp --http, a process of its
// own) is answered by another after the first is SIGKILLed and after
// idemflow dev is SIGKILLed and started again, and never to another
// tenant: the task is the intent's record, not anything in a process. A
// partition between a replica and the gateway longer than the task wait
// ends with one ticket and a completed task.
func TestAnMCPTaskOutlivesItsReplicaAndARestartOfDev(t *testing.T) {
	pool, dbURL := testenv.Pool(t)
	dbURL = withPoolParams(dbURL)
	held := &heldService{release: make(chan struct{}), refunds: map[string]int{}}
	down := httptest.NewServer(held)
	t.Cleanup(down.Close)
	dir := t.TempDir()
	tools := filepath.Join(dir, "tools.yaml")
	if err := os.WriteFile(tools, fmt.Appendf(nil, `tools:
  - name: held_refund
    description: Refund part of a payment.
    input_schema: {type: object, required: [payment_id, amount_cents], properties: {payment_id: {type: string}, amount_cents: {type: integer}}}
    call: {method: POST, url: %q, key_header: Idempotency-Key, timeout: 5s}
`, down.URL+"/refunds"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--data-dir", filepath.Join(dir, "data"), "--http-addr", fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)), "--temporal-store", "sqlite",
		"--temporal-port", fmt.Sprint(testenv.FreePort(t)), "--ui-port", fmt.Sprint(testenv.FreePort(t)), "--reconcile-interval", "1m", "--tools", tools}
	dev := startDev(t, dbURL, args...)
	dev.WaitUp(t, 2*time.Minute)
	env := readEnvFile(t, filepath.Join(dir, "data", "dev.env"))
	base, token := env["IDEMFLOW_URL"], env["IDEMFLOW_TOKEN"]
	code, out := run(t, "token", "--tenant", "mcp-tasks-other", "--database-url", dbURL)
	if code != 0 {
		t.Fatalf("another tenant's token: %s", out)
	}
	other := strings.TrimSpace(out)

	replica := func(gateway string) (*child, string) {
		t.Helper()
		addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
		c := startChild(t, dbURL, "point clients at this URL", "mcp", "--http", addr, "--url", gateway, "--tools", tools, "--call-wait", "30s")
		c.WaitUp(t, time.Minute)
		return c, "http://" + addr + "/"
	}
	a, aURL := replica(base)
	_, bURL := replica(base)
	declared := map[string]any{"io.modelcontextprotocol/clientCapabilities": map[string]any{
		"extensions": map[string]any{"io.modelcontextprotocol/tasks": map[string]any{}}}}
	withDecl := func(p map[string]any) map[string]any { p["_meta"] = declared; return p }

	refund := map[string]any{"idempotency_key": "mcp-task-held", "payment_id": "pay-held", "amount_cents": 100}
	created, e := testenv.DialMCP(t, aURL, token).Call("tools/call", withDecl(map[string]any{"name": "held_refund", "arguments": refund}))
	if e != nil || created["resultType"] != "task" || created["status"] != "working" {
		t.Fatalf("the call on replica A: %+v %+v", created, e)
	}
	id, _ := created["taskId"].(string)
	t.Logf("task %s on replica A", id)
	if got, e := testenv.DialMCP(t, bURL, other).Call("tasks/get", withDecl(map[string]any{"taskId": id})); e == nil || e.Code != -32602 {
		t.Fatalf("another tenant's tasks/get on replica B: %+v %+v", got, e)
	}

	// Replica A dies; B answers.
	if err := a.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-a.Done
	b := testenv.DialMCP(t, bURL, token)
	if got, e := b.Call("tasks/get", withDecl(map[string]any{"taskId": id})); e != nil || got["status"] != "working" {
		t.Fatalf("tasks/get on B after A was SIGKILLed: %+v %+v", got, e)
	}

	// dev dies mid call and starts again on the same data; the task is
	// still the intent's, and B still answers it.
	if err := dev.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-dev.Done
	dev = startDev(t, dbURL, args...)
	dev.WaitUp(t, 2*time.Minute)
	if got, e := b.Call("tasks/get", withDecl(map[string]any{"taskId": id})); e != nil || got["status"] != "working" {
		t.Fatalf("tasks/get on B after dev restarted: %+v %+v", got, e)
	}
	close(held.release)
	done := waitTask(t, b, id, declared)
	res, _ := done["result"].(map[string]any)
	sc, _ := res["structuredContent"].(map[string]any)
	if done["status"] != "completed" || res["isError"] == true || sc["http_status"] != float64(201) || sc["replayed"] != false {
		t.Fatalf("the task's end: %+v", done)
	}
	held.mu.Lock()
	refunds := len(held.refunds)
	held.mu.Unlock()
	t.Logf("task %s completed on B after A's SIGKILL and dev's restart: %d refund, %d calls at the service", id, refunds, held.calls.Load())
	if refunds != 1 {
		t.Fatalf("%d refunds at the service", refunds)
	}

	// A partition between replica C and the gateway, longer than the task
	// wait: every request goes through, every answer is lost, for 4 s,
	// once C's session is open.
	var partitioned atomic.Bool
	target, _ := url.Parse(base)
	rp := httputil.NewSingleHostReverseProxy(target)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !partitioned.Load() {
			rp.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		rp.ServeHTTP(rec, r) // it takes effect; its answer is lost
		panic(http.ErrAbortHandler)
	}))
	t.Cleanup(proxy.Close)
	_, cURL := replica(proxy.URL)
	c := testenv.DialMCP(t, cURL, token)
	partitioned.Store(true)
	time.AfterFunc(4*time.Second, func() { partitioned.Store(false) })
	ticket := map[string]any{"idempotency_key": "mcp-task-partition", "customer_id": "c-mcp-partition", "title": "Across a partition"}
	start := time.Now()
	legacy, e := c.Call("tools/call", map[string]any{"name": "create_ticket", "arguments": ticket, "task": map[string]any{}})
	t.Logf("an answer after %s across the partition", time.Since(start).Round(time.Millisecond))
	lt, _ := legacy["task"].(map[string]any)
	if e != nil || lt["taskId"] == nil {
		t.Fatalf("the call across the partition: %+v %+v", legacy, e)
	}
	if end := waitTask(t, b, lt["taskId"].(string), nil); end["status"] != "completed" {
		t.Fatalf("the partitioned call's task: %+v", end)
	}
	if n := testenv.Count(t, pool, "ticket", "customer_id = 'c-mcp-partition'"); n != 1 {
		t.Fatalf("%d tickets across the partition", n)
	}
}

// waitTask polls tasks/get until the task has ended.
func waitTask(t *testing.T, c *testenv.RawMCP, id string, meta map[string]any) map[string]any {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		p := map[string]any{"taskId": id}
		if meta != nil {
			p["_meta"] = meta
		}
		got, e := c.Call("tasks/get", p)
		if e == nil && got["status"] != "working" {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s still working: %+v %+v", id, got, e)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
