package orders

// The tenant's catalog: stock reservations released, restocking, and the
// demo catalog.

import (
	"context"
	"fmt"

	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/internal/apperr"
)

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

// Stock is each product's units of a tenant, on hand or reserved: what a
// consistency check compares a run's end against (CheckConsistency).
func Stock(ctx context.Context, q idem.Querier, tenantID string) (map[string]int, error) {
	rows, err := q.Query(ctx, `SELECT sku, stock + reserved FROM product WHERE tenant_id = $1`, tenantID)
	if err != nil {
		return nil, fmt.Errorf("stock of %s: %w", tenantID, err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var sku string
		var n int
		if err := rows.Scan(&sku, &n); err != nil {
			return nil, err
		}
		out[sku] = n
	}
	return out, rows.Err()
}
