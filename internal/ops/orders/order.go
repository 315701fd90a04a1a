package orders

// The order and its views: what an answer shows, and the reads.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/internal/apperr"
	"github.com/idemflow/idemflow/op"
	"github.com/jackc/pgx/v5"
)

// Line is one item of an order, priced by the server.
type Line struct {
	SKU            string `json:"sku"`
	Quantity       int    `json:"quantity"`
	UnitPriceMinor int64  `json:"unit_price_minor"`
	LineTotalMinor int64  `json:"line_total_minor"`
}

// Order is a row of purchase_order with its items.
type Order struct {
	OrderNo        string
	TenantID       string
	IdempotencyKey string
	Fingerprint    string
	WorkflowID     string
	CustomerID     string
	Status         Status
	Items          []Line
	SubtotalMinor  int64
	DiscountMinor  int64
	TotalMinor     int64
	Currency       string
	CouponCode     string
	CreatedAt      time.Time
}

// View is an order's JSON representation.
type View struct {
	OrderNo        string `json:"order_no"`
	Status         Status `json:"status"`
	CustomerID     string `json:"customer_id"`
	Items          []Line `json:"items"`
	SubtotalMinor  int64  `json:"subtotal_minor"`
	DiscountMinor  int64  `json:"discount_minor"`
	TotalMinor     int64  `json:"total_minor"`
	Currency       string `json:"currency"`
	CouponCode     string `json:"coupon_code,omitempty"`
	CreatedAt      string `json:"created_at"`
	IdempotencyKey string `json:"idempotency_key"`
	WorkflowID     string `json:"workflow_id"`
}

// View renders o.
func (o Order) View() View {
	return View{
		OrderNo: o.OrderNo, Status: o.Status, CustomerID: o.CustomerID, Items: o.Items,
		SubtotalMinor: o.SubtotalMinor, DiscountMinor: o.DiscountMinor, TotalMinor: o.TotalMinor,
		Currency: o.Currency, CouponCode: o.CouponCode, CreatedAt: o.CreatedAt.UTC().Format(time.RFC3339Nano),
		IdempotencyKey: o.IdempotencyKey, WorkflowID: o.WorkflowID,
	}
}

// Body is o's JSON.
func (o Order) Body() []byte { return mustJSON(o.View()) }

// Location is the order's URL path.
func (o Order) Location() string { return "/v1/orders/" + o.OrderNo }

// TransitionView is the answer to a transition.
type TransitionView struct {
	OrderNo        string `json:"order_no"`
	Action         Action `json:"action"`
	FromStatus     Status `json:"from_status"`
	ToStatus       Status `json:"to_status"`
	IdempotencyKey string `json:"idempotency_key"`
	WorkflowID     string `json:"workflow_id"`
	Order          View   `json:"order"`
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("orders: marshal: %v", err)) // plain fields: cannot fail
	}
	return b
}

func newOrderNo() string {
	u := uuid.New()
	return "ORD-" + strings.ToUpper(strings.ReplaceAll(u.String(), "-", "")[:16])
}

// Exists reports whether tenantID has an order orderNo; another tenant's
// order does not exist for it. One indexed read, without the items.
func Exists(ctx context.Context, q idem.Querier, tenantID, orderNo string) (bool, error) {
	var ok bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM purchase_order WHERE order_no = $1 AND tenant_id = $2)`, orderNo, tenantID).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("order %s: %w", orderNo, err)
	}
	return ok, nil
}

// Get returns a tenant's order; another tenant's order is not found.
func Get(ctx context.Context, q idem.Querier, tenantID, orderNo string) (Order, error) {
	return get(ctx, q, tenantID, orderNo, false)
}

// read is GET /v1/orders/{order_no}: an order of the caller's tenant.
func read(ctx context.Context, q op.Querier, tenantID string, path func(string) string) (json.RawMessage, error) {
	o, err := Get(ctx, q, tenantID, path("order_no"))
	if errors.Is(err, apperr.ErrNotFound) {
		return nil, op.NotFound("no order " + path("order_no"))
	}
	if err != nil {
		return nil, err
	}
	return o.Body(), nil
}

func get(ctx context.Context, q idem.Querier, tenantID, orderNo string, lock bool) (Order, error) {
	sql := `SELECT order_no, tenant_id, idem_key, fingerprint, workflow_id, customer_id, status, subtotal_minor,
		discount_minor, total_minor, currency, COALESCE(coupon_code, ''), created_at
		FROM purchase_order WHERE order_no = $1 AND tenant_id = $2`
	if lock {
		sql += ` FOR UPDATE`
	}
	var o Order
	err := q.QueryRow(ctx, sql, orderNo, tenantID).Scan(&o.OrderNo, &o.TenantID, &o.IdempotencyKey, &o.Fingerprint,
		&o.WorkflowID, &o.CustomerID, &o.Status, &o.SubtotalMinor, &o.DiscountMinor, &o.TotalMinor, &o.Currency, &o.CouponCode, &o.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Order{}, apperr.ErrNotFound
	}
	if err != nil {
		return Order{}, fmt.Errorf("order %s: %w", orderNo, err)
	}
	rows, err := q.Query(ctx, `SELECT sku, quantity, unit_price_minor, unit_price_minor * quantity AS line_total_minor
		FROM order_item WHERE order_no = $1 ORDER BY sku`, orderNo)
	if err != nil {
		return Order{}, fmt.Errorf("order items: %w", err)
	}
	if o.Items, err = pgx.CollectRows(rows, pgx.RowToStructByName[Line]); err != nil {
		return Order{}, fmt.Errorf("order items: %w", err)
	}
	return o, nil
}
