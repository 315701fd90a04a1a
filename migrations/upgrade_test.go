package migrations_test

import (
	"context"
	"slices"
	"testing"

	"github.com/idemflow/idemflow/internal/tooling/testenv"
	"github.com/idemflow/idemflow/migrations"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/tern/v2/migrate"
)

// A database at version 2 (one shared catalog) with tenants and orders
// moves to per-tenant catalogs without losing an order or a reservation.
func TestUpgradeFromASharedCatalogKeepsOrders(t *testing.T) {
	ctx := context.Background()
	conn := atVersion(t, 2)
	for _, sql := range []string{
		`INSERT INTO tenant (id, name) VALUES ('acme', 'acme'), ('globex', 'globex')`,
		`UPDATE product SET stock = stock - 2, reserved = reserved + 2 WHERE sku = 'SKU-MOUSE'`,
		`INSERT INTO purchase_order (order_no, tenant_id, idem_key, fingerprint, workflow_id, customer_id, status,
			subtotal_minor, total_minor, currency, coupon_code, created_at, updated_at)
			VALUES ('ORD-1', 'acme', 'k', 'fp', 'w', 'c', 'CREATED', 5800, 5300, 'EUR', 'FIVEOFF', now(), now())`,
		`INSERT INTO order_item (order_no, sku, quantity, unit_price_minor) VALUES ('ORD-1', 'SKU-MOUSE', 2, 2900)`,
		`INSERT INTO coupon_redemption (code, tenant_id, customer_id, order_no) VALUES ('FIVEOFF', 'acme', 'c', 'ORD-1')`,
		`UPDATE coupon SET uses = 1 WHERE code = 'FIVEOFF'`,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	if _, _, err := migrations.Migrate(ctx, conn); err != nil {
		t.Fatal(err)
	}
	var got []int
	for _, q := range []string{
		`SELECT count(*) FROM product WHERE sku = 'SKU-MOUSE'`,
		`SELECT reserved FROM product WHERE tenant_id = 'acme' AND sku = 'SKU-MOUSE'`,
		`SELECT uses FROM coupon WHERE tenant_id = 'acme' AND code = 'FIVEOFF'`,
		`SELECT uses FROM coupon WHERE tenant_id = 'globex' AND code = 'FIVEOFF'`,
		`SELECT count(*) FROM order_item WHERE tenant_id = 'acme'`,
	} {
		var n int
		if err := conn.QueryRow(ctx, q).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		got = append(got, n)
	}
	if want := []int{2, 2, 1, 0, 1}; !equal(got, want) {
		t.Fatalf("after the upgrade %v, want %v (copies, acme's reservation, acme's coupon use, none for globex, the item)", got, want)
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Keys written before idempotency_key existed are remembered from their
// rows, so a purged key of theirs is still refused for another operation:
// a ticket's key, an order's and a payment's.
func TestUpgradeRemembersTheKeysOfExistingRows(t *testing.T) {
	ctx := context.Background()
	conn := atVersion(t, 3)
	for _, sql := range []string{
		`INSERT INTO tenant (id, name) VALUES ('acme', 'acme')`,
		`INSERT INTO ticket (id, tenant_id, idem_key, fingerprint, workflow_id, customer_id, title, description, priority, created_at)
			VALUES (gen_random_uuid(), 'acme', 'k-ticket', 'fp-t', 'w', 'c', 't', '', 'normal', now())`,
		`INSERT INTO purchase_order (order_no, tenant_id, idem_key, fingerprint, workflow_id, customer_id, status,
			subtotal_minor, total_minor, currency, created_at, updated_at)
			VALUES ('ORD-1', 'acme', 'k-order', 'fp-o', 'w', 'c', 'PAID', 100, 100, 'EUR', now(), now())`,
		`INSERT INTO order_event (order_no, tenant_id, idem_key, fingerprint, from_status, to_status, response_body)
			VALUES ('ORD-1', 'acme', 'k-order', 'fp-o', 'INIT', 'CREATED', '{}'), ('ORD-1', 'acme', 'k-pay', 'fp-p', 'CREATED', 'PAID', '{}')`,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	if _, _, err := migrations.Migrate(ctx, conn); err != nil {
		t.Fatal(err)
	}
	rows, err := conn.Query(ctx, `SELECT idem_key || ' ' || biz_type || ' ' || fingerprint FROM idempotency_key ORDER BY idem_key`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"k-order order.create fp-o", "k-pay order.pay fp-p", "k-ticket ticket.create fp-t"}; !slices.Equal(got, want) {
		t.Fatalf("remembered %v, want %v", got, want)
	}
}

// atVersion returns a connection to a new database migrated to version v.
func atVersion(t *testing.T, v int32) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testenv.EmptyDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	m, err := migrate.NewMigrator(ctx, conn, migrations.VersionTable)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.LoadMigrations(migrations.Files()); err != nil {
		t.Fatal(err)
	}
	if err := m.MigrateTo(ctx, v); err != nil {
		t.Fatal(err)
	}
	return conn
}
