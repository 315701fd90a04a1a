package activities

import (
	"context"
	"errors"
	"time"

	"github.com/idemflow/idemflow/apperr"
	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/orders"
	"github.com/jackc/pgx/v5"
)

// CreateOrder creates the order of an intent, or returns the answer an
// earlier execution stored with it.
func (a *Activities) CreateOrder(ctx context.Context, in orders.CreateInput) (idem.Outcome, error) {
	return a.execute(ctx, in.Intent, func(tx pgx.Tx) (idem.Outcome, error) {
		if out, err := orders.Answer(ctx, tx, in.Intent); !errors.Is(err, apperr.ErrNotFound) {
			return out, err
		}
		o, body, err := orders.Create(ctx, tx, in, time.Now())
		if err != nil {
			return idem.Outcome{}, err
		}
		return idem.Outcome{Status: 201, Body: body, Location: o.Location()}, nil
	})
}

// TransitionOrder applies a pay, cancel, refund or fulfill intent.
func (a *Activities) TransitionOrder(ctx context.Context, in orders.TransitionInput) (idem.Outcome, error) {
	return a.execute(ctx, in.Intent, func(tx pgx.Tx) (idem.Outcome, error) {
		if out, err := orders.Answer(ctx, tx, in.Intent); !errors.Is(err, apperr.ErrNotFound) {
			return out, err
		}
		body, err := orders.Transition(ctx, tx, in, time.Now())
		if err != nil {
			return idem.Outcome{}, err
		}
		return idem.Outcome{Status: 200, Body: body}, nil
	})
}
