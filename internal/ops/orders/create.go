package orders

// Creating an order: pricing from the tenant's catalog, the coupon, and the
// reservation of stock.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/intent"
	"github.com/idemflow/idemflow/internal/apperr"
	"github.com/idemflow/idemflow/op"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Create is the declaration of order creation: POST /v1/orders, the MCP
// tool create_order, workflow and activity CreateOrder (the names it had
// before declarations, so that recorded histories and workflow IDs hold).
// Its row is the order's first event, which holds the answer.
var Create = op.Define(op.Spec[CreateRequest, event]{
	Name:        "create_order",
	Description: "Create a purchase order; the server prices it from its catalog.",
	Route:       "/v1/orders",
	BizType:     BizCreate,
	Scope:       ScopeCreate,
	Workflow:    "CreateOrder",
	Activity:    "CreateOrder",
	Rules:       createRules,
	Normalize:   (*CreateRequest).Normalize,
	// An order is the customer's, for these lines in any order; its
	// coupon changes what it costs, so it is part of it too.
	Intent: []op.IntentField{{Name: "customer_id", Norm: intent.ID}, {Name: "items", Norm: intent.Set},
		{Name: "coupon_code", Norm: intent.ID}},
	Summary: func(r CreateRequest) string {
		return fmt.Sprintf("order for %s: %d item(s)", r.CustomerID, len(r.Items))
	},
	Hint: quoteSQL,
	Step: func(ctx context.Context, tx pgx.Tx, in op.In[CreateRequest]) (event, error) {
		o, body, err := create(ctx, tx, in, time.Now())
		return event{OrderNo: o.OrderNo, Body: body}, err
	},
	Lookup: lookupEvent,
	View: func(e event) op.Answer {
		return op.Answer{Status: 201, Body: json.RawMessage(e.Body), Location: "/v1/orders/" + e.OrderNo}
	},
	Table:  "purchase_order",
	Reads:  []op.Read{{Route: "/v1/orders/{order_no}", Get: read, OperationID: "getOrder"}},
	Answer: op.MustSchema(orderSchema),
	Paths:  pathsOf("/v1/orders", "/v1/orders/{order_no}"),
	Links:  links("$response.body#/order_no"),
	// What an operator sees beside an order's key: its events, and
	// the catalog a new dev tenant orders from.
	Inspect: eventLines,
	Seed:    SeedDemoCatalog,
	Example: `{"customer_id":"c-1","items":[{"sku":"SKU-MOUSE","quantity":1}]}`,
	// The tables of all five order operations, in the orders' own chain.
	Migrations: op.MustSub(migrationFiles, "migrations"),
	Rejections: map[string]string{
		"out-of-stock":   "A business rule rejected the order: an item is out of stock. Nothing was written; a retry under the same key may execute once stock is back.",
		"unknown-sku":    "A business rule rejected the order: an item's SKU is not in the tenant's catalog. Nothing was written.",
		"mixed-currency": "A business rule rejected the order: its items are priced in different currencies. Nothing was written.",
		"invalid-coupon": "A business rule rejected the order: the coupon is unknown, used up, or already used by this customer. Nothing was written.",
	},
})

// create is called once per intent (the activity checks the record
// first). It prices and writes a new order within tx, reserving its stock
// and redeeming its coupon, and moves it INIT -> CREATED. A business
// rejection is an *apperr.RejectedError; the caller rolls back. It returns
// the answer to store.
func create(ctx context.Context, tx pgx.Tx, in op.In[CreateRequest], now time.Time) (Order, []byte, error) {
	req := in.Request
	it := idem.Intent{TenantID: in.TenantID, Key: in.Key, BizType: BizCreate, Fingerprint: in.Fingerprint, WorkflowID: in.WorkflowID}
	o := Order{
		OrderNo: newOrderNo(), TenantID: in.TenantID, IdempotencyKey: in.Key,
		Fingerprint: in.Fingerprint, WorkflowID: in.WorkflowID, CustomerID: req.CustomerID,
		Status: StatusInit, CouponCode: req.CouponCode, CreatedAt: now.UTC().Truncate(time.Microsecond),
	}
	// Quoted: priced from the claim's read, unlocked and unchecked; the
	// batch below holds that quote to the rows as it writes them. An
	// order with a coupon is priced under the products' locks first: the
	// coupon's own lock must come after them, as on every other path, or
	// two orders could deadlock.
	quoted := req.CouponCode == "" && priceFromQuote(in.Hint, &o, req.Items)
	if !quoted {
		if err := price(ctx, tx, &o, req.Items); err != nil {
			return Order{}, nil, err
		}
		if err := applyCoupon(ctx, tx, &o); err != nil {
			return Order{}, nil, err
		}
	}
	// What follows depends on nothing it returns: one batch, sent with the
	// commit (op.Later), whatever the number of lines; for a quoted order
	// with nothing sent before it, the step's one round trip. A check
	// that fails in it fails the pipeline before its commit (a row count
	// checked in Go could not: op.Later), and the execution runs the step
	// again the long way, with the batch sent at once and no quote:
	//   - the product's CHECK (stock >= 0): stock checked under the
	//     rows' locks above, or not at all for a quoted order, which is
	//     then rejected out of stock the long way;
	//   - order_quote_holds: a quoted price or currency that is no
	//     longer the product's, under the row's lock.
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO purchase_order
		(order_no, tenant_id, idem_key, fingerprint, workflow_id, customer_id, status, subtotal_minor,
		 discount_minor, total_minor, currency, coupon_code, created_at, updated_at)
		VALUES ($1,$2,$3,$4,$5,$6,'INIT',$7,$8,$9,$10,NULLIF($11,''),$12,$12)`,
		o.OrderNo, o.TenantID, o.IdempotencyKey, o.Fingerprint, o.WorkflowID, o.CustomerID,
		o.SubtotalMinor, o.DiscountMinor, o.TotalMinor, o.Currency, o.CouponCode, o.CreatedAt)
	for _, l := range o.Items {
		b.Queue(`INSERT INTO order_item (order_no, tenant_id, sku, quantity, unit_price_minor) VALUES ($1,$2,$3,$4,$5)`,
			o.OrderNo, o.TenantID, l.SKU, l.Quantity, l.UnitPriceMinor)
		take := `UPDATE product SET stock = stock - $3, reserved = reserved + $3
			WHERE tenant_id = $1 AND sku = $2`
		args := []any{o.TenantID, l.SKU, l.Quantity}
		if quoted {
			take += ` RETURNING order_quote_holds(unit_price_minor = $4 AND currency = $5, sku)`
			args = append(args, l.UnitPriceMinor, o.Currency)
		}
		b.Queue(take, args...)
	}
	if o.CouponCode != "" {
		b.Queue(`INSERT INTO coupon_redemption (code, tenant_id, customer_id, order_no) VALUES ($1,$2,$3,$4)`,
			o.CouponCode, o.TenantID, o.CustomerID, o.OrderNo)
	}
	if err := queueSetStatus(b, o.TenantID, o.OrderNo, StatusInit, StatusCreated, now); err != nil {
		return Order{}, nil, err
	}
	o.Status = StatusCreated
	body := o.Body()
	queueEvent(b, o.OrderNo, it, StatusInit, StatusCreated, body)
	if err := op.Later(ctx, tx, b); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.ConstraintName == "product_stock_check" {
			return Order{}, nil, &apperr.RejectedError{Code: "out-of-stock", Reason: "an item is out of stock"}
		}
		return Order{}, nil, fmt.Errorf("write order: %w", err)
	}
	return o, body, nil
}

// quoteSQL is the order's Hint: its products' prices and currencies, read
// with the claim, as {"SKU": {"price": 990, "currency": "EUR"}}.
func quoteSQL(tenantID string, r CreateRequest) (string, []any) {
	return `SELECT json_object_agg(sku, json_build_object('price', unit_price_minor, 'currency', currency))
		FROM product WHERE tenant_id = $1 AND sku = ANY($2)`, []any{tenantID, skusOf(r.Items)}
}

// skusOf is the items' SKUs, in their order.
func skusOf(items []Item) []string {
	skus := make([]string, len(items))
	for i, it := range items {
		skus[i] = it.SKU
	}
	return skus
}

// quote is a product's price: as quoteSQL read it, or under its lock.
type quote struct {
	Price    int64  `json:"price"`
	Currency string `json:"currency"`
}

// priceFromQuote fills o's lines and totals from a quote, and reports
// whether it could: one that lacks an item's SKU, or mixes currencies,
// is not used (the locked read then decides what to answer). A quote
// decides no rejection, as it was read without a lock.
func priceFromQuote(hint json.RawMessage, o *Order, items []Item) bool {
	var quotes map[string]quote
	if len(hint) == 0 || json.Unmarshal(hint, &quotes) != nil {
		return false
	}
	for _, it := range items {
		if quotes[it.SKU].Currency == "" {
			return false // not quoted, or not in a currency
		}
	}
	return priceLines(o, items, quotes) == nil
}

// priceLines fills o's lines, currency and totals from catalog's prices,
// the one arithmetic of both ways of pricing an order. An item catalog
// lacks, or items in different currencies, are a rejection, and leave o
// as it was.
func priceLines(o *Order, items []Item, catalog map[string]quote) error {
	var lines []Line
	var subtotal int64
	currency := ""
	for _, it := range items {
		p, ok := catalog[it.SKU]
		if !ok {
			return &apperr.RejectedError{Code: "unknown-sku", Reason: "no product " + it.SKU}
		}
		if currency == "" {
			currency = p.Currency
		} else if p.Currency != currency {
			return &apperr.RejectedError{Code: "mixed-currency", Reason: "items are priced in different currencies"}
		}
		line := Line{SKU: it.SKU, Quantity: it.Quantity, UnitPriceMinor: p.Price, LineTotalMinor: p.Price * int64(it.Quantity)}
		lines = append(lines, line)
		subtotal += line.LineTotalMinor
	}
	o.Items, o.Currency, o.SubtotalMinor, o.TotalMinor = lines, currency, subtotal, subtotal
	return nil
}

// price fills o's lines and totals from the tenant's catalog, under row
// locks taken in SKU order (items are sorted) so concurrent orders cannot
// deadlock. An out-of-stock rejection names the SKUs, never the stock: a
// caller is not told how much is left.
func price(ctx context.Context, tx idem.Querier, o *Order, items []Item) error {
	rows, err := tx.Query(ctx, `SELECT sku, unit_price_minor, currency, stock FROM product
		WHERE tenant_id = $1 AND sku = ANY($2) ORDER BY sku FOR UPDATE`, o.TenantID, skusOf(items))
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
	catalog := map[string]quote{}
	stock := map[string]int{}
	for _, p := range products {
		catalog[p.SKU] = quote{Price: p.Price, Currency: p.Currency}
		stock[p.SKU] = p.Stock
	}
	if err := priceLines(o, items, catalog); err != nil {
		return err
	}
	var short []string
	for _, it := range items {
		if stock[it.SKU] < it.Quantity {
			short = append(short, it.SKU)
		}
	}
	if len(short) > 0 {
		return &apperr.RejectedError{Code: "out-of-stock", Reason: "out of stock: " + strings.Join(short, ", ")}
	}
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
