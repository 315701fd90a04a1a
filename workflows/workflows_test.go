package workflows_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/idemflow/idemflow/activities"
	"github.com/idemflow/idemflow/httptool"
	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/idemflowtest/downstream"
	"github.com/idemflow/idemflow/internal/ops/orders"
	"github.com/idemflow/idemflow/internal/ops/tickets"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
	"github.com/idemflow/idemflow/op"
	"github.com/idemflow/idemflow/starter"
	"github.com/idemflow/idemflow/workflows"
	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

var record = flag.Bool("record", false, "re-record testdata histories from a real run")

var a *activities.Activities

func ticketInput() op.Input {
	it := idem.Intent{TenantID: "acme", Key: "k", BizType: tickets.BizType, Fingerprint: "fp", WorkflowID: tickets.WorkflowID("acme", "k")}
	return op.Input{Intent: it, Request: json.RawMessage(`{"customer_id":"c","title":"t","priority":"normal"}`)}
}

// createTicket is the ticket's workflow and activity type: a declared
// operation's, registered by name as the worker does.
var createTicket = tickets.Create.Workflow

func newEnv(t *testing.T) *testsuite.TestWorkflowEnvironment {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	registerOperation(env, tickets.Create)
	env.RegisterActivityWithOptions(activities.Operation{Activities: a, Ops: []*op.Operation{tickets.Create}}.Run, activity.RegisterOptions{Name: tickets.Create.Activity})
	env.RegisterActivity(a)
	return env
}

func TestCreateTicketReturnsTheActivityAnswer(t *testing.T) {
	env := newEnv(t)
	want := idem.Outcome{Status: 201, Body: []byte(`{"ticket_id":"x"}`), Location: "/v1/tickets/x"}
	env.OnActivity(tickets.Create.Activity, mock.Anything, mock.Anything).Return(want, nil).Once()
	env.ExecuteWorkflow(createTicket, ticketInput())
	var got idem.Outcome
	if err := env.GetWorkflowResult(&got); err != nil {
		t.Fatal(err)
	}
	if got.Status != want.Status || string(got.Body) != string(want.Body) || got.Location != want.Location {
		t.Fatalf("got %+v", got)
	}
	env.AssertExpectations(t)
}

func TestBusinessRejectionFailsTheRunWithoutSettling(t *testing.T) {
	env := newEnv(t)
	out := idem.Outcome{Status: 422, Body: []byte(`{"type":"/problems/out-of-stock"}`)}
	env.OnActivity(tickets.Create.Activity, mock.Anything, mock.Anything).
		Return(idem.Outcome{}, temporal.NewNonRetryableApplicationError("no", idem.ErrTypeRejected, nil, out)).Once()
	// AssertNotCalled sees only mocked activities: ResolveIntent is mocked
	// so that a call to it is recorded, and fails the test.
	settled := false
	env.OnActivity(a.ResolveIntent, mock.Anything, mock.Anything).Return(
		func(context.Context, activities.ResolveInput) (activities.Resolution, error) {
			settled = true
			return activities.Resolution{}, nil
		}).Maybe()
	env.ExecuteWorkflow(createTicket, ticketInput())
	err := env.GetWorkflowError()
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != idem.ErrTypeRejected {
		t.Fatalf("want the rejection, got %v", err)
	}
	if settled {
		t.Fatal("a business rejection was settled: the activity already wrote FAILED")
	}
}

func TestGivingUpSettlesTheRecord(t *testing.T) {
	for _, tc := range []struct {
		name    string
		settled activities.Resolution
		wantErr bool
	}{
		{"row was committed after all", activities.Resolution{Status: idem.StatusSuccess, Action: "backfilled", Outcome: idem.Outcome{Status: 201, Body: []byte(`{}`)}}, false},
		{"nothing written", activities.Resolution{Status: idem.StatusFailed, Action: "failed"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newEnv(t)
			env.OnActivity(tickets.Create.Activity, mock.Anything, mock.Anything).Return(idem.Outcome{}, errors.New("db down"))
			var settledWith activities.ResolveInput
			env.OnActivity(a.ResolveIntent, mock.Anything, mock.Anything).Return(
				func(_ context.Context, in activities.ResolveInput) (activities.Resolution, error) {
					settledWith = in
					return tc.settled, nil
				}).Once()
			env.ExecuteWorkflow(createTicket, ticketInput())
			if err := env.GetWorkflowError(); (err != nil) != tc.wantErr {
				t.Fatalf("workflow error %v, want error: %v", err, tc.wantErr)
			}
			if settledWith.Intent != ticketInput().Intent {
				t.Fatalf("settled %+v", settledWith.Intent)
			}
		})
	}
}

// histories map each recorded history (from real runs) to the workflow
// it replays, registered as the worker registers it; -record re-records
// those at the top of testdata. The first ticket and order histories were
// recorded when CreateTicket and CreateOrder were functions of their own:
// they replay on the declared operations' workflow.
//
// The histories under with_intent_status/ were recorded before #22, when
// every run started with IntentStatus and upserted it as it ended; runs of
// that shape may still be open when a worker is upgraded, so they must
// keep replaying. -record leaves them as they are (no gateway starts that
// shape any more) and records the current shape beside them.
func histories() map[string]func(worker.WorkflowRegistry) {
	histories := map[string]func(worker.WorkflowRegistry){}
	for _, dir := range []string{"testdata/", "testdata/with_intent_status/"} {
		histories[dir+"create_ticket_history.json"] = func(r worker.WorkflowRegistry) { registerOperation(r, tickets.Create) }
		histories[dir+"create_order_history.json"] = func(r worker.WorkflowRegistry) { registerOperation(r, orders.Create) }
		histories[dir+"transition_order_history.json"] = func(r worker.WorkflowRegistry) { registerOperation(r, orders.Pay) }
		// An HTTP tool's call whose first answer was dropped after the
		// downstream committed, resent under the same key.
		histories[dir+"tool_call_history.json"] = func(r worker.WorkflowRegistry) {
			r.RegisterWorkflowWithOptions(workflows.ToolCall(httptool.Activity), workflow.RegisterOptions{Name: httptool.Workflow})
		}
	}
	return histories
}

func registerOperation(r worker.WorkflowRegistry, o *op.Operation) {
	r.RegisterWorkflowWithOptions(workflows.Operation(o.Activity), workflow.RegisterOptions{Name: o.Workflow})
}

// TestReplayRecordedHistory replays histories recorded from real runs
// (go test ./workflows -run Replay -record re-records them). A change to a
// workflow that would break running executions fails here.
func TestReplayRecordedHistory(t *testing.T) {
	if *record {
		recordHistories(t)
	}
	for file, register := range histories() {
		r := worker.NewWorkflowReplayer()
		register(r)
		if err := r.ReplayWorkflowHistoryFromJSONFile(nil, file); err != nil {
			t.Fatalf("replay %s: %v", file, err)
		}
	}
}

// prepared is tenant acme's submission of body (and path) under key, as
// the gateway builds it.
func prepared(o *op.Operation, key, body string, path map[string]string) (starter.Intent, error) {
	p, err := o.Prepare([]byte(body), path)
	if err != nil {
		return starter.Intent{}, err
	}
	return starter.OperationIntent(o, "acme", key, p), nil
}

func recordHistories(t *testing.T) {
	ds := downstream.New()
	srv := httptest.NewServer(ds.Handler())
	t.Cleanup(srv.Close)
	tools, err := httptool.Parse([]byte(`
tools:
  - name: refund
    description: Refund at a downstream that deduplicates by Idempotency-Key.
    input_schema: {type: object, required: [payment_id, amount_cents], properties: {payment_id: {type: string}, amount_cents: {type: integer}}}
    call: {method: POST, url: "`+srv.URL+`/keyed/refunds", key_header: Idempotency-Key, timeout: 1s}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	s := testenv.NewStack(t, testenv.Options{Tools: tools})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := &starter.Starter{Temporal: s.Temporal, Records: s.Records, SearchAttributes: true}
	submit := func(in starter.Intent, err error) starter.Reply {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		in.Wait = 10 * time.Second
		reply, err := st.Submit(ctx, in)
		if err != nil || !reply.Done {
			t.Fatalf("submit %s: %+v %v", in.WorkflowID, reply, err)
		}
		return reply
	}
	submit(prepared(tickets.Create, "replay-1", `{"customer_id":"c-1","title":"Recorded","priority":"low"}`, nil))
	testenv.SaveHistory(t, s.Temporal, tickets.WorkflowID("acme", "replay-1"), "", "testdata/create_ticket_history.json")
	created := submit(prepared(orders.Create, "replay-2", `{"customer_id":"c-1","items":[{"sku":"SKU-MOUSE","quantity":1}]}`, nil))
	testenv.SaveHistory(t, s.Temporal, orders.WorkflowID("acme", "replay-2"), "", "testdata/create_order_history.json")
	var v orders.View
	if err := json.Unmarshal(created.Outcome.Body, &v); err != nil {
		t.Fatal(err)
	}
	submit(prepared(orders.Pay, "replay-3", `{"payment_ref":"psp-1"}`, map[string]string{"order_no": v.OrderNo}))
	testenv.SaveHistory(t, s.Temporal, orders.TransitionWorkflowID(orders.ActionPay, "acme", "replay-3"), "", "testdata/transition_order_history.json")
	refund := tools.Tools()[0].Op
	ds.Inject(downstream.Drop)
	submit(prepared(refund, "replay-4", `{"payment_id":"pay-1","amount_cents":100}`, nil))
	if n := ds.Effects(idem.DownstreamKey("acme", "replay-4", "refund")); n != 1 {
		t.Fatalf("%d refunds recorded", n)
	}
	testenv.SaveHistory(t, s.Temporal, refund.WorkflowID("acme", "replay-4"), "", "testdata/tool_call_history.json")
}

// The local-first path every run takes: the step
// runs as a local activity; a failure that may pass falls back to the
// regular activity, whose retries are durable; a rejection does not.
func TestLocalFirstRunsLocallyAndFallsBackToADurableActivity(t *testing.T) {
	want := idem.Outcome{Status: 201, Body: []byte(`{"ticket_id":"x"}`)}
	rejection := temporal.NewNonRetryableApplicationError("no", idem.ErrTypeRejected, nil, idem.Outcome{Status: 422})
	for _, tc := range []struct {
		name string
		// local and regular answer each attempt of their kind.
		local, regular  func(n int) (idem.Outcome, error)
		wantLocal       string // "once" or "retried"
		wantRegular     int
		wantErrType     string
		wantSettleCalls int
	}{
		{name: "local succeeds", local: func(int) (idem.Outcome, error) { return want, nil }, wantLocal: "once"},
		{name: "local keeps failing, the durable activity succeeds",
			local:     func(int) (idem.Outcome, error) { return idem.Outcome{}, errors.New("db down") },
			regular:   func(int) (idem.Outcome, error) { return want, nil },
			wantLocal: "retried", wantRegular: 1},
		{name: "a rejection is final, with no fallback and no settling",
			local:     func(int) (idem.Outcome, error) { return idem.Outcome{}, rejection },
			wantLocal: "once", wantErrType: idem.ErrTypeRejected},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newEnv(t)
			var locals, regulars, settles int
			env.OnActivity(tickets.Create.Activity, mock.Anything, mock.Anything).Return(
				func(ctx context.Context, _ op.Input) (idem.Outcome, error) {
					if activity.GetInfo(ctx).IsLocalActivity {
						locals++
						return tc.local(locals)
					}
					regulars++
					if tc.regular == nil {
						t.Error("the durable activity ran")
						return want, nil
					}
					return tc.regular(regulars)
				})
			env.OnActivity(a.ResolveIntent, mock.Anything, mock.Anything).Return(
				func(context.Context, activities.ResolveInput) (activities.Resolution, error) {
					settles++
					return activities.Resolution{Status: idem.StatusFailed}, nil
				}).Maybe()
			in := ticketInput()
			env.ExecuteWorkflow(createTicket, in)
			err := env.GetWorkflowError()
			var appErr *temporal.ApplicationError
			switch {
			case tc.wantErrType != "":
				if !errors.As(err, &appErr) || appErr.Type() != tc.wantErrType {
					t.Fatalf("want %s, got %v", tc.wantErrType, err)
				}
			case err != nil:
				t.Fatalf("workflow error %v", err)
			default:
				var got idem.Outcome
				if err := env.GetWorkflowResult(&got); err != nil || string(got.Body) != string(want.Body) {
					t.Fatalf("result %+v %v", got, err)
				}
			}
			if (tc.wantLocal == "once" && locals != 1) || (tc.wantLocal == "retried" && locals < 2) {
				t.Errorf("local attempts %d, want %s", locals, tc.wantLocal)
			}
			if regulars != tc.wantRegular || settles != tc.wantSettleCalls {
				t.Errorf("durable attempts %d, settled %d; want %d, %d", regulars, settles, tc.wantRegular, tc.wantSettleCalls)
			}
		})
	}
}

// A transition started before its operation was a declaration carried the
// order beside the request ({"intent", "order_no", "action", "request"}).
// A new worker that runs its activity again must read it as the run meant
// it: the recorded run's input still matches its intent's fingerprint.
func TestARunStartedBeforeTheDeclarationsStillMatchesItsFingerprint(t *testing.T) {
	raw, err := os.ReadFile("testdata/with_intent_status/transition_order_history.json")
	if err != nil {
		t.Fatal(err)
	}
	var h struct {
		Events []struct {
			Started struct {
				Input struct {
					Payloads []struct {
						Data []byte `json:"data"`
					} `json:"payloads"`
				} `json:"input"`
			} `json:"workflowExecutionStartedEventAttributes"`
		} `json:"events"`
	}
	if err := json.Unmarshal(raw, &h); err != nil {
		t.Fatal(err)
	}
	data := h.Events[0].Started.Input.Payloads[0].Data
	if !strings.Contains(string(data), `"order_no"`) || strings.Contains(string(data), `"request":{"order_no"`) {
		t.Fatalf("the recorded input is not of the old shape: %s", data)
	}
	var in op.Input
	if err := json.Unmarshal(data, &in); err != nil {
		t.Fatal(err)
	}
	fp, err := orders.Pay.Fingerprint(in)
	if err != nil || fp != in.Intent.Fingerprint {
		t.Fatalf("fingerprint %s (%v), the intent's %s", fp, err, in.Intent.Fingerprint)
	}
}
