package activities

import (
	"context"

	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/tickets"
	"github.com/jackc/pgx/v5"
)

// CreateTicket inserts the ticket of an intent, or returns the one an
// earlier execution inserted.
func (a *Activities) CreateTicket(ctx context.Context, in tickets.CreateInput) (idem.Outcome, error) {
	return a.execute(ctx, in.Intent, in.Request, func(tx pgx.Tx) (idem.Outcome, error) {
		t, err := tickets.Insert(ctx, tx, tickets.New(in))
		if err != nil {
			return idem.Outcome{}, err
		}
		return t.Outcome(), nil
	})
}
