package orders

// Order events: one row per applied change, the business row of every
// order intent.

import (
	"context"
	"fmt"
	"time"

	"github.com/idemflow/idemflow/idem"
	"github.com/jackc/pgx/v5"
)

func addEvent(ctx context.Context, q idem.Querier, orderNo string, it idem.Intent, from, to Status, body []byte) error {
	if _, err := q.Exec(ctx, eventSQL, orderNo, it.TenantID, it.Key, it.Fingerprint, from, to, body); err != nil {
		return fmt.Errorf("order event: %w", err)
	}
	return nil
}

// queueEvent queues addEvent's INSERT on b.
func queueEvent(b *pgx.Batch, orderNo string, it idem.Intent, from, to Status, body []byte) {
	b.Queue(eventSQL, orderNo, it.TenantID, it.Key, it.Fingerprint, from, to, body)
}

const eventSQL = `INSERT INTO order_event (order_no, tenant_id, idem_key, fingerprint, from_status, to_status, response_body)
	VALUES ($1,$2,$3,$4,$5,$6,$7)`

// Event is one applied state change of an order, for operators.
type Event struct {
	OrderNo string    `json:"order_no"`
	Key     string    `json:"idempotency_key"`
	From    Status    `json:"from"`
	To      Status    `json:"to"`
	At      time.Time `json:"at"`
}

// EventsOf lists, oldest first, the events of the order that key created,
// or the event key made: what 'idemflow inspect' shows beside an intent.
func EventsOf(ctx context.Context, q idem.Querier, tenantID, key string) ([]Event, error) {
	rows, err := q.Query(ctx, `SELECT e.order_no, e.idem_key, e.from_status, e.to_status, e.at FROM order_event e
		WHERE e.tenant_id = $1 AND (e.idem_key = $2 OR e.order_no IN
			(SELECT order_no FROM purchase_order WHERE tenant_id = $1 AND idem_key = $2))
		ORDER BY e.id`, tenantID, key)
	if err != nil {
		return nil, fmt.Errorf("order events of %s: %w", key, err)
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		var e Event
		var from, to string
		if err := rows.Scan(&e.OrderNo, &e.Key, &from, &to, &e.At); err != nil {
			return nil, err
		}
		e.From, e.To = Status(from), Status(to)
		out = append(out, e)
	}
	return out, rows.Err()
}

// eventLines are the events of EventsOf as an operator reads them
// (op.Spec.Inspect).
func eventLines(ctx context.Context, q idem.Querier, tenantID, key string) ([]string, error) {
	events, err := EventsOf(ctx, q, tenantID, key)
	var lines []string
	for _, e := range events {
		lines = append(lines, fmt.Sprintf("event %s %s -> %s at %s (key %s)", e.OrderNo, e.From, e.To, e.At.UTC().Format(time.RFC3339), e.Key))
	}
	return lines, err
}
