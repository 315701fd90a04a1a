package activities_test

import (
	"context"
	"encoding/json"

	"github.com/idemflow/idemflow/activities"
	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/internal/ops/tickets"
	"github.com/idemflow/idemflow/op"
)

// ticketIntent is a ticket's intent as these tests handle it: the intent
// and its request, which reach the ticket's activity as op.Input.
type ticketIntent struct {
	Intent  idem.Intent
	Request tickets.Request
}

func (in ticketIntent) input() op.Input {
	raw, err := json.Marshal(in.Request)
	if err != nil {
		panic(err)
	}
	return op.Input{Intent: in.Intent, Request: raw}
}

// createTicket runs the ticket's activity, as the worker registers it.
func createTicket(a *activities.Activities, ctx context.Context, in ticketIntent) (idem.Outcome, error) {
	return activities.Operation{Activities: a, Ops: []*op.Operation{tickets.Create}}.Run(ctx, in.input())
}

// newTicket is the row the ticket's step would write for in.
func newTicket(in ticketIntent) tickets.Ticket {
	return tickets.New(op.In[tickets.Request]{TenantID: in.Intent.TenantID, Key: in.Intent.Key,
		WorkflowID: in.Intent.WorkflowID, Fingerprint: in.Intent.Fingerprint, Request: in.Request})
}

// fingerprint is the ticket request's, as the gateway computes it.
func fingerprint(req tickets.Request) (string, error) { return idem.Fingerprint(tickets.BizType, req) }
