package workflows

import (
	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/op"
	"go.temporal.io/sdk/workflow"
)

// Operation runs one intent of a declared operation. The worker registers
// it under each operation's workflow name, and the operation's activity
// under its business type, which the intent names.
func Operation(ctx workflow.Context, in op.Input) (idem.Outcome, error) {
	return runIntent(ctx, in.Intent, in.Intent.BizType, in)
}
