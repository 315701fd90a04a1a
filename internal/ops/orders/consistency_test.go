package orders_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemflow/idemflow/internal/ops/orders"
	"github.com/idemflow/idemflow/internal/tenant"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
)

// CheckConsistency finds nothing in a tenant whose orders followed the
// rules, and names each rule an order breaks: a status its events do not
// reach, a paid order without its charge, stock that does not add up.
func TestCheckConsistencyNamesWhatIsOff(t *testing.T) {
	ctx := context.Background()
	pool, _ := testenv.Pool(t)
	if err := tenant.NewStore(pool).Ensure(ctx, "acme", ""); err != nil {
		t.Fatal(err)
	}
	if err := orders.SeedDemoCatalog(ctx, pool, "acme"); err != nil {
		t.Fatal(err)
	}
	stock := map[string]int{}
	rows, err := pool.Query(ctx, `SELECT sku, stock FROM product WHERE tenant_id = 'acme'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var sku string
		var n int
		if err := rows.Scan(&sku, &n); err != nil {
			t.Fatal(err)
		}
		stock[sku] = n
	}
	if len(stock) == 0 {
		t.Fatal("no catalog: the test reads the wrong table")
	}
	if f, err := orders.CheckConsistency(ctx, pool, "acme", stock); err != nil || len(f.Violations) > 0 {
		t.Fatalf("a tenant with no orders: %+v %v", f, err)
	}

	// An order that says PAID with no event and no charge, and a unit of
	// stock gone from the catalog.
	if _, err := pool.Exec(ctx, `INSERT INTO purchase_order (order_no, tenant_id, idem_key, fingerprint, workflow_id, customer_id,
		status, subtotal_minor, discount_minor, total_minor, currency, created_at, updated_at)
		VALUES ('ORD-X', 'acme', 'k', 'f', 'w', 'c', 'PAID', 100, 0, 100, 'EUR', $1, $1)`, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE product SET stock = stock - 1 WHERE tenant_id = 'acme' AND sku = 'SKU-MOUSE'`); err != nil {
		t.Fatal(err)
	}
	f, err := orders.CheckConsistency(ctx, pool, "acme", stock)
	if err != nil {
		t.Fatal(err)
	}
	if f.IllegalTransitions != 1 || f.StockOff != 1 || len(f.Violations) != 3 {
		t.Fatalf("findings %+v", f)
	}
	for _, want := range []string{"ORD-X is PAID, its events end at INIT", "SKU-MOUSE: stock", "ORD-X (PAID): 0 captured"} {
		if !strings.Contains(strings.Join(f.Violations, "\n"), want) {
			t.Errorf("no violation says %q: %q", want, f.Violations)
		}
	}
}
