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
		return runIntent(ctx, in.Intent, activity, "in one PostgreSQL transaction", in)
	}
}

// ToolCall is the workflow of HTTP tools, whose activity (registered as
// activity) calls the tool's API between two transactions. It differs
// from Operation only in how the Web UI describes the step.
func ToolCall(activity string) func(ctx workflow.Context, in op.Input) (idem.Outcome, error) {
	return func(ctx workflow.Context, in op.Input) (idem.Outcome, error) {
		return runIntent(ctx, in.Intent, activity, "as one call to its HTTP API, resent under the same key or looked up, never blind", in)
	}
}
