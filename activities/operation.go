package activities

import (
	"context"
	"slices"

	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/op"
	"github.com/jackc/pgx/v5"
	"go.temporal.io/sdk/temporal"
)

// Operation is the activity of declared operations: the step of each
// intent's, in the transaction that holds the record locked and finishes
// it. Ops are the operations that share the activity (one, or an order's
// transitions); the intent's business type names its own. The worker
// registers Run under their activity name.
type Operation struct {
	*Activities
	Ops []*op.Operation
}

// Run runs the step of the intent's operation, or returns the answer an
// earlier execution stored.
func (a Operation) Run(ctx context.Context, in op.Input) (idem.Outcome, error) {
	i := slices.IndexFunc(a.Ops, func(o *op.Operation) bool { return o.BizType == in.Intent.BizType })
	if i < 0 {
		return idem.Outcome{}, temporal.NewNonRetryableApplicationError(
			"no operation of this activity is a "+in.Intent.BizType, idem.ErrTypeForged, nil)
	}
	o := a.Ops[i]
	return a.execute(ctx, in.Intent, operationRequest{o, in}, func(tx pgx.Tx) (idem.Outcome, error) {
		return o.Run(ctx, tx, in)
	})
}

// operationRequest is an input's request, fingerprinted by its operation.
type operationRequest struct {
	op *op.Operation
	in op.Input
}

func (r operationRequest) Fingerprint() (string, error) { return r.op.Fingerprint(r.in) }
