package activities

import (
	"context"

	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/op"
	"github.com/jackc/pgx/v5"
	"go.temporal.io/sdk/temporal"
)

// Operation is the activity of one declared operation: its step, in the
// transaction that holds the record locked and finishes it, as every
// built-in step runs. The worker registers Run under the operation's
// business type.
type Operation struct {
	*Activities
	Op *op.Operation
}

// Run runs the operation's step for one intent, or returns the answer an
// earlier execution stored.
func (a Operation) Run(ctx context.Context, in op.Input) (idem.Outcome, error) {
	if in.Intent.BizType != a.Op.BizType {
		return idem.Outcome{}, temporal.NewNonRetryableApplicationError(
			"the intent is a "+in.Intent.BizType+", not a "+a.Op.BizType, idem.ErrTypeForged, nil)
	}
	return a.execute(ctx, in.Intent, operationRequest{a.Op, in}, func(tx pgx.Tx) (idem.Outcome, error) {
		return a.Op.Run(ctx, tx, in)
	})
}

// operationRequest is an input's request, fingerprinted by its operation.
type operationRequest struct {
	op *op.Operation
	in op.Input
}

func (r operationRequest) Fingerprint() (string, error) { return r.op.Fingerprint(r.in) }
