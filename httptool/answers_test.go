package httptool_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemflow/idemflow/agentclient"
	"github.com/idemflow/idemflow/idemflowtest/downstream"
	"github.com/idemflow/idemflow/internal/mcpserver"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// mcpOf is an MCP session on the fixture's tools, as tenant A.
func (f fixture) mcpOf(t *testing.T) func(name string, args map[string]any) (*mcp.CallToolResult, testenv.ToolResult) {
	cs := testenv.MCPSession(t, mcpserver.New(mcpserver.Config{BaseURL: f.s.URL, Token: f.s.Tokens[testenv.TenantA],
		Operations: f.s.Activities.Tools.Operations()}))
	return func(name string, args map[string]any) (*mcp.CallToolResult, testenv.ToolResult) {
		t.Helper()
		return testenv.CallTool(t, cs, name, args)
	}
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// A downstream that answers 202 (it queued the refund) has taken the
// call: its 202 is the intent's answer, stored and replayed, and told
// apart from idemflow's own still-running 202 by Idempotent-Replayed. The
// Go client and MCP report it as the success it is, and nothing is polled
// or sent twice.
func TestADownstreams202IsItsAnswerNotIdemflows(t *testing.T) {
	f := newFixture(t)
	f.ds.Accepted = true
	body := `{"payment_id":"pay-1","amount_cents":100}`
	first := f.post(testenv.TenantA, "refund_keyed", "q-1", body)
	again := f.post(testenv.TenantA, "refund_keyed", "q-1", body)
	if first.Status != http.StatusAccepted || first.Header.Get("Idempotent-Replayed") != "false" || first.Header.Get("Location") != "" ||
		!bytes.Contains(first.Body, []byte(`"queued"`)) {
		t.Fatalf("first: %d %v %s", first.Status, first.Header, first.Body)
	}
	if again.Status != http.StatusAccepted || again.Header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(again.Body, first.Body) {
		t.Fatalf("replay: %d %v %s, first %s", again.Status, again.Header, again.Body, first.Body)
	}
	res, err := f.agent(testenv.TenantA).Do(context.Background(), agentclient.Intent{Key: "q-2", Method: http.MethodPost,
		Path: "/v1/tools/refund_keyed", Body: []byte(`{"payment_id":"pay-2","amount_cents":100}`)})
	if err != nil || res.Status != http.StatusAccepted || res.Replayed || !bytes.Contains(res.Body, []byte(`"queued"`)) {
		t.Fatalf("the Go client: %d %s %v", res.Status, res.Body, err)
	}
	call := f.mcpOf(t)
	for i, wantReplayed := range []bool{false, true} {
		r, got := call("refund_keyed", map[string]any{"idempotency_key": "q-3", "payment_id": "pay-3", "amount_cents": 100})
		if r.IsError || got.HTTPStatus != http.StatusAccepted || got.Replayed != wantReplayed || got.Result["status"] != "queued" {
			t.Fatalf("MCP call %d: %s %+v", i+1, text(r), got)
		}
	}
	for _, key := range []string{"q-1", "q-2", "q-3"} {
		if n := f.effects(testenv.TenantA, key, "refund_keyed"); n != 1 {
			t.Errorf("%s: %d refunds, want 1", key, n)
		}
	}
}

// A downstream's 4xx is the operation's rejection, recorded under the
// key: never idemflow's refusal of the request, whose advice (fix the
// body, same key) would meet a conflict. The Go client types it as a
// rejection (no ReviseIntent), and MCP says that the key stays bound to
// these arguments and tells the model to stop rather than send others
// under another key on its own (which the server would run as a new
// intent).
func TestADownstreams4xxIsARejectionNotARefusal(t *testing.T) {
	f := newFixture(t)
	tooMuch := fmt.Sprintf(`{"payment_id":"pay-1","amount_cents":%d}`, downstream.MaxAmount+1)
	c := f.agent(testenv.TenantA)
	c.Store = &agentclient.MemoryStore{}
	in, err := c.NewIntent(context.Background(), "refund-1", "refund", http.MethodPost, "/v1/tools/refund_keyed", json.RawMessage(tooMuch))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Do(context.Background(), in)
	var rej *agentclient.RejectedError
	if !errors.As(err, &rej) || errors.Is(err, agentclient.ErrInvalidRequest) || rej.Code != agentclient.CodeDownstreamRejected || !rej.Settled ||
		!bytes.Contains(rej.Body, []byte("amount_exceeds_capture")) {
		t.Fatalf("the Go client: %v", err)
	}
	if _, err := c.ReviseIntent(context.Background(), "refund-1", http.MethodPost, "/v1/tools/refund_keyed", json.RawMessage(`{"payment_id":"pay-1","amount_cents":5}`)); !errors.Is(err, agentclient.ErrNotRevisable) {
		t.Fatalf("ReviseIntent after the downstream's rejection: %v, want ErrNotRevisable", err)
	}
	call := f.mcpOf(t)
	args := map[string]any{"idempotency_key": "m-1", "payment_id": "pay-2", "amount_cents": downstream.MaxAmount + 1}
	r, _ := call("refund_keyed", args)
	msg := text(r)
	if !r.IsError || !strings.Contains(msg, "REJECTED by the service (HTTP 422)") || !strings.Contains(msg, "amount_exceeds_capture") ||
		!strings.Contains(msg, "Do not send other arguments under another key on your own") || strings.Contains(msg, "INVALID ARGUMENTS") {
		t.Fatalf("MCP's words: %s", msg)
	}
	if strings.Contains(msg, "get it again") || !strings.Contains(msg, "sends them to the service again") {
		t.Fatalf("MCP's words promise what the record will not do: %s", msg)
	}
	// What it says holds: the same arguments under that key are sent to
	// the service again, other arguments under it are a conflict, and
	// under a new key they run.
	posts := f.ds.Posts()
	r, _ = call("refund_keyed", args)
	if f.ds.Posts() != posts+1 {
		t.Fatalf("the same arguments under the key: the service got %d requests, want 1 (%s)", f.ds.Posts()-posts, text(r))
	}
	t.Logf("the same arguments again: %s", text(r))
	args["amount_cents"] = 5
	if r, _ := call("refund_keyed", args); !r.IsError || !strings.Contains(text(r), "CONFLICT") {
		t.Fatalf("other arguments under the same key: %s", text(r))
	}
	args["idempotency_key"] = "m-2"
	if r, got := call("refund_keyed", args); r.IsError || got.HTTPStatus != http.StatusCreated {
		t.Fatalf("a new key: %s %+v", text(r), got)
	}
}

// waitZero sends every request with Prefer: wait=0, so that an intent is
// answered with idemflow's 202 at once and its answer is polled.
type waitZero struct{}

func (waitZero) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Prefer", "wait=0")
	return http.DefaultTransport.RoundTrip(r)
}

// A polled answer is the replay's: the same bytes and media type, a
// downstream's text too.
func TestAPolledAnswerIsTheReplaysBytesAndMediaType(t *testing.T) {
	f := newFixture(t)
	f.ds.Text = true
	c := f.agent(testenv.TenantA)
	c.HTTP = &http.Client{Transport: waitZero{}}
	body := `{"payment_id":"pay-1","amount_cents":100}`
	polled, err := c.Do(context.Background(), agentclient.Intent{Key: "t-1", Method: http.MethodPost, Path: "/v1/tools/refund_keyed", Body: []byte(body)})
	replay := f.post(testenv.TenantA, "refund_keyed", "t-1", body)
	if err != nil || polled.Status != http.StatusCreated || !bytes.HasPrefix(polled.Body, []byte("refund re_1 of 100 cents")) {
		t.Fatalf("polled: %d %q %v", polled.Status, polled.Body, err)
	}
	if replay.Status != polled.Status || !bytes.Equal(replay.Body, polled.Body) || replay.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
		t.Fatalf("replay %d %v %q, polled %q", replay.Status, replay.Header, replay.Body, polled.Body)
	}
	// The operation itself, as GET /v1/operations/{id} shows it.
	accepted := f.s.Do(testenv.Request{Path: "/v1/tools/refund_keyed", Token: f.s.Tokens[testenv.TenantA], Key: "t-2", Body: body,
		Header: map[string]string{"Prefer": "wait=0"}})
	if accepted.Status != http.StatusAccepted || accepted.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("Prefer: wait=0: %d %v %s", accepted.Status, accepted.Header, accepted.Body)
	}
	var view struct {
		Status            string `json:"status"`
		ResultContentType string `json:"result_content_type"`
		ResultBase64      []byte `json:"result_base64"`
	}
	for deadline := time.Now().Add(20 * time.Second); view.Status != "succeeded" && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		op := f.s.Do(testenv.Request{Method: http.MethodGet, Path: accepted.Header.Get("Location"), Token: f.s.Tokens[testenv.TenantA]})
		_ = json.Unmarshal(op.Body, &view)
	}
	replay = f.post(testenv.TenantA, "refund_keyed", "t-2", body)
	if view.ResultContentType != replay.Header.Get("Content-Type") || !bytes.Equal(view.ResultBase64, replay.Body) {
		t.Fatalf("the operation: %+v; the replay: %v %q", view, replay.Header, replay.Body)
	}
	// MCP's get_operation gives the model the text, not base64.
	call := f.mcpOf(t)
	var opID struct {
		OperationID string `json:"operation_id"`
	}
	_ = json.Unmarshal(accepted.Body, &opID)
	r, got := call("get_operation", map[string]any{"operation_id": opID.OperationID})
	if r.IsError || got.Result["result"] != string(replay.Body) || got.Result["result_content_type"] != "text/plain; charset=utf-8" {
		t.Fatalf("get_operation: %s %+v", text(r), got)
	}
}

// After an answer was lost, a downstream that answers the request sent
// again under the same key with a 4xx of its own, or with a 409 that
// outlasts the first request, has not said that nothing happened: it may
// hold the first. The intent ends outcome-unknown, final: nothing is sent
// again, and a retry replays that answer.
//
// The first request goes out on a connection an earlier call left open:
// Go's HTTP client sends a POST with an Idempotency-Key header again by
// itself when a reused connection drops, and idemflow would then read
// the downstream's refusal of the repeated key as the first answer.
func TestARefusedResendLeavesTheOutcomeUnknownNeverNothingHappened(t *testing.T) {
	for _, repeated := range []int{http.StatusUnprocessableEntity, http.StatusConflict} {
		t.Run(fmt.Sprint(repeated), func(t *testing.T) {
			f := newFixture(t)
			f.ds.RepeatedKey = repeated
			if r := f.post(testenv.TenantA, "refund_keyed", "r-0", `{"payment_id":"pay-0","amount_cents":100}`); r.Status != http.StatusCreated {
				t.Fatalf("an earlier call, to leave a connection open: %d %s", r.Status, r.Body)
			}
			f.ds.Inject(downstream.Drop) // the first request commits; its answer is lost
			body := `{"payment_id":"pay-1","amount_cents":100}`
			first := f.post(testenv.TenantA, "refund_keyed", "r-1", body)
			if first.Status != http.StatusBadGateway || !bytes.Contains(first.Body, []byte("/problems/outcome-unknown")) ||
				!bytes.Contains(first.Body, []byte(fmt.Sprintf("got %d to the request sent again", repeated))) {
				t.Fatalf("first: %d %s", first.Status, first.Body)
			}
			if n := testenv.Count(t, f.s.Pool, "tool_call", "idem_key = 'r-1' AND state = 'unknown'"); n != 1 {
				t.Fatal("the call is not settled as unknown")
			}
			posts := f.ds.Posts()
			again := f.post(testenv.TenantA, "refund_keyed", "r-1", body)
			if again.Status != http.StatusBadGateway || again.Header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(again.Body, first.Body) {
				t.Fatalf("retry: %d %v %s", again.Status, again.Header, again.Body)
			}
			// Its record purged, the key gets the same answer, and sends
			// nothing: what idemflow knows of the call outlives it.
			if _, err := f.s.Pool.Exec(context.Background(), `DELETE FROM idempotency_record WHERE idem_key = 'r-1'`); err != nil {
				t.Fatal(err)
			}
			purged := f.post(testenv.TenantA, "refund_keyed", "r-1", body)
			if purged.Status != http.StatusBadGateway || !bytes.Equal(purged.Body, first.Body) {
				t.Fatalf("after a purge: %d %s, first %s", purged.Status, purged.Body, first.Body)
			}
			if f.ds.Posts() != posts || f.effects(testenv.TenantA, "r-1", "refund_keyed") != 1 {
				t.Fatalf("after the answer: %d posts, then %d; %d effects", posts, f.ds.Posts(), f.effects(testenv.TenantA, "r-1", "refund_keyed"))
			}
		})
	}
}

// A downstream that deduplicates refusals too, and marks what it replays
// (replayed_header), is believed: after the first answer was lost, its
// refusal of the first request, answered again to the request sent under
// the same key, is the first request's answer. Nothing was refunded, and
// the agent reads the downstream's 422, not outcome-unknown. The same
// refusal from a tool that declares no replayed_header stays unknown: it
// could be a refusal of the repeated key.
func TestADeduplicatingDownstreamsRepeatedRefusalIsBelieved(t *testing.T) {
	f := newFixture(t)
	f.ds.ReplaysRefusals = true
	over := fmt.Sprintf(`{"payment_id":"pay-1","amount_cents":%d}`, downstream.MaxAmount+1)
	for _, c := range []struct {
		tool   string
		status int
		want   string
	}{
		{"refund_replaying", http.StatusUnprocessableEntity, "amount_exceeds_capture"},
		{"refund_keyed", http.StatusBadGateway, "/problems/outcome-unknown"},
	} {
		f.ds.Inject(downstream.Drop) // the refusal is stored, its answer lost
		r := f.post(testenv.TenantA, c.tool, "over-"+c.tool, over)
		t.Logf("%s: %d %s (downstream posts so far %d)", c.tool, r.Status, r.Body, f.ds.Posts())
		if r.Status != c.status || !bytes.Contains(r.Body, []byte(c.want)) {
			t.Fatalf("%s, its refusal replayed to the resend: %d %s, want %d with %s", c.tool, r.Status, r.Body, c.status, c.want)
		}
	}
	if n := len(f.ds.Refunds()); n != 0 {
		t.Fatalf("%d refunds", n)
	}
}
