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
	r := &operationRequest{op: a.Ops[i], in: in}
	return a.execute(ctx, in.Intent, r, func(tx pgx.Tx) (idem.Outcome, error) {
		d, err := r.decoded()
		if err != nil {
			return idem.Outcome{}, err
		}
		return r.op.RunDecoded(ctx, tx, d)
	})
}

// operationRequest is an input's request, decoded once per execution:
// the fingerprint checked first and the step (run again on the long way)
// read the same decode.
type operationRequest struct {
	op  *op.Operation
	in  op.Input
	dec *op.Decoded
}

func (r *operationRequest) decoded() (op.Decoded, error) {
	if r.dec == nil {
		d, err := r.op.DecodeInput(r.in)
		if err != nil {
			return op.Decoded{}, err
		}
		r.dec = &d
	}
	return *r.dec, nil
}

func (r *operationRequest) Fingerprint() (string, error) {
	d, err := r.decoded()
	if err != nil {
		return "", err
	}
	return r.op.FingerprintOf(d)
}
