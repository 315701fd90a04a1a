package activities

import (
	"context"
	"time"

	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/orders"
	"github.com/jackc/pgx/v5"
)

// CreateOrder creates the order of an intent, or returns the answer an
// earlier execution stored with it.
func (a *Activities) CreateOrder(ctx context.Context, in orders.CreateInput) (idem.Outcome, error) {
	return a.execute(ctx, in.Intent, in.Request, func(tx pgx.Tx) (idem.Outcome, error) {
		o, body, err := orders.Create(ctx, tx, in, time.Now())
		if err != nil {
			return idem.Outcome{}, err
		}
		return idem.Outcome{Status: 201, Body: body, Location: o.Location()}, nil
	})
}

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
