package mcpserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/internal/mcpserver"
	"github.com/idemflow/idemflow/internal/problem"
	"github.com/idemflow/idemflow/internal/tooling/modeltext"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// declared is the _meta by which a 2026-07-28 request declares the Tasks
// extension.
var declared = map[string]any{"io.modelcontextprotocol/clientCapabilities": map[string]any{
	"extensions": map[string]any{mcpserver.ExtensionTasks: map[string]any{}}}}

func withMeta(p map[string]any, meta map[string]any) map[string]any {
	p["_meta"] = meta
	return p
}

// toolResult reads a CallToolResult's structured content.
func toolResult(t *testing.T, res any) (testenv.ToolResult, bool) {
	t.Helper()
	b, _ := json.Marshal(res)
	var r struct {
		IsError           bool               `json:"isError"`
		StructuredContent testenv.ToolResult `json:"structuredContent"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r.StructuredContent, r.IsError
}

// A tools/call from a client that takes tasks, whose answer has not come
// within the task wait, is answered with a task: a handle that names the
// intent's record. Any MCP process answers it (here another, after the
// first is gone), never to another tenant, with exactly the result the
// synchronous call gives; a call sent again gets the replay at once; a
// cancelled task does nothing; 2025-11-25's tasks work the same way, and
// a client that takes no tasks keeps the synchronous answer (the other
// tests).
func TestMCPTasksAnswerFromAnyProcessAndOnlyToTheirTenant(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{NoWorker: true})
	serve := func(cfg mcpserver.Config) string {
		cfg.BaseURL, cfg.Operations = s.URL, s.Set.Operations()
		hs := httptest.NewServer(mcpserver.HTTPHandler(cfg, mcpserver.HTTPOptions{}))
		t.Cleanup(hs.Close)
		return hs.URL
	}
	first := testenv.DialMCP(t, serve(mcpserver.Config{}), s.Tokens[testenv.TenantA])
	second := serve(mcpserver.Config{})

	args := map[string]any{"idempotency_key": "task-k1", "customer_id": "c-task", "title": "Slow ticket"}
	start := time.Now()
	created, e := first.Call("tools/call", withMeta(map[string]any{"name": "create_ticket", "arguments": args}, declared))
	if e != nil || created["resultType"] != "task" || created["status"] != "working" || created["taskId"] == "" {
		t.Fatalf("a call with no answer yet: %+v %+v", created, e)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the task came after %s", took)
	}
	if created["ttlMs"] != float64(mcpserver.DefaultTaskTTL.Milliseconds()) || created["pollIntervalMs"] != float64(1000) {
		t.Fatalf("ttl and poll interval: %+v", created)
	}
	id := created["taskId"].(string)
	t.Logf("task %s after %s", id, time.Since(start).Round(time.Millisecond))

	// Another tenant, on any process, finds nothing under that ID.
	other := testenv.DialMCP(t, second, s.Tokens[testenv.TenantB])
	if got, e := other.Call("tasks/get", withMeta(map[string]any{"taskId": id}, declared)); e == nil || e.Code != -32602 {
		t.Fatalf("another tenant's tasks/get: %+v %+v", got, e)
	}
	if _, e := other.Call("tasks/cancel", withMeta(map[string]any{"taskId": id}, declared)); e == nil || e.Code != -32602 {
		t.Fatalf("another tenant's tasks/cancel: %+v", e)
	}

	// A second task, cancelled while it waits for a worker: it ends
	// cancelled, having done nothing.
	doomed := map[string]any{"idempotency_key": "task-k2", "customer_id": "c-task-cancel", "title": "Never mind"}
	tk2, e := first.Call("tools/call", withMeta(map[string]any{"name": "create_ticket", "arguments": doomed}, declared))
	if e != nil || tk2["resultType"] != "task" {
		t.Fatalf("the second call: %+v %+v", tk2, e)
	}
	if ack, e := first.Call("tasks/cancel", withMeta(map[string]any{"taskId": tk2["taskId"]}, declared)); e != nil || ack["resultType"] != "complete" {
		t.Fatalf("tasks/cancel: %+v %+v", ack, e)
	}

	// 2025-11-25: params.task always gets a task.
	legacyArgs := map[string]any{"idempotency_key": "task-k3", "customer_id": "c-task-legacy", "title": "Old client"}
	legacy, e := first.Call("tools/call", map[string]any{"name": "create_ticket", "arguments": legacyArgs, "task": map[string]any{"ttl": 60000}})
	if e != nil {
		t.Fatalf("a 2025-11-25 task call: %+v", e)
	}
	lt, _ := legacy["task"].(map[string]any)
	if lt["status"] != "working" || lt["ttl"] == nil || lt["pollInterval"] != float64(1000) {
		t.Fatalf("a 2025-11-25 task: %+v", legacy)
	}

	// The first process goes away; the worker starts; the other process
	// answers both tasks.
	s.StartWorker()
	replica := testenv.DialMCP(t, second, s.Tokens[testenv.TenantA])
	done := func(id string) map[string]any {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			got, e := replica.Call("tasks/get", withMeta(map[string]any{"taskId": id}, declared))
			if e != nil {
				t.Fatalf("tasks/get %s: %+v", id, e)
			}
			if got["status"] != "working" {
				return got
			}
			if time.Now().After(deadline) {
				t.Fatalf("task %s still working", id)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	got := done(id)
	res, isErr := toolResult(t, got["result"])
	if got["status"] != "completed" || got["resultType"] != "complete" || isErr || res.HTTPStatus != 201 || res.Replayed {
		t.Fatalf("the task's end: %+v", got)
	}
	// The result inline is the call's own, as 2026-07-28 writes a result:
	// with its resultType (the ext-tasks client refuses it without).
	if inline, _ := got["result"].(map[string]any); inline["resultType"] != "complete" {
		t.Fatalf("the task's result has no resultType: %+v", got["result"])
	}
	if c := done(tk2["taskId"].(string)); c["status"] != "cancelled" {
		t.Fatalf("the cancelled task: %+v", c)
	}

	// The same call again: the first answer at once, a replay, no task.
	again, e := replica.Call("tools/call", withMeta(map[string]any{"name": "create_ticket", "arguments": args}, declared))
	rep, _ := toolResult(t, again)
	if e != nil || again["resultType"] == "task" || !rep.Replayed || fmt.Sprint(rep.Result) != fmt.Sprint(res.Result) {
		t.Fatalf("the call sent again: %+v %+v (first %+v)", again, e, res)
	}

	// 2025-11-25's tasks/result blocks until the end, and gives the
	// result with its task named.
	out, e := replica.Call("tasks/result", map[string]any{"taskId": lt["taskId"]})
	lres, isErr := toolResult(t, out)
	meta, _ := out["_meta"].(map[string]any)
	if e != nil || isErr || lres.HTTPStatus != 201 || lres.Replayed || meta["io.modelcontextprotocol/related-task"] == nil {
		t.Fatalf("tasks/result: %+v %+v", out, e)
	}
	// A 2025-11-25 task cannot be cancelled once it has taken effect, and
	// says so.
	if _, e := replica.Call("tasks/cancel", map[string]any{"taskId": lt["taskId"]}); e == nil || !strings.Contains(e.Message, "already taken effect") {
		t.Fatalf("cancelling a done task: %+v", e)
	}

	for where, want := range map[string]int{"customer_id = 'c-task'": 1, "customer_id = 'c-task-cancel'": 0, "customer_id = 'c-task-legacy'": 1} {
		if n := testenv.Count(t, s.Pool, "ticket", where); n != want {
			t.Errorf("%s: %d tickets, want %d", where, n, want)
		}
	}

	// Past its TTL a task is expired, as the extension says, though the
	// record still holds the answer.
	expired := testenv.DialMCP(t, serve(mcpserver.Config{TaskTTL: time.Millisecond}), s.Tokens[testenv.TenantA])
	if _, e := expired.Call("tasks/get", withMeta(map[string]any{"taskId": id}, declared)); e == nil || e.Code != -32602 || !strings.Contains(e.Message, "expired") {
		t.Fatalf("a task past its TTL: %+v", e)
	}
}

// A task whose run ended without a final answer (its activity gave up, or
// reconcile found nothing) completes with words that tell the model to
// call again under the same key, which runs it again and cannot take
// effect twice; never the gateway's raw problem, and never words that
// invite a new key.
func TestMCPTaskOfARunThatEndedWithoutAnAnswerSaysToCallAgainUnderTheSameKey(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{NoWorker: true})
	hs := httptest.NewServer(mcpserver.HTTPHandler(mcpserver.Config{BaseURL: s.URL, Operations: s.Set.Operations()}, mcpserver.HTTPOptions{}))
	t.Cleanup(hs.Close)
	c := testenv.DialMCP(t, hs.URL, s.Tokens[testenv.TenantA])
	args := map[string]any{"idempotency_key": "task-unfinished", "customer_id": "c-task-unfinished", "title": "Gave up"}
	created, e := c.Call("tools/call", withMeta(map[string]any{"name": "create_ticket", "arguments": args}, declared))
	if e != nil || created["resultType"] != "task" {
		t.Fatalf("the call: %+v %+v", created, e)
	}
	// What the workflow writes when its attempts give up with nothing
	// written (problem.ExecutionFailed).
	ctx := context.Background()
	rec, err := s.Records.Get(ctx, testenv.TenantA, "task-unfinished")
	if err != nil {
		t.Fatal(err)
	}
	out := idem.Outcome{Status: 500, Body: problem.ExecutionFailed().Body(), ContentType: problem.ContentType}
	if err := s.Records.Finish(ctx, s.Pool, rec, idem.StatusFailed, out, "the test's activity gave up"); err != nil {
		t.Fatal(err)
	}
	got, e := c.Call("tasks/get", withMeta(map[string]any{"taskId": created["taskId"]}, declared))
	b, _ := json.Marshal(got["result"])
	var res struct {
		IsError bool `json:"isError"`
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	}
	_ = json.Unmarshal(b, &res)
	if e != nil || got["status"] != "completed" || !res.IsError || len(res.Content) != 1 {
		t.Fatalf("the task: %+v %+v", got, e)
	}
	text := res.Content[0].Text
	t.Logf("the model reads: %s", text)
	rule, err := modeltext.Load()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, `SAME idempotency_key "task-unfinished"`) || strings.Contains(text, "/problems/") || rule.Invitation(text) != "" {
		t.Fatalf("the words: %q", text)
	}
}

// A call from a client that cannot ask for a task up front (an SDK with
// no task client) bounds its wait in _meta (MetaWait); past it, the answer
// is NO ANSWER YET with the task that will hold the call's answer in its
// _meta, which the client reads with tasks/get and tasks/result: the
// call's own answer (not a replay), one ticket. A call that found another
// request's run names it as a replay's task.
func TestMCPNoAnswerYetNamesTheTaskThatWillHoldTheAnswer(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{NoWorker: true})
	hs := httptest.NewServer(mcpserver.HTTPHandler(mcpserver.Config{BaseURL: s.URL, Operations: s.Set.Operations()}, mcpserver.HTTPOptions{}))
	t.Cleanup(hs.Close)
	c := testenv.DialMCP(t, hs.URL, s.Tokens[testenv.TenantA])
	args := map[string]any{"idempotency_key": "by-the-model", "customer_id": "c-handle", "title": "Slow ticket"}
	meta := map[string]any{mcpserver.MetaKey: "handle-k1", mcpserver.MetaWait: 1500}
	handleOf := func(res map[string]any) string {
		t.Helper()
		m, _ := res["_meta"].(map[string]any)
		rt, _ := m["io.modelcontextprotocol/related-task"].(map[string]any)
		id, _ := rt["taskId"].(string)
		return id
	}
	start := time.Now()
	first, e := c.Call("tools/call", withMeta(map[string]any{"name": "create_ticket", "arguments": args}, meta))
	took := time.Since(start)
	_, isErr := toolResult(t, first)
	if e != nil || !isErr || !strings.Contains(fmt.Sprint(first["content"]), "NO ANSWER YET") || handleOf(first) == "" {
		t.Fatalf("a call past its wait: %+v %+v", first, e)
	}
	if took > 4*time.Second {
		t.Fatalf("a call that bounded its wait at 1.5 s answered after %s", took)
	}
	t.Logf("NO ANSWER YET after %s, task %s", took.Round(time.Millisecond), handleOf(first))
	second, _ := c.Call("tools/call", withMeta(map[string]any{"name": "create_ticket", "arguments": args}, meta))
	if h := handleOf(second); h != handleOf(first)+"~replay" {
		t.Fatalf("the same call again, while the first runs: task %q (first %q)", h, handleOf(first))
	}
	if got, e := c.Call("tasks/get", map[string]any{"taskId": handleOf(first)}); e != nil || got["status"] != "working" {
		t.Fatalf("tasks/get: %+v %+v", got, e)
	}
	s.StartWorker()
	out, e := c.Call("tasks/result", map[string]any{"taskId": handleOf(first)})
	res, isErr := toolResult(t, out)
	if e != nil || isErr || res.HTTPStatus != 201 || res.Replayed {
		t.Fatalf("tasks/result: %+v %+v", out, e)
	}
	out, e = c.Call("tasks/result", map[string]any{"taskId": handleOf(second)})
	if rep, _ := toolResult(t, out); e != nil || !rep.Replayed || fmt.Sprint(rep.Result) != fmt.Sprint(res.Result) {
		t.Fatalf("the second call's task: %+v %+v", out, e)
	}
	if n := testenv.Count(t, s.Pool, "ticket", "customer_id = 'c-handle'"); n != 1 {
		t.Fatalf("%d tickets", n)
	}
}

// A 2026-07-28 request (the version named in its _meta, as the OpenAI
// Agents SDK's MCP client sends over stdio once discover found the
// revision) gets every result with resultType, which that revision's
// clients require: the tool list and a tool's answer too, which this
// package rewrites.
func TestMCP2026RequestsGetResultsOfTheirRevision(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st, ct := mcp.NewInMemoryTransports()
	srv := mcpserver.New(mcpserver.Config{BaseURL: s.URL, Token: s.Tokens[testenv.TenantA], Operations: s.Set.Operations()})
	go func() { _ = srv.Run(ctx, mcpserver.WithTasks(st)) }()
	conn, err := ct.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	meta := map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28",
		"io.modelcontextprotocol/clientCapabilities": map[string]any{}, "io.modelcontextprotocol/clientInfo": map[string]any{"name": "raw", "version": "1"}}
	n := int64(0)
	call := func(method string, params map[string]any) map[string]any {
		t.Helper()
		n++
		id, _ := jsonrpc.MakeID(float64(n))
		params["_meta"] = meta
		b, _ := json.Marshal(params)
		if err := conn.Write(ctx, &jsonrpc.Request{ID: id, Method: method, Params: b}); err != nil {
			t.Fatal(err)
		}
		for {
			msg, err := conn.Read(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if r, ok := msg.(*jsonrpc.Response); ok && r.ID == id {
				var out map[string]any
				if r.Error != nil || json.Unmarshal(r.Result, &out) != nil {
					t.Fatalf("%s: %v %s", method, r.Error, r.Result)
				}
				return out
			}
		}
	}
	if list := call("tools/list", map[string]any{}); list["resultType"] != "complete" || len(list["tools"].([]any)) == 0 {
		t.Fatalf("tools/list: %+v", list)
	}
	args := map[string]any{"idempotency_key": "rev-2026", "customer_id": "c-2026", "title": "New revision"}
	called := call("tools/call", map[string]any{"name": "create_ticket", "arguments": args})
	if res, isErr := toolResult(t, called); isErr || res.HTTPStatus != 201 || called["resultType"] != "complete" {
		t.Fatalf("tools/call: %+v", called)
	}
}
