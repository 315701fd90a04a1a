// Package payments is a simulated payment provider. Like a real one, it
// takes an idempotency key on every call: a charge retried under the same
// key returns the first charge instead of taking the money twice.
package payments

import (
	"context"
	"fmt"

	"github.com/idemflow/idemflow/idem"
)

// Charge is one captured (or refunded) payment.
type Charge struct {
	Key         string
	OrderNo     string
	AmountMinor int64
	Currency    string
	PaymentRef  string
	Status      string
}

// Capture charges amount under key, within q. Capturing again under the
// same key returns the first charge unchanged.
func Capture(ctx context.Context, q idem.Querier, key, orderNo string, amount int64, currency, ref string) (Charge, error) {
	if _, err := q.Exec(ctx, `
		INSERT INTO payment_charge (idempotency_key, order_no, amount_minor, currency, payment_ref, status)
		VALUES ($1, $2, $3, $4, $5, 'captured') ON CONFLICT (idempotency_key) DO NOTHING`,
		key, orderNo, amount, currency, ref); err != nil {
		return Charge{}, fmt.Errorf("capture %s: %w", key, err)
	}
	return get(ctx, q, key)
}

// Refund refunds the charge captured under key; refunding twice is a no-op.
func Refund(ctx context.Context, q idem.Querier, key string) (Charge, error) {
	if _, err := q.Exec(ctx, `UPDATE payment_charge SET status = 'refunded' WHERE idempotency_key = $1 AND status = 'captured'`, key); err != nil {
		return Charge{}, fmt.Errorf("refund %s: %w", key, err)
	}
	return get(ctx, q, key)
}

// ForOrder returns the key of the order's captured charge.
func ForOrder(ctx context.Context, q idem.Querier, orderNo string) (string, error) {
	var key string
	err := q.QueryRow(ctx, `SELECT idempotency_key FROM payment_charge WHERE order_no = $1 ORDER BY created_at LIMIT 1`, orderNo).Scan(&key)
	if err != nil {
		return "", fmt.Errorf("charge of %s: %w", orderNo, err)
	}
	return key, nil
}

func get(ctx context.Context, q idem.Querier, key string) (Charge, error) {
	c := Charge{Key: key}
	err := q.QueryRow(ctx, `SELECT order_no, amount_minor, currency, payment_ref, status FROM payment_charge WHERE idempotency_key = $1`, key).
		Scan(&c.OrderNo, &c.AmountMinor, &c.Currency, &c.PaymentRef, &c.Status)
	if err != nil {
		return Charge{}, fmt.Errorf("read charge %s: %w", key, err)
	}
	return c, nil
}
