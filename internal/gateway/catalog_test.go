package gateway_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/idemflow/idemflow/internal/tooling/testenv"
)

// One tenant's orders must not use up another's stock or limited coupon,
// and a rejection does not tell how much stock is left.
func TestCatalogIsTenantScoped(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	lamps := `{"customer_id":"c","items":[{"sku":"SKU-LAMP","quantity":3}],"coupon_code":"LAST1"}`
	if r := order(s, testenv.TenantA, "a-lamps", lamps); r.Status != http.StatusCreated {
		t.Fatalf("A takes every lamp and the last coupon: %d %s", r.Status, r.Body)
	}
	if r := order(s, testenv.TenantB, "b-lamps", lamps); r.Status != http.StatusCreated {
		t.Fatalf("B after A took its lamps and coupon: %d %s", r.Status, r.Body)
	}
	r := order(s, testenv.TenantA, "a-more", `{"customer_id":"c","items":[{"sku":"SKU-LAMP","quantity":2}]}`)
	assertProblem(t, r, "/problems/out-of-stock")
	if strings.Contains(string(r.Body), "left") || strings.Contains(string(r.Body), "asked") || !strings.Contains(string(r.Body), "SKU-LAMP") {
		t.Fatalf("out-of-stock detail: %s", r.Body)
	}
}

// A deployment's migrations seed no catalog: demo products and coupons
// (an unlimited WELCOME10) exist only where dev or the tests put them.
func TestMigrationsSeedNoCatalog(t *testing.T) {
	pool, _ := testenv.Pool(t)
	for _, table := range []string{"product", "coupon"} {
		if n := testenv.Count(t, pool, table, ""); n != 0 {
			t.Fatalf("a migrated database has %d %s rows", n, table)
		}
	}
}

// Reserved stock is released when an order ends: back on sale after a
// cancel or a refund (nothing shipped), used up by a fulfil.
func TestStockReservationsEndWithTheOrder(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	one := `{"customer_id":"c","items":[{"sku":"SKU-MONITOR","quantity":1}]}`
	for _, tc := range []struct {
		steps         []string
		availDelta    int
		reservedAfter int
	}{
		{[]string{"cancel"}, 0, 0},
		{[]string{"pay", "refund"}, 0, 0},
		{[]string{"pay", "fulfill"}, -1, 0},
	} {
		avail0, _ := stock(t, s, "SKU-MONITOR")
		key := strings.Join(tc.steps, "-")
		no := orderNo(t, order(s, testenv.TenantA, key, one))
		for _, step := range tc.steps {
			body := `{}`
			if step == "pay" {
				body = `{"payment_ref":"psp-` + key + `"}`
			}
			if r := transition(s, testenv.TenantA, no, step, key+"-"+step, body); r.Status != http.StatusOK {
				t.Fatalf("%s: %d %s", step, r.Status, r.Body)
			}
		}
		avail, reserved := stock(t, s, "SKU-MONITOR")
		if avail-avail0 != tc.availDelta || reserved != tc.reservedAfter {
			t.Fatalf("after %v: stock %+d, reserved %d; want %+d, %d", tc.steps, avail-avail0, reserved, tc.availDelta, tc.reservedAfter)
		}
	}
	var stockSum int
	if err := s.Pool.QueryRow(context.Background(), `SELECT stock + reserved FROM product WHERE tenant_id = 'acme' AND sku = 'SKU-MONITOR'`).Scan(&stockSum); err != nil || stockSum != 39 {
		t.Fatalf("stock + reserved = %d (%v), want 40 less the one shipped", stockSum, err)
	}
}
