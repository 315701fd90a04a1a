package httptool_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemflow/idemflow/activities"
	"github.com/idemflow/idemflow/agentclient"
	"github.com/idemflow/idemflow/httptool"
	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/idemflowtest/downstream"
	"github.com/idemflow/idemflow/internal/mcpserver"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.temporal.io/api/workflowservice/v1"
)

// secret is the downstream's bearer token: it must reach the downstream,
// and nothing else.
const secret = "s3cret-billing-token"

// toolsFile declares one tool of each kind, and an at_most_once one,
// against base.
func toolsFile(base string) string {
	schema := `
    input_schema:
      type: object
      additionalProperties: false
      required: [payment_id, amount_cents]
      properties:
        payment_id: {type: string, maxLength: 64}
        amount_cents: {type: integer, minimum: 1}`
	return fmt.Sprintf(`
tools:
  - name: refund_keyed
    description: Refund, at an API that deduplicates by Idempotency-Key.%[2]s
    call:
      method: POST
      url: %[1]s/keyed/refunds
      headers: {Authorization: "Bearer ${BILLING_TOKEN}"}
      key_header: Idempotency-Key
      timeout: 300ms
  - name: refund_replaying
    description: Refund, at an API that deduplicates by Idempotency-Key and marks the answers it replays.%[2]s
    call:
      method: POST
      url: %[1]s/keyed/refunds
      headers: {Authorization: "Bearer ${BILLING_TOKEN}"}
      key_header: Idempotency-Key
      replayed_header: Idempotent-Replayed
      timeout: 300ms
  - name: refund_plain
    description: Refund, at an API that ignores Idempotency-Key and stores external_id.%[2]s
    call:
      method: POST
      url: %[1]s/plain/refunds
      headers: {Authorization: "Bearer ${BILLING_TOKEN}"}
      key_field: external_id
      timeout: 300ms
    lookup:
      url: %[1]s/plain/refunds?external_id={key}
      found_status: 201
  - name: refund_once
    description: Refund, at most once.%[2]s
    at_most_once: true
    call:
      method: POST
      url: %[1]s/plain/refunds
      headers: {Authorization: "Bearer ${BILLING_TOKEN}"}
      key_field: external_id
      timeout: 300ms
`, base, schema)
}

type fixture struct {
	s     *testenv.Stack
	ds    *downstream.Server
	dsURL string
	logs  *syncBuffer
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	ds := downstream.New()
	ds.Token = secret
	ds.Late = time.Second // past the tools' 300ms timeout
	srv := httptest.NewServer(ds.Handler())
	t.Cleanup(srv.Close)
	tools, err := httptool.Parse([]byte(toolsFile(srv.URL)), env(map[string]string{"BILLING_TOKEN": secret}))
	if err != nil {
		t.Fatal(err)
	}
	s := testenv.NewStack(t, testenv.Options{Tools: tools, NoWorker: true})
	logs := &syncBuffer{}
	s.Activities.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s.StartWorker()
	return fixture{s: s, ds: ds, dsURL: srv.URL, logs: logs}
}

// effects counts the downstream's refunds made under the derived key of
// (tenant, key, tool).
func (f fixture) effects(tenantID, key, tool string) int {
	return f.ds.Effects(idem.DownstreamKey(tenantID, key, tool))
}

func (f fixture) agent(tenantID string) *agentclient.Client {
	return &agentclient.Client{BaseURL: f.s.URL, Token: f.s.Tokens[tenantID], Initial: 50 * time.Millisecond, Max: 500 * time.Millisecond}
}

func (f fixture) post(tenantID, tool, key, body string) testenv.Response {
	return f.s.Do(testenv.Request{Path: "/v1/tools/" + tool, Token: f.s.Tokens[tenantID], Key: key, Body: body,
		Header: map[string]string{"Prefer": "wait=20"}})
}

// Under concurrent duplicates and every fault the downstream has (a
// dropped connection after its commit, an answer past the timeout, a
// 503), each intent of both kinds of tool has exactly one effect at the
// downstream, every duplicate gets the same answer, a replay is
// byte-identical and says so, and changed parameters are a 422 that sends
// nothing.
func TestEveryIntentHasOneEffectDownstreamUnderDuplicatesAndFaults(t *testing.T) {
	f := newFixture(t)
	const intents, duplicates = 4, 4
	for _, tool := range []string{"refund_keyed", "refund_plain"} {
		t.Run(tool, func(t *testing.T) {
			before := len(f.ds.Refunds())
			f.ds.Inject(downstream.Drop, downstream.Late, downstream.Fail, downstream.Drop, downstream.Late, downstream.Fail, downstream.Drop, downstream.Late)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			type answer struct {
				key string
				res agentclient.Result
				err error
			}
			answers := make(chan answer, intents*duplicates)
			var wg sync.WaitGroup
			for i := range intents {
				key := fmt.Sprintf("%s-%d", tool, i)
				body := fmt.Sprintf(`{"payment_id":"pay-%d","amount_cents":%d}`, i, 100+i)
				for range duplicates {
					wg.Go(func() {
						res, err := f.agent(testenv.TenantA).Do(ctx, agentclient.Intent{Key: key, Method: http.MethodPost, Path: "/v1/tools/" + tool, Body: []byte(body)})
						answers <- answer{key, res, err}
					})
				}
			}
			wg.Wait()
			close(answers)
			// A call's answer is 201, and so is one a lookup found after a
			// lost answer (found_status): one intent's answer does not
			// depend on which fault happened. Every duplicate gets it.
			first := map[string][]byte{}
			status := map[string]int{}
			for a := range answers {
				if a.err != nil || a.res.Status != http.StatusCreated {
					t.Fatalf("%s: %d %s %v", a.key, a.res.Status, a.res.Body, a.err)
				}
				if prev, ok := first[a.key]; ok && !bytes.Equal(prev, a.res.Body) {
					t.Fatalf("%s: two answers: %s and %s", a.key, prev, a.res.Body)
				}
				if prev, ok := status[a.key]; ok && prev != a.res.Status {
					t.Fatalf("%s: two statuses: %d and %d", a.key, prev, a.res.Status)
				}
				first[a.key], status[a.key] = a.res.Body, a.res.Status
			}
			for i := range intents {
				key := fmt.Sprintf("%s-%d", tool, i)
				if n := f.effects(testenv.TenantA, key, tool); n != 1 {
					t.Errorf("%s: %d effects at the downstream, want 1", key, n)
				}
				again := f.post(testenv.TenantA, tool, key, fmt.Sprintf(`{"amount_cents":%d,"payment_id":"pay-%d"}`, 100+i, i))
				if again.Status != status[key] || !bytes.Equal(again.Body, first[key]) || again.Header.Get("Idempotent-Replayed") != "true" ||
					again.Header.Get("Content-Type") != "application/json" {
					t.Errorf("%s: replay %d %v %s, first %s", key, again.Status, again.Header, again.Body, first[key])
				}
			}
			if n := len(f.ds.Refunds()) - before; n != intents {
				t.Errorf("%d refunds at the downstream for %d intents", n, intents)
			}
			posts := f.ds.Posts()
			changed := f.post(testenv.TenantA, tool, tool+"-0", `{"payment_id":"pay-0","amount_cents":999}`)
			if changed.Status != http.StatusUnprocessableEntity || !bytes.Contains(changed.Body, []byte("/problems/idempotency-key-reused")) {
				t.Fatalf("changed parameters: %d %s", changed.Status, changed.Body)
			}
			if f.ds.Posts() != posts {
				t.Fatal("changed parameters reached the downstream")
			}
		})
	}
	// The same key in another tenant is another intent, with its own
	// effect under another derived key.
	r := f.post(testenv.TenantB, "refund_keyed", "refund_keyed-0", `{"payment_id":"pay-0","amount_cents":100}`)
	if r.Status != http.StatusCreated || r.Header.Get("Idempotent-Replayed") != "false" || f.effects(testenv.TenantB, "refund_keyed-0", "refund_keyed") != 1 {
		t.Fatalf("another tenant's key: %d %s", r.Status, r.Body)
	}
	f.noSecretAnywhere(t)
}

// A downstream 4xx is a rejection: the intent is FAILED with the
// downstream's own answer, and nothing happened.
func TestADownstreamRejectionIsTheAnswerAndNothingHappened(t *testing.T) {
	f := newFixture(t)
	r := f.post(testenv.TenantA, "refund_keyed", "too-much", fmt.Sprintf(`{"payment_id":"pay-1","amount_cents":%d}`, downstream.MaxAmount+1))
	if r.Status != http.StatusUnprocessableEntity || !bytes.Contains(r.Body, []byte("amount_exceeds_capture")) || r.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("rejection: %d %v %s", r.Status, r.Header, r.Body)
	}
	if n := len(f.ds.Refunds()); n != 0 {
		t.Fatalf("%d refunds after a rejection", n)
	}
	if n := testenv.Count(t, f.s.Pool, "tool_call", "idem_key = 'too-much'"); n != 0 {
		t.Fatalf("a rejected call left %d tool_call rows", n)
	}
	if n := testenv.Count(t, f.s.Pool, "idempotency_record", "idem_key = 'too-much' AND status = 'FAILED'"); n != 1 {
		t.Fatal("the rejected intent is not FAILED")
	}
}

// A downstream gets the request in the canonical form the fingerprint
// covers: an integer the agent wrote 5382.0 arrives as 5382, which a strict
// decoder there takes (Schemathesis sent 5382.0; the downstream, a Go
// service, refused it as sent). The same request written 5382 is the same
// intent, a replay.
func TestADownstreamGetsTheRequestTheFingerprintCovers(t *testing.T) {
	f := newFixture(t)
	r := f.post(testenv.TenantA, "refund_keyed", "canon-1", `{"amount_cents":5382.0, "payment_id":"pay-1"}`)
	if r.Status != http.StatusCreated {
		t.Fatalf("amount_cents 5382.0: %d %s", r.Status, r.Body)
	}
	again := f.post(testenv.TenantA, "refund_keyed", "canon-1", `{"payment_id":"pay-1","amount_cents":5382}`)
	if again.Status != http.StatusCreated || again.Header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(again.Body, r.Body) {
		t.Fatalf("the same request written 5382: %d %s %s", again.Status, again.Header.Get("Idempotent-Replayed"), again.Body)
	}
	if refunds := f.ds.Refunds(); len(refunds) != 1 || refunds[0].AmountCents != 5382 {
		t.Fatalf("the downstream made %+v", refunds)
	}
}

// An at_most_once tool's unknown outcome is final: the answer is
// /problems/outcome-unknown, and a retry under the same key never sends
// the call again.
func TestAtMostOnceAnUnknownOutcomeIsFinal(t *testing.T) {
	f := newFixture(t)
	f.ds.Inject(downstream.Drop)
	first := f.post(testenv.TenantA, "refund_once", "once-1", `{"payment_id":"pay-1","amount_cents":100}`)
	if first.Status != http.StatusBadGateway || !bytes.Contains(first.Body, []byte("/problems/outcome-unknown")) || first.Header.Get("Idempotent-Replayed") != "false" {
		t.Fatalf("first: %d %v %s", first.Status, first.Header, first.Body)
	}
	posts := f.ds.Posts()
	for range 3 {
		// A replay of the answer, and says so: nothing runs again.
		again := f.post(testenv.TenantA, "refund_once", "once-1", `{"payment_id":"pay-1","amount_cents":100}`)
		if again.Status != http.StatusBadGateway || !bytes.Equal(again.Body, first.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("retry: %d %v %s, first %s", again.Status, again.Header, again.Body, first.Body)
		}
	}
	if f.ds.Posts() != posts || f.effects(testenv.TenantA, "once-1", "refund_once") != 1 {
		t.Fatalf("the call was sent again: %d posts, then %d", posts, f.ds.Posts())
	}
	// The Go client stops at once on it: retrying cannot change it.
	_, err := f.agent(testenv.TenantA).Do(context.Background(), agentclient.Intent{Key: "once-1", Method: http.MethodPost,
		Path: "/v1/tools/refund_once", Body: []byte(`{"payment_id":"pay-1","amount_cents":100}`)})
	if !errors.Is(err, agentclient.ErrOutcomeUnknown) {
		t.Fatalf("the client's error: %v", err)
	}
	// A healthy call of the same tool is an ordinary success.
	ok := f.post(testenv.TenantA, "refund_once", "once-2", `{"payment_id":"pay-2","amount_cents":100}`)
	if ok.Status != http.StatusCreated {
		t.Fatalf("healthy: %d %s", ok.Status, ok.Body)
	}
}

// Reconcile settles a stale intent of a lookup tool by its lookup, and
// never sends the call: found, the intent is SUCCESS with what the
// downstream holds; not found, it is FAILED, and a retry sends it once.
func TestReconcileSettlesAStaleToolIntentByLookupWithoutSending(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	stale := func(name, key, body string) idem.Intent {
		tool, _ := f.s.Activities.Tools.Of("tool." + name)
		p, err := tool.Op.Prepare([]byte(body), nil)
		if err != nil {
			t.Fatal(err)
		}
		claim, err := f.s.Records.Claim(ctx, idem.ClaimParams{TenantID: testenv.TenantA, Key: key, BizType: tool.Op.BizType,
			Fingerprint: p.Fingerprint, WorkflowID: tool.Op.WorkflowID(testenv.TenantA, key)})
		if err != nil {
			t.Fatal(err)
		}
		in := claim.Record.Intent()
		if err := httptool.MarkSending(ctx, f.s.Pool, in, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := f.s.Pool.Exec(ctx, `UPDATE tool_call SET last_sent_at = now() - interval '1 hour' WHERE idem_key = $1`, key); err != nil {
			t.Fatal(err)
		}
		return in
	}
	// The request reached the downstream, and its answer was lost.
	sent := stale("refund_plain", "sent", `{"payment_id":"pay-s","amount_cents":300}`)
	resp, err := http.DefaultClient.Do(mustRequest(t, "POST", f.dsURL+"/plain/refunds",
		fmt.Sprintf(`{"payment_id":"pay-s","amount_cents":300,"external_id":%q}`, idem.DownstreamKey(testenv.TenantA, "sent", "refund_plain"))))
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("seed the downstream: %v %v", resp, err)
	}
	resp.Body.Close()
	lost := stale("refund_plain", "lost", `{"payment_id":"pay-l","amount_cents":400}`)
	// An at_most_once call left unknown is settled as outcome-unknown.
	once := stale("refund_once", "once", `{"payment_id":"pay-o","amount_cents":500}`)
	posts := f.ds.Posts()

	for _, c := range []struct {
		in   idem.Intent
		want activities.Verdict
	}{{sent, activities.VerdictFromRow}, {lost, activities.VerdictFailed}, {once, activities.VerdictFailed}} {
		v, err := f.s.Activities.ReconcileIntent(ctx, c.in)
		if err != nil || v != c.want {
			t.Fatalf("%s: verdict %s, %v; want %s", c.in.Key, v, err, c.want)
		}
	}
	if f.ds.Posts() != posts {
		t.Fatal("reconcile sent a call")
	}
	// Found by reconcile's lookup, answered as the call would be
	// (found_status: 201).
	r := f.post(testenv.TenantA, "refund_plain", "sent", `{"payment_id":"pay-s","amount_cents":300}`)
	if r.Status != http.StatusCreated || !bytes.Contains(r.Body, []byte(`"payment_id":"pay-s"`)) || r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the settled intent: %d %s", r.Status, r.Body)
	}
	if rec, err := f.s.Records.Get(ctx, testenv.TenantA, "once"); err != nil || !bytes.Contains(rec.Response.Body, []byte("/problems/outcome-unknown")) {
		t.Fatalf("reconcile's answer for the at_most_once intent: %s (%v)", rec.Response.Body, err)
	}
	r = f.post(testenv.TenantA, "refund_once", "once", `{"payment_id":"pay-o","amount_cents":500}`)
	if r.Status != http.StatusBadGateway || !bytes.Contains(r.Body, []byte("/problems/outcome-unknown")) || f.ds.Posts() != posts {
		t.Fatalf("the at_most_once intent after reconcile: %d %s, %d posts (%d before)", r.Status, r.Body, f.ds.Posts(), posts)
	}
	// The FAILED one runs again on a retry: it looks the key up (404),
	// then sends once.
	r = f.post(testenv.TenantA, "refund_plain", "lost", `{"payment_id":"pay-l","amount_cents":400}`)
	if r.Status != http.StatusCreated || f.effects(testenv.TenantA, "lost", "refund_plain") != 1 || f.effects(testenv.TenantA, "sent", "refund_plain") != 1 {
		t.Fatalf("the retried intent: %d %s", r.Status, r.Body)
	}
}

// noSecretAnywhere: the header's value from the environment reached the
// downstream (which refuses any other) and nowhere else: not the logs, the
// stored answers, the tool_call rows, nor any workflow's history (its
// inputs, results and failures, all the Web UI shows).
func (f fixture) noSecretAnywhere(t *testing.T) {
	t.Helper()
	if strings.Contains(f.logs.String(), secret) {
		t.Error("the logs show the secret")
	}
	for _, q := range []string{
		`SELECT count(*) FROM idempotency_record WHERE position(convert_to($1, 'UTF8') IN response_body) > 0 OR strpos(coalesce(error_reason, ''), $1) > 0`,
		`SELECT count(*) FROM tool_call WHERE position(convert_to($1, 'UTF8') IN response_body) > 0`,
	} {
		var n int
		if err := f.s.Pool.QueryRow(context.Background(), q, secret).Scan(&n); err != nil || n != 0 {
			t.Errorf("%d rows show the secret (%v)", n, err)
		}
	}
	ctx := context.Background()
	it, err := f.s.Temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{PageSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(it.Executions) == 0 {
		t.Fatal("no workflow to look into")
	}
	for _, e := range it.Executions {
		h := f.s.Temporal.GetWorkflowHistory(ctx, e.Execution.WorkflowId, e.Execution.RunId, false, 0)
		for h.HasNext() {
			ev, err := h.Next()
			if err != nil {
				t.Fatal(err)
			}
			// Payloads print as text here (JSON in a proto bytes field).
			if strings.Contains(ev.String(), secret) {
				t.Fatalf("the history of %s shows the secret", e.Execution.WorkflowId)
			}
		}
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func mustRequest(t *testing.T, method, url, body string) *http.Request {
	t.Helper()
	r, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Authorization", "Bearer "+secret)
	return r
}

// Each tool is an MCP tool of its name: its arguments are the file's
// schema plus a required idempotency_key; a retry is a replay, changed
// arguments are a CONFLICT, and an at_most_once unknown outcome says so.
func TestEachToolIsAnMCPTool(t *testing.T) {
	f := newFixture(t)
	cs := testenv.MCPSession(t, mcpserver.New(mcpserver.Config{BaseURL: f.s.URL, Token: f.s.Tokens[testenv.TenantA],
		Operations: f.s.Activities.Tools.Operations()}))
	schema := testenv.ToolSchema(t, cs, "refund_plain")
	for _, want := range []string{`"idempotency_key"`, `"maxLength":64`, `"minimum":1`, `"additionalProperties":false`} {
		if !bytes.Contains(schema, []byte(want)) {
			t.Errorf("the tool's schema lacks %s: %s", want, schema)
		}
	}
	call := func(name string, args map[string]any) (*mcp.CallToolResult, testenv.ToolResult) {
		t.Helper()
		return testenv.CallTool(t, cs, name, args)
	}
	args := map[string]any{"idempotency_key": "m-1", "payment_id": "pay-7", "amount_cents": 100}
	res, first := call("refund_plain", args)
	if res.IsError || first.HTTPStatus != 201 || first.Replayed {
		t.Fatalf("first call: %+v %+v", res, first)
	}
	res, again := call("refund_plain", args)
	if res.IsError || !again.Replayed || again.Result["id"] != first.Result["id"] {
		t.Fatalf("retry: %+v %+v", res, again)
	}
	args["amount_cents"] = 200
	if res, _ := call("refund_plain", args); !res.IsError || !strings.Contains(fmt.Sprint(res.Content[0]), "CONFLICT") {
		t.Fatalf("changed arguments: %+v", res)
	}
	if n := f.effects(testenv.TenantA, "m-1", "refund_plain"); n != 1 {
		t.Fatalf("%d refunds", n)
	}
	f.ds.Inject(downstream.Drop)
	res, _ = call("refund_once", map[string]any{"idempotency_key": "m-2", "payment_id": "pay-8", "amount_cents": 100})
	if !res.IsError || !strings.Contains(fmt.Sprint(res.Content[0]), "OUTCOME UNKNOWN") {
		t.Fatalf("an unknown outcome: %+v", res)
	}
}

// The limit the README states for lookup: a request the downstream
// executes after the lookup said 404 is a second effect, once the request
// sent after that 404 executes too. With key_header the same slow request
// is deduplicated: one effect.
func TestLookupCannotSeeARequestThatCommitsAfterIt(t *testing.T) {
	f := newFixture(t)
	f.ds.Late = 4 * time.Second // the slow request commits well after the lookup, 1.3 s after it was sent
	for _, c := range []struct {
		tool string
		want int
	}{{"refund_plain", 2}, {"refund_keyed", 1}} {
		f.ds.Inject(downstream.Slow)
		key := "slow-" + c.tool
		r := f.post(testenv.TenantA, c.tool, key, `{"payment_id":"pay-slow","amount_cents":100}`)
		if r.Status != http.StatusCreated {
			t.Fatalf("%s: %d %s", c.tool, r.Status, r.Body)
		}
		time.Sleep(f.ds.Late) // the slow request is done by now
		if n := f.effects(testenv.TenantA, key, c.tool); n != c.want {
			t.Errorf("%s: %d effects after a request that committed late, want %d", c.tool, n, c.want)
		}
	}
}
