package workflows

import (
	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/orders"
	"go.temporal.io/sdk/workflow"
)

// TransitionOrder applies one pay, cancel, refund or fulfill intent.
//
// Each transition is its own short workflow under its own key, not an
// update to a long-lived order workflow: it reuses the same start-or-attach
// path as creation (one derived ID per key); an order workflow would have
// to stay open until the last possible refund, for weeks; and the database
// state machine, whose every UPDATE names the expected state, is the
// arbiter between racing transitions either way, so serialising them
// through one workflow would add latency and nothing to correctness.
func TransitionOrder(ctx workflow.Context, in orders.TransitionInput) (idem.Outcome, error) {
	return runIntent(ctx, in.Intent, a.TransitionOrder, in)
}
