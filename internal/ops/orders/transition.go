package orders

// Changing an order's state, with each action's side effects.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/internal/apperr"
	"github.com/idemflow/idemflow/internal/ops/orders/payments"
	"github.com/jackc/pgx/v5"
)

// setStatus is the only way an order's status changes (with its queued
// form, queueSetStatus): one UPDATE that names the expected state, checked
// by the rows it affected.
func setStatus(ctx context.Context, q idem.Querier, tenantID, orderNo string, from, to Status, now time.Time) error {
	if err := checkTransition(orderNo, from, to); err != nil {
		return err
	}
	tag, err := q.Exec(ctx, `UPDATE purchase_order SET status = $4, updated_at = $5
		WHERE order_no = $1 AND tenant_id = $2 AND status = $3`, orderNo, tenantID, from, to, now)
	if err != nil {
		return fmt.Errorf("order %s %s->%s: %w", orderNo, from, to, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	var cur Status
	if err := q.QueryRow(ctx, `SELECT status FROM purchase_order WHERE order_no = $1 AND tenant_id = $2`, orderNo, tenantID).Scan(&cur); err != nil {
		return fmt.Errorf("order %s: %w", orderNo, err)
	}
	return apperr.InvalidTransition("order "+orderNo, string(cur), string(to))
}

// queueSetStatus queues setStatus's UPDATE on b, for an order that b
// writes in the state from before it: the INSERT ahead of it in the same
// pipeline either wrote the row, or failed the pipeline before this runs.
// Its rows are not counted: b goes out with the commit (op.Later), and a
// count read in Go comes after the COMMIT has run.
func queueSetStatus(b *pgx.Batch, tenantID, orderNo string, from, to Status, now time.Time) error {
	if err := checkTransition(orderNo, from, to); err != nil {
		return err
	}
	b.Queue(`UPDATE purchase_order SET status = $4, updated_at = $5
		WHERE order_no = $1 AND tenant_id = $2 AND status = $3`, orderNo, tenantID, from, to, now)
	return nil
}

// Transition applies an action within tx and returns the answer to store.
// The order row is locked first; the status change still names the state
// it expects.
func Transition(ctx context.Context, tx idem.Querier, in TransitionInput, now time.Time) ([]byte, error) {
	to, ok := in.Action.Target()
	if !ok {
		return nil, &apperr.RejectedError{Code: "unknown-action", Reason: "no action " + string(in.Action), Status: 404}
	}
	o, err := get(ctx, tx, in.Intent.TenantID, in.OrderNo, true)
	if errors.Is(err, apperr.ErrNotFound) {
		return nil, &apperr.RejectedError{Code: "order-not-found", Reason: "no order " + in.OrderNo, Status: 404}
	}
	if err != nil {
		return nil, err
	}
	from := o.Status
	if err := checkTransition(o.OrderNo, from, to); err != nil {
		return nil, err
	}
	if err := sideEffect(in.Action)(ctx, tx, o, in); err != nil {
		return nil, err
	}
	if err := setStatus(ctx, tx, o.TenantID, o.OrderNo, from, to, now); err != nil {
		return nil, err
	}
	o.Status = to
	body := mustJSON(TransitionView{OrderNo: o.OrderNo, Action: in.Action, FromStatus: from, ToStatus: to,
		IdempotencyKey: in.Intent.Key, WorkflowID: in.Intent.WorkflowID, Order: o.View()})
	if err := addEvent(ctx, tx, o.OrderNo, in.Intent, from, to, body); err != nil {
		return nil, err
	}
	return body, nil
}

// effect is what an action does besides the state change, in the same
// transaction.
type effect func(ctx context.Context, tx idem.Querier, o Order, in TransitionInput) error

func sideEffect(a Action) effect {
	switch a {
	case ActionPay:
		return capture
	case ActionRefund:
		return refund
	case ActionFulfill:
		return ship
	case ActionCancel:
		return cancel
	}
	return func(context.Context, idem.Querier, Order, TransitionInput) error { return nil }
}

// capture charges the order. The provider is called with a key derived
// from the intent, so a retried payment step finds its first charge.
func capture(ctx context.Context, tx idem.Querier, o Order, in TransitionInput) error {
	_, err := payments.Capture(ctx, tx, in.Intent.WorkflowID+"#capture", o.OrderNo, o.TotalMinor, o.Currency, in.Request.PaymentRef)
	return err
}

// refund returns the money. A refund comes before fulfilment (PAID ->
// REFUNDED): nothing shipped, so the reserved stock is for sale again.
func refund(ctx context.Context, tx idem.Querier, o Order, _ TransitionInput) error {
	key, err := payments.ForOrder(ctx, tx, o.OrderNo)
	if err != nil {
		return err
	}
	if _, err := payments.Refund(ctx, tx, key); err != nil {
		return err
	}
	return releaseStock(ctx, tx, o, true)
}

// ship uses the reservation up: the units are gone, not returned.
func ship(ctx context.Context, tx idem.Querier, o Order, _ TransitionInput) error {
	return releaseStock(ctx, tx, o, false)
}

// cancel puts the stock back on sale and gives the coupon back.
func cancel(ctx context.Context, tx idem.Querier, o Order, _ TransitionInput) error {
	if err := releaseStock(ctx, tx, o, true); err != nil {
		return err
	}
	if o.CouponCode == "" {
		return nil
	}
	tag, err := tx.Exec(ctx, `DELETE FROM coupon_redemption WHERE code = $1 AND order_no = $2`, o.CouponCode, o.OrderNo)
	if err != nil {
		return fmt.Errorf("release coupon: %w", err)
	}
	if tag.RowsAffected() == 1 {
		if _, err := tx.Exec(ctx, `UPDATE coupon SET uses = uses - 1 WHERE tenant_id = $1 AND code = $2 AND uses > 0`, o.TenantID, o.CouponCode); err != nil {
			return fmt.Errorf("release coupon: %w", err)
		}
	}
	return nil
}
