package orders

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/idemflow/idemflow/apperr"
	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/payments"
	"github.com/jackc/pgx/v5"
)

// Guards are the order tables' one-row-per-key constraints.
var Guards = []idem.Guard{{Table: "purchase_order"}, {Table: "order_event"}}

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

// Create is called once per intent (the activity checks Answer first).
// It prices and writes a new order within tx, reserving its stock and
// redeeming its coupon, and moves it INIT -> CREATED. A business rejection
// is an *apperr.RejectedError; the caller rolls back. It returns the
// answer to store.
func Create(ctx context.Context, tx idem.Querier, in CreateInput, now time.Time) (Order, []byte, error) {
	req := in.Request
	o := Order{
		OrderNo: newOrderNo(), TenantID: in.Intent.TenantID, IdempotencyKey: in.Intent.Key,
		Fingerprint: in.Intent.Fingerprint, WorkflowID: in.Intent.WorkflowID, CustomerID: req.CustomerID,
		Status: StatusInit, CouponCode: req.CouponCode, CreatedAt: now.UTC().Truncate(time.Microsecond),
	}
	if err := price(ctx, tx, &o, req.Items); err != nil {
		return Order{}, nil, err
	}
	if err := applyCoupon(ctx, tx, &o); err != nil {
		return Order{}, nil, err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO purchase_order
		(order_no, tenant_id, idem_key, fingerprint, workflow_id, customer_id, status, subtotal_minor,
		 discount_minor, total_minor, currency, coupon_code, created_at, updated_at)
		VALUES ($1,$2,$3,$4,$5,$6,'INIT',$7,$8,$9,$10,NULLIF($11,''),$12,$12)`,
		o.OrderNo, o.TenantID, o.IdempotencyKey, o.Fingerprint, o.WorkflowID, o.CustomerID,
		o.SubtotalMinor, o.DiscountMinor, o.TotalMinor, o.Currency, o.CouponCode, o.CreatedAt); err != nil {
		return Order{}, nil, fmt.Errorf("insert order: %w", err)
	}
	for _, l := range o.Items {
		if _, err := tx.Exec(ctx, `INSERT INTO order_item (order_no, tenant_id, sku, quantity, unit_price_minor) VALUES ($1,$2,$3,$4,$5)`,
			o.OrderNo, o.TenantID, l.SKU, l.Quantity, l.UnitPriceMinor); err != nil {
			return Order{}, nil, fmt.Errorf("insert order item: %w", err)
		}
		tag, err := tx.Exec(ctx, `UPDATE product SET stock = stock - $3, reserved = reserved + $3
			WHERE tenant_id = $1 AND sku = $2 AND stock >= $3`, o.TenantID, l.SKU, l.Quantity)
		if err != nil {
			return Order{}, nil, fmt.Errorf("reserve stock: %w", err)
		}
		if tag.RowsAffected() != 1 {
			return Order{}, nil, &apperr.RejectedError{Code: "out-of-stock", Reason: l.SKU + " is out of stock"}
		}
	}
	if o.CouponCode != "" {
		if _, err := tx.Exec(ctx, `INSERT INTO coupon_redemption (code, tenant_id, customer_id, order_no) VALUES ($1,$2,$3,$4)`,
			o.CouponCode, o.TenantID, o.CustomerID, o.OrderNo); err != nil {
			return Order{}, nil, fmt.Errorf("redeem coupon: %w", err)
		}
	}
	if err := setStatus(ctx, tx, o.TenantID, o.OrderNo, StatusInit, StatusCreated, now); err != nil {
		return Order{}, nil, err
	}
	o.Status = StatusCreated
	body := o.Body()
	if err := addEvent(ctx, tx, o.OrderNo, in.Intent, StatusInit, StatusCreated, body); err != nil {
		return Order{}, nil, err
	}
	return o, body, nil
}

// price fills o's lines and totals from the tenant's catalog, under row
// locks taken in SKU order (items are sorted) so concurrent orders cannot
// deadlock. An out-of-stock rejection names the SKUs, never the stock: a
// caller is not told how much is left.
func price(ctx context.Context, tx idem.Querier, o *Order, items []Item) error {
	skus := make([]string, len(items))
	for i, it := range items {
		skus[i] = it.SKU
	}
	rows, err := tx.Query(ctx, `SELECT sku, unit_price_minor, currency, stock FROM product
		WHERE tenant_id = $1 AND sku = ANY($2) ORDER BY sku FOR UPDATE`, o.TenantID, skus)
	if err != nil {
		return fmt.Errorf("price: %w", err)
	}
	type product struct {
		SKU      string
		Price    int64 `db:"unit_price_minor"`
		Currency string
		Stock    int
	}
	products, err := pgx.CollectRows(rows, pgx.RowToStructByName[product])
	if err != nil {
		return fmt.Errorf("price: %w", err)
	}
	catalog := map[string]product{}
	for _, p := range products {
		catalog[p.SKU] = p
	}
	var short []string
	for _, it := range items {
		p, ok := catalog[it.SKU]
		if !ok {
			return &apperr.RejectedError{Code: "unknown-sku", Reason: "no product " + it.SKU}
		}
		if o.Currency == "" {
			o.Currency = p.Currency
		} else if p.Currency != o.Currency {
			return &apperr.RejectedError{Code: "mixed-currency", Reason: "items are priced in different currencies"}
		}
		if p.Stock < it.Quantity {
			short = append(short, it.SKU)
		}
		line := Line{SKU: it.SKU, Quantity: it.Quantity, UnitPriceMinor: p.Price, LineTotalMinor: p.Price * int64(it.Quantity)}
		o.Items = append(o.Items, line)
		o.SubtotalMinor += line.LineTotalMinor
	}
	if len(short) > 0 {
		return &apperr.RejectedError{Code: "out-of-stock", Reason: "out of stock: " + strings.Join(short, ", ")}
	}
	o.TotalMinor = o.SubtotalMinor
	return nil
}

func applyCoupon(ctx context.Context, tx idem.Querier, o *Order) error {
	if o.CouponCode == "" {
		return nil
	}
	var kind string
	var value int64
	var maxUses *int32
	var uses int32
	var once bool
	err := tx.QueryRow(ctx, `SELECT kind, value, max_uses, uses, once_per_customer FROM coupon
		WHERE tenant_id = $1 AND code = $2 FOR UPDATE`, o.TenantID, o.CouponCode).
		Scan(&kind, &value, &maxUses, &uses, &once)
	if errors.Is(err, pgx.ErrNoRows) {
		return &apperr.RejectedError{Code: "invalid-coupon", Reason: "no coupon " + o.CouponCode}
	}
	if err != nil {
		return fmt.Errorf("coupon: %w", err)
	}
	if maxUses != nil && uses >= *maxUses {
		return &apperr.RejectedError{Code: "invalid-coupon", Reason: "coupon " + o.CouponCode + " has been used up"}
	}
	if once {
		var used bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM coupon_redemption r JOIN purchase_order p ON p.order_no = r.order_no
			WHERE r.code = $1 AND r.tenant_id = $2 AND r.customer_id = $3 AND p.status <> 'CANCELED')`,
			o.CouponCode, o.TenantID, o.CustomerID).Scan(&used); err != nil {
			return fmt.Errorf("coupon: %w", err)
		}
		if used {
			return &apperr.RejectedError{Code: "invalid-coupon", Reason: "coupon " + o.CouponCode + " was already used by this customer"}
		}
	}
	if kind == "percent" {
		o.DiscountMinor = o.SubtotalMinor * value / 100
	} else {
		o.DiscountMinor = min(value, o.SubtotalMinor)
	}
	o.TotalMinor = o.SubtotalMinor - o.DiscountMinor
	if _, err := tx.Exec(ctx, `UPDATE coupon SET uses = uses + 1 WHERE tenant_id = $1 AND code = $2`, o.TenantID, o.CouponCode); err != nil {
		return fmt.Errorf("coupon: %w", err)
	}
	return nil
}

// setStatus is the only way an order's status changes: one UPDATE that
// names the expected state, checked by the rows it affected.
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
	switch in.Action {
	case ActionPay:
		// The provider is called with a key derived from the intent, so
		// a retried payment step finds its first charge.
		if _, err := payments.Capture(ctx, tx, in.Intent.WorkflowID+"#capture", o.OrderNo, o.TotalMinor, o.Currency, in.Request.PaymentRef); err != nil {
			return nil, err
		}
	case ActionRefund:
		key, err := payments.ForOrder(ctx, tx, o.OrderNo)
		if err != nil {
			return nil, err
		}
		if _, err := payments.Refund(ctx, tx, key); err != nil {
			return nil, err
		}
		// A refund comes before fulfilment (PAID -> REFUNDED): nothing
		// shipped, so the reserved stock is for sale again.
		if err := releaseStock(ctx, tx, o, true); err != nil {
			return nil, err
		}
	case ActionFulfill:
		// Shipped: the reservation is used up, not returned.
		if err := releaseStock(ctx, tx, o, false); err != nil {
			return nil, err
		}
	case ActionCancel:
		if err := releaseStock(ctx, tx, o, true); err != nil {
			return nil, err
		}
		// A canceled order gives its coupon back, like its stock.
		if o.CouponCode != "" {
			tag, err := tx.Exec(ctx, `DELETE FROM coupon_redemption WHERE code = $1 AND order_no = $2`, o.CouponCode, o.OrderNo)
			if err != nil {
				return nil, fmt.Errorf("release coupon: %w", err)
			}
			if tag.RowsAffected() == 1 {
				if _, err := tx.Exec(ctx, `UPDATE coupon SET uses = uses - 1 WHERE tenant_id = $1 AND code = $2 AND uses > 0`, o.TenantID, o.CouponCode); err != nil {
					return nil, fmt.Errorf("release coupon: %w", err)
				}
			}
		}
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

// releaseStock ends the order's reservations; restock puts the units back
// on sale (cancel, refund), otherwise they are gone (fulfil).
func releaseStock(ctx context.Context, tx idem.Querier, o Order, restock bool) error {
	back := 0
	if restock {
		back = 1
	}
	for _, l := range o.Items {
		if _, err := tx.Exec(ctx, `UPDATE product SET stock = stock + $3::int * $4::int, reserved = reserved - $3::int
			WHERE tenant_id = $1 AND sku = $2`, o.TenantID, l.SKU, l.Quantity, back); err != nil {
			return fmt.Errorf("release stock: %w", err)
		}
	}
	return nil
}

func addEvent(ctx context.Context, q idem.Querier, orderNo string, it idem.Intent, from, to Status, body []byte) error {
	if _, err := q.Exec(ctx, `INSERT INTO order_event (order_no, tenant_id, idem_key, fingerprint, from_status, to_status, response_body)
		VALUES ($1,$2,$3,$4,$5,$6,$7)`, orderNo, it.TenantID, it.Key, it.Fingerprint, from, to, body); err != nil {
		return fmt.Errorf("order event: %w", err)
	}
	return nil
}

// Recall is idem.Recall for the order tables: the order event written under
// (tenantID, key), which every create and transition writes, as the record
// it came from would say. The action, and so the biz type and workflow ID,
// follow from the event's edge.
func Recall(ctx context.Context, q idem.Querier, tenantID, key string) (idem.Prior, bool, error) {
	var orderNo string
	var from, to Status
	p := idem.Prior{Outcome: idem.Outcome{Status: 200}}
	err := q.QueryRow(ctx, `SELECT order_no, from_status, to_status, fingerprint, response_body
		FROM order_event WHERE tenant_id = $1 AND idem_key = $2`, tenantID, key).
		Scan(&orderNo, &from, &to, &p.Fingerprint, &p.Outcome.Body)
	if errors.Is(err, pgx.ErrNoRows) {
		return idem.Prior{}, false, nil
	}
	if err != nil {
		return idem.Prior{}, false, fmt.Errorf("recall order event %s/%s: %w", tenantID, key, err)
	}
	p.BizType, p.WorkflowID = BizCreate, WorkflowID(tenantID, key)
	if from == StatusInit {
		p.Outcome.Status, p.Outcome.Location = 201, "/v1/orders/"+orderNo
	} else {
		act, ok := actionTo(to)
		if !ok {
			return idem.Prior{}, false, fmt.Errorf("recall order event %s/%s: no action leads to %s", tenantID, key, to)
		}
		p.BizType, p.WorkflowID = act.BizType(), TransitionWorkflowID(act, tenantID, key)
	}
	return p, true, nil
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

// Restock adds n units of a tenant's sku (a merchant action, and the
// demo's).
func Restock(ctx context.Context, q idem.Querier, tenantID, sku string, n int) error {
	tag, err := q.Exec(ctx, `UPDATE product SET stock = stock + $3 WHERE tenant_id = $1 AND sku = $2`, tenantID, sku, n)
	if err != nil {
		return fmt.Errorf("restock %s: %w", sku, err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("restock %s: %w", sku, apperr.ErrNotFound)
	}
	return nil
}

// SeedDemoCatalog gives a tenant the demo products and coupons, once (rows
// it already has are left as they are). Only 'idemflow dev' and the tests
// call it: a real deployment's catalog is its own.
func SeedDemoCatalog(ctx context.Context, q idem.Querier, tenantID string) error {
	if _, err := q.Exec(ctx, `INSERT INTO product (tenant_id, sku, name, unit_price_minor, currency, stock) VALUES
		($1, 'SKU-KEYBOARD', 'Mechanical keyboard', 8900, 'EUR', 100),
		($1, 'SKU-MOUSE',    'Wireless mouse',      2900, 'EUR', 250),
		($1, 'SKU-MONITOR',  '27" monitor',        32900, 'EUR', 40),
		($1, 'SKU-CABLE',    'USB-C cable',          990, 'EUR', 1000),
		($1, 'SKU-LAMP',     'Desk lamp',           4500, 'EUR', 3)
		ON CONFLICT DO NOTHING`, tenantID); err != nil {
		return fmt.Errorf("seed demo products for %s: %w", tenantID, err)
	}
	if _, err := q.Exec(ctx, `INSERT INTO coupon (tenant_id, code, kind, value, max_uses, once_per_customer) VALUES
		($1, 'WELCOME10', 'percent', 10, NULL, true),
		($1, 'FIVEOFF',   'fixed',  500, 1000, false),
		($1, 'LAST1',     'percent', 50, 1,    false)
		ON CONFLICT DO NOTHING`, tenantID); err != nil {
		return fmt.Errorf("seed demo coupons for %s: %w", tenantID, err)
	}
	return nil
}
