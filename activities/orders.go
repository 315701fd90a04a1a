package activities

import (
	"context"
	"time"

	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/orders"
	"github.com/jackc/pgx/v5"
)

// TransitionOrder applies a pay, cancel, refund or fulfill intent.
func (a *Activities) TransitionOrder(ctx context.Context, in orders.TransitionInput) (idem.Outcome, error) {
	req := orders.ActionRequest{OrderNo: in.OrderNo, Action: in.Action, Request: in.Request}
	return a.execute(ctx, in.Intent, req, func(tx pgx.Tx) (idem.Outcome, error) {
		body, err := orders.Transition(ctx, tx, in, time.Now())
		if err != nil {
			return idem.Outcome{}, err
		}
		return idem.Outcome{Status: 200, Body: body}, nil
	})
}
