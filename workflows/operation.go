package workflows

import (
	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/op"
	"go.temporal.io/sdk/workflow"
)

// Operation is the workflow of a declared operation whose step is the
// activity registered as activity. The worker registers it under the
// operation's workflow name.
func Operation(activity string) func(ctx workflow.Context, in op.Input) (idem.Outcome, error) {
	return func(ctx workflow.Context, in op.Input) (idem.Outcome, error) {
		return runIntent(ctx, in.Intent, activity, in)
	}
}
