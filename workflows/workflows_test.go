package workflows_test

import (
	"context"
	"errors"
	"flag"
	"testing"
	"time"

	"github.com/idemflow/idemflow/activities"
	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/starter"
	"github.com/idemflow/idemflow/testenv"
	"github.com/idemflow/idemflow/tickets"
	"github.com/idemflow/idemflow/workflows"
	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
)

var record = flag.Bool("record", false, "re-record testdata histories from a real run")

var a *activities.Activities

func ticketInput() tickets.CreateInput {
	it := idem.Intent{TenantID: "acme", Key: "k", BizType: tickets.BizType, Fingerprint: "fp", WorkflowID: workflows.TicketWorkflowID("acme", "k")}
	return tickets.CreateInput{Intent: it, Request: tickets.Request{CustomerID: "c", Title: "t", Priority: "normal"}}
}

func newEnv(t *testing.T) *testsuite.TestWorkflowEnvironment {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflow(workflows.CreateTicket)
	env.RegisterActivity(a)
	return env
}

func TestCreateTicketReturnsTheActivityAnswer(t *testing.T) {
	env := newEnv(t)
	want := idem.Outcome{Status: 201, Body: []byte(`{"ticket_id":"x"}`), Location: "/v1/tickets/x"}
	env.OnActivity(a.CreateTicket, mock.Anything, mock.Anything).Return(want, nil).Once()
	env.ExecuteWorkflow(workflows.CreateTicket, ticketInput())
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
	env.OnActivity(a.CreateTicket, mock.Anything, mock.Anything).
		Return(idem.Outcome{}, temporal.NewNonRetryableApplicationError("no", activities.ErrTypeRejected, nil, out)).Once()
	env.ExecuteWorkflow(workflows.CreateTicket, ticketInput())
	err := env.GetWorkflowError()
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != activities.ErrTypeRejected {
		t.Fatalf("want the rejection, got %v", err)
	}
	env.AssertNotCalled(t, "ResolveIntent", mock.Anything, mock.Anything)
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
			env.OnActivity(a.CreateTicket, mock.Anything, mock.Anything).Return(idem.Outcome{}, errors.New("db down"))
			var settledWith activities.ResolveInput
			env.OnActivity(a.ResolveIntent, mock.Anything, mock.Anything).Return(
				func(_ context.Context, in activities.ResolveInput) (activities.Resolution, error) {
					settledWith = in
					return tc.settled, nil
				}).Once()
			env.ExecuteWorkflow(workflows.CreateTicket, ticketInput())
			if err := env.GetWorkflowError(); (err != nil) != tc.wantErr {
				t.Fatalf("workflow error %v, want error: %v", err, tc.wantErr)
			}
			if settledWith.Intent != ticketInput().Intent {
				t.Fatalf("settled %+v", settledWith.Intent)
			}
		})
	}
}

const historyFile = "testdata/create_ticket_history.json"

// TestReplayRecordedHistory replays a history recorded from a real run
// (go test ./workflows -run Replay -record re-records it). A change to
// CreateTicket that would break running executions fails here.
func TestReplayRecordedHistory(t *testing.T) {
	if *record {
		recordHistory(t)
	}
	r := worker.NewWorkflowReplayer()
	r.RegisterWorkflow(workflows.CreateTicket)
	if err := r.ReplayWorkflowHistoryFromJSONFile(nil, historyFile); err != nil {
		t.Fatalf("replay %s: %v", historyFile, err)
	}
}

func recordHistory(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	in, err := starter.TicketIntent("acme", "replay-1", tickets.Request{CustomerID: "c-1", Title: "Recorded", Priority: "low"})
	if err != nil {
		t.Fatal(err)
	}
	in.Wait = 10 * time.Second
	if _, err := (&starter.Starter{Temporal: s.Temporal, Records: s.Records}).Submit(ctx, in); err != nil {
		t.Fatal(err)
	}
	testenv.SaveHistory(t, s.Temporal, in.WorkflowID, "", historyFile)
}
