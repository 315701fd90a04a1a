package workflows

import (
	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/tickets"
	"go.temporal.io/sdk/workflow"
)

// CreateTicket creates the ticket of one intent. Its result is the stored
// answer; a business rejection fails the workflow (so that the reuse policy
// lets a later retry run again) with the rejection's answer in the error.
func CreateTicket(ctx workflow.Context, in tickets.CreateInput) (idem.Outcome, error) {
	return runIntent(ctx, in.Intent, a.CreateTicket, in)
}
