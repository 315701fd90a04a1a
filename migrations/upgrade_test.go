package migrations_test

import (
	"context"
	"embed"
	"io/fs"
	"slices"
	"strings"
	"testing"

	"github.com/idemflow/idemflow/internal/registry"
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
	upgrade(t, conn)
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
	upgrade(t, conn)
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

// legacy is idemflow's chain as deployed databases applied it before the
// built-ins kept their tables in chains of their own (the files as they
// were at 262fccd): the databases the upgrade must carry.
//
//go:embed testdata/v6/*.sql
var legacy embed.FS

// atVersion returns a connection to a new database migrated to version v
// of the legacy chain, as a database deployed then is.
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
	files, err := fs.Sub(legacy, "testdata/v6")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.LoadMigrations(files); err != nil {
		t.Fatal(err)
	}
	if err := m.MigrateTo(ctx, v); err != nil {
		t.Fatal(err)
	}
	return conn
}

// upgrade migrates conn as 'idemflow migrate' does: idemflow's chain, then
// each built-in's.
func upgrade(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	set, err := registry.New()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := migrations.Migrate(context.Background(), conn, set.Schemas()...); err != nil {
		t.Fatal(err)
	}
}

// A database made by the current chains and one deployed at any version
// of the legacy chain, then upgraded, end with the same schema: every
// column, constraint, index and function. The built-ins' tables moved to
// chains of their own; a database that had them keeps them as they are,
// and a new one gets them the same.
func TestEveryUpgradedDatabaseHasTheSchemaOfANewOne(t *testing.T) {
	ctx := context.Background()
	fresh, err := pgx.Connect(ctx, testenv.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close(context.Background())
	want := schemaOf(t, fresh)
	if !strings.Contains(want, "table ticket ") || !strings.Contains(want, "table product tenant_id") || !strings.Contains(want, "function order_quote_holds") {
		t.Fatalf("a new database lacks the built-ins' tables:\n%s", want)
	}
	for v := int32(0); v <= 6; v++ {
		conn := atVersion(t, v)
		upgrade(t, conn)
		if got := schemaOf(t, conn); got != want {
			t.Errorf("a database at legacy version %d, upgraded, differs from a new one:\n%s", v, diffLines(got, want))
		}
	}
}

// schemaOf describes the schema of conn's database, one sorted line per
// column, constraint, index and function, version tables left out.
func schemaOf(t *testing.T, conn *pgx.Conn) string {
	t.Helper()
	rows, err := conn.Query(context.Background(), `
		SELECT 'table ' || c.relname || ' ' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
		       || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
		       || coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), '')
		FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
		JOIN pg_namespace n ON n.oid = c.relnamespace
		LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		WHERE n.nspname = current_schema() AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped
		  AND c.relname NOT LIKE '%schema_version'
		UNION ALL
		SELECT 'constraint ' || conrelid::regclass || ' ' || conname || ' ' || pg_get_constraintdef(oid)
		FROM pg_constraint WHERE connamespace = current_schema()::regnamespace
		  AND conrelid::regclass::text NOT LIKE '%schema_version'
		UNION ALL
		SELECT 'index ' || indexdef FROM pg_indexes WHERE schemaname = current_schema()
		  AND tablename NOT LIKE '%schema_version'
		UNION ALL
		SELECT 'function ' || p.proname || ' ' || md5(p.prosrc)
		FROM pg_proc p WHERE p.pronamespace = current_schema()::regnamespace
		ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}

// diffLines lists the lines only one of got and want has.
func diffLines(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	var out []string
	for _, l := range g {
		if !slices.Contains(w, l) {
			out = append(out, "+ "+l)
		}
	}
	for _, l := range w {
		if !slices.Contains(g, l) {
			out = append(out, "- "+l)
		}
	}
	return strings.Join(out, "\n")
}
