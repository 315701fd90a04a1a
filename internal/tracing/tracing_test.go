package tracing_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemflow/idemflow/agentclient"
	"github.com/idemflow/idemflow/httptool"
	"github.com/idemflow/idemflow/internal/mcpserver"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
	"github.com/idemflow/idemflow/internal/tracing"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

const ticketBody = `{"customer_id":"c-42","title":"Refund not received"}`

// tree is one trace's ended spans, by parent.
type tree struct {
	spans    []sdktrace.ReadOnlySpan
	children map[trace.SpanID][]sdktrace.ReadOnlySpan
}

func treeOf(spans []sdktrace.ReadOnlySpan, id trace.TraceID) tree {
	t := tree{children: map[trace.SpanID][]sdktrace.ReadOnlySpan{}}
	for _, s := range spans {
		if s.SpanContext().TraceID() == id {
			t.spans = append(t.spans, s)
			t.children[s.Parent().SpanID()] = append(t.children[s.Parent().SpanID()], s)
		}
	}
	return t
}

// child is parent's one child named name (a prefix ending in ':' matches
// Temporal's "StartWorkflow:<type>").
func (tr tree) child(t *testing.T, parent trace.SpanID, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	var found []sdktrace.ReadOnlySpan
	for _, s := range tr.children[parent] {
		if s.Name() == name || (strings.HasSuffix(name, ":") && strings.HasPrefix(s.Name(), name)) {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d spans %q under %s, want 1; the trace:\n%s", len(found), name, parent, tr)
	}
	return found[0]
}

// sql is how many of parent's children are SQL round trips: a statement
// or a batch (the pgx tracer's "query …" and "batch …" spans; a batch's
// statements are its children). Preparing a statement the connection has
// not seen is a child of its query.
func (tr tree) sql(parent trace.SpanID) int {
	n := 0
	for _, s := range tr.children[parent] {
		if strings.HasPrefix(s.Name(), "query ") || strings.HasPrefix(s.Name(), "batch ") {
			n++
		}
	}
	return n
}

func (tr tree) String() string {
	var b strings.Builder
	var walk func(id trace.SpanID, depth int)
	walk = func(id trace.SpanID, depth int) {
		for _, s := range tr.children[id] {
			fmt.Fprintf(&b, "%s%s\n", strings.Repeat("  ", depth), s.Name())
			walk(s.SpanContext().SpanID(), depth+1)
		}
	}
	roots := map[trace.SpanID]bool{}
	for _, s := range tr.spans {
		roots[s.Parent().SpanID()] = true
	}
	for _, s := range tr.spans {
		delete(roots, s.SpanContext().SpanID())
	}
	for id := range roots {
		walk(id, 0)
	}
	return b.String()
}

// One trace per intent: the agent's traceparent is the parent of the
// gateway's span, which holds the claim, the start and the wait; the
// start's Temporal span holds the workflow task's, which holds the
// activity's, which holds the step's SQL. A replay is the gateway's span
// and a claim, with no workflow.
func TestAnIntentIsOneTraceFromTheAgentsRequestToItsSQL(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	s := testenv.NewStack(t, testenv.Options{Tracing: tracing.New(tp)})
	tok := s.Tokens[testenv.TenantA]
	s.Do(testenv.Request{Method: "GET", Path: "/v1/tenant", Token: tok}) // the token, cached

	send := func(traceID, key string) (trace.TraceID, trace.SpanID) {
		t.Helper()
		tid, _ := trace.TraceIDFromHex(traceID)
		sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
		r := s.Do(testenv.Request{Path: "/v1/tickets", Token: tok, Key: key, Body: ticketBody,
			Header: map[string]string{"traceparent": "00-" + traceID + "-00f067aa0ba902b7-01"}})
		if r.Status != 201 {
			t.Fatalf("%d %s", r.Status, r.Body)
		}
		return tid, sid
	}
	// The worker's spans end a moment after the answer: wait for them.
	await := func(id trace.TraceID, name string) tree {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			tr := treeOf(rec.Ended(), id)
			if slices.ContainsFunc(tr.spans, func(s sdktrace.ReadOnlySpan) bool { return strings.HasPrefix(s.Name(), name) }) || time.Now().After(deadline) {
				return tr
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	tid, agent := send("4bf92f3577b34da6a3ce929d0e0e4736", "traced-1")
	// The workflow's span ends last: after its local activity's, which
	// ends after the answer (the activity settles the record, then hands
	// its result to the workflow).
	tr := await(tid, "RunWorkflow:")
	t.Logf("a new ticket:\n%s", tr)
	server := tr.child(t, agent, "POST /v1/tickets")
	if !server.Parent().IsRemote() {
		t.Error("the gateway's span is not a child of the agent's remote span")
	}
	sid := server.SpanContext().SpanID()
	claim := tr.child(t, sid, "idemflow.claim")
	if n := tr.sql(claim.SpanContext().SpanID()); n != 1 {
		t.Errorf("the claim made %d SQL round trips, want 1", n)
	}
	start := tr.child(t, sid, "idemflow.start")
	tr.child(t, sid, "idemflow.wait")
	startWF := tr.child(t, start.SpanContext().SpanID(), "StartWorkflow:")
	run := tr.child(t, startWF.SpanContext().SpanID(), "RunWorkflow:")
	act := tr.child(t, run.SpanContext().SpanID(), "StartActivity:")
	runAct := tr.child(t, act.SpanContext().SpanID(), "RunActivity:")
	// One pipeline: BEGIN, the lock, the savepoint, the ticket the step
	// queued (op.Later), release, remember, finish, COMMIT and the
	// notification.
	if n := tr.sql(runAct.SpanContext().SpanID()); n != 1 {
		t.Errorf("the activity made %d SQL round trips, want 1", n)
	}

	tid, agent = send("5bf92f3577b34da6a3ce929d0e0e4736", "traced-1")
	tr = await(tid, "POST")
	t.Logf("its replay:\n%s", tr)
	server = tr.child(t, agent, "POST /v1/tickets")
	claim = tr.child(t, server.SpanContext().SpanID(), "idemflow.claim")
	if n := tr.sql(claim.SpanContext().SpanID()); n != 0 {
		t.Errorf("a replay from the answer cache made %d SQL round trips", n)
	}
	if len(tr.spans) != 2 {
		t.Errorf("a replay is the gateway's span and its claim, got:\n%s", tr)
	}

	s.Gateway.Starter.Answers = nil
	tid, agent = send("6bf92f3577b34da6a3ce929d0e0e4736", "traced-1")
	tr = await(tid, "POST")
	server = tr.child(t, agent, "POST /v1/tickets")
	claim = tr.child(t, server.SpanContext().SpanID(), "idemflow.claim")
	if n := tr.sql(claim.SpanContext().SpanID()); n != 1 {
		t.Errorf("a replay from PostgreSQL made %d SQL round trips, want 1:\n%s", n, tr)
	}
}

// The Go client and the MCP server send the agent's trace on: the
// gateway's span is a child of the agent's, whichever way it came.
func TestTheGoClientAndTheMCPServerSendTraceparent(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	s := testenv.NewStack(t, testenv.Options{Tracing: tracing.New(tp)})
	tok := s.Tokens[testenv.TenantA]
	agentSpan := func(hex string) (context.Context, trace.TraceID) {
		tid, _ := trace.TraceIDFromHex(hex)
		sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
		sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
		return trace.ContextWithSpanContext(context.Background(), sc), tid
	}
	parentOf := func(tid trace.TraceID) string {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			for _, sp := range rec.Ended() {
				if sp.SpanContext().TraceID() == tid && strings.HasPrefix(sp.Name(), "POST ") {
					return sp.Parent().SpanID().String()
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("no gateway span in trace %s", tid)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	ctx, tid := agentSpan("7bf92f3577b34da6a3ce929d0e0e4736")
	c := &agentclient.Client{BaseURL: s.URL, Token: tok}
	if _, err := c.Do(ctx, agentclient.Intent{Key: "client-traced", Method: "POST", Path: "/v1/tickets", Body: []byte(ticketBody)}); err != nil {
		t.Fatal(err)
	}
	if p := parentOf(tid); p != "00f067aa0ba902b7" {
		t.Errorf("the Go client's request: the gateway's span has parent %s, not the agent's", p)
	}

	cs := testenv.MCPSession(t, mcpserver.New(mcpserver.Config{BaseURL: s.URL, Token: tok, Operations: s.Set.Operations()}))
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "create_ticket",
		Meta:      mcp.Meta{"traceparent": "00-8bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		Arguments: map[string]any{"idempotency_key": "mcp-traced", "customer_id": "c-1", "title": "Traced"}})
	if err != nil || res.IsError {
		t.Fatalf("%v %+v", err, res)
	}
	tid, _ = trace.TraceIDFromHex("8bf92f3577b34da6a3ce929d0e0e4736")
	if p := parentOf(tid); p != "00f067aa0ba902b7" {
		t.Errorf("the MCP call: the gateway's span has parent %s, not the agent's", p)
	}
}

// An HTTP tool's call to its downstream is a span of the intent's trace,
// and the request carries it as its traceparent: the downstream's own
// spans join the trace.
func TestAnHTTPToolsCallCarriesTheIntentsTrace(t *testing.T) {
	got := make(chan string, 4)
	downstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("traceparent")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"refund_id":"r-1"}`))
	}))
	defer downstream.Close()
	tools, err := httptool.Parse([]byte(`
tools:
  - name: refund
    description: Refund a payment.
    input_schema: {type: object, required: [payment_id], properties: {payment_id: {type: string}}}
    call: {method: POST, url: "`+downstream.URL+`/refunds", key_header: Idempotency-Key, timeout: 2s}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	s := testenv.NewStack(t, testenv.Options{Tools: tools, Tracing: tracing.New(tp)})
	const traceID = "9bf92f3577b34da6a3ce929d0e0e4736"
	r := s.Do(testenv.Request{Path: "/v1/tools/refund", Token: s.Tokens[testenv.TenantA], Key: "tool-traced",
		Body: `{"payment_id":"p-1"}`, Header: map[string]string{"traceparent": "00-" + traceID + "-00f067aa0ba902b7-01"}})
	if r.Status != 201 {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	var parent string
	select {
	case parent = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the downstream was not called")
	}
	tid, _ := trace.TraceIDFromHex(traceID)
	var send sdktrace.ReadOnlySpan
	deadline := time.Now().Add(5 * time.Second)
	for send == nil && time.Now().Before(deadline) {
		for _, sp := range rec.Ended() {
			if sp.SpanContext().TraceID() == tid && sp.Name() == "idemflow.tool.send" {
				send = sp
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if send == nil {
		t.Fatalf("no idemflow.tool.send span in the intent's trace:\n%s", treeOf(rec.Ended(), tid))
	}
	if want := "00-" + traceID + "-" + send.SpanContext().SpanID().String() + "-01"; parent != want {
		t.Errorf("the downstream got traceparent %q, want %q (the call's span)", parent, want)
	}
}
