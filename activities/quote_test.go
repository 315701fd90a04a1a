package activities_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/internal/ops/orders"
	"github.com/idemflow/idemflow/internal/ops/tickets"
)

// An order is priced from the quote its claim read (op.Spec.Hint) and
// written in one pipeline with its commit. The quote was read without a
// lock and travels in the workflow's input, so it may be stale or forged:
// whatever it says, the order is priced as the catalog says under the
// products' locks, written once, and its stock is taken once or not at
// all.
func TestAnOrderIsHeldToTheCatalogWhateverItsQuoteSays(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	if err := orders.SeedDemoCatalog(ctx, f.pool, "acme"); err != nil {
		t.Fatal(err)
	}
	stock := func(sku string) (n int) {
		t.Helper()
		if err := f.pool.QueryRow(ctx, `SELECT stock FROM product WHERE tenant_id = 'acme' AND sku = $1`, sku).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	cable := `{"customer_id":"c-1","items":[{"sku":"SKU-CABLE","quantity":2}]}`
	for _, c := range []struct {
		name, key, body, hint string
		// want: the unit price answered, or the rejection's code.
		price    int64
		rejected string
		sku      string
		taken    int
	}{
		{name: "the claim's own quote", key: "q-own", body: cable, price: 990, sku: "SKU-CABLE", taken: 2},
		{name: "a stale price", key: "q-stale", body: cable, hint: `{"SKU-CABLE":{"price":1,"currency":"EUR"}}`, price: 990, sku: "SKU-CABLE", taken: 2},
		{name: "another currency", key: "q-currency", body: cable, hint: `{"SKU-CABLE":{"price":990,"currency":"USD"}}`, price: 990, sku: "SKU-CABLE", taken: 2},
		{name: "a quote of another product", key: "q-other", body: cable, hint: `{"SKU-LAMP":{"price":1,"currency":"EUR"}}`, price: 990, sku: "SKU-CABLE", taken: 2},
		{name: "a quote that is not one", key: "q-junk", body: cable, hint: `"cheap"`, price: 990, sku: "SKU-CABLE", taken: 2},
		// Three lamps in stock: the quote knows no stock, the product's
		// CHECK refuses the pipeline, and the long way rejects.
		{name: "more than the stock, quoted", key: "q-short", body: `{"customer_id":"c-1","items":[{"sku":"SKU-LAMP","quantity":5}]}`,
			rejected: "out-of-stock", sku: "SKU-LAMP"},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := stock(c.sku)
			var hint json.RawMessage
			if c.hint != "" {
				hint = json.RawMessage(c.hint)
			}
			out, err := runHinted(t, f, orders.Create, c.key, c.body, hint)
			rec, gerr := f.records.Get(ctx, "acme", c.key)
			if gerr != nil {
				t.Fatal(gerr)
			}
			var n int
			if err := f.pool.QueryRow(ctx, `SELECT count(*) FROM purchase_order WHERE tenant_id = 'acme' AND idem_key = $1`, c.key).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if c.rejected != "" {
				if err == nil || rec.Status != idem.StatusFailed || !strings.Contains(string(rec.Response.Body), c.rejected) {
					t.Errorf("%v; record %s %s, want rejected %s", err, rec.Status, rec.Response.Body, c.rejected)
				}
				if n != 0 || stock(c.sku) != before {
					t.Errorf("%d orders, stock %d -> %d: want none, and the stock untouched", n, before, stock(c.sku))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var v orders.View
			if err := json.Unmarshal(out.Body, &v); err != nil {
				t.Fatal(err)
			}
			if len(v.Items) != 1 || v.Items[0].UnitPriceMinor != c.price || v.Currency != "EUR" || v.TotalMinor != 2*c.price {
				t.Errorf("answered %s, want it priced at %d EUR a unit", out.Body, c.price)
			}
			var linePrice int64
			if err := f.pool.QueryRow(ctx, `SELECT i.unit_price_minor FROM order_item i JOIN purchase_order o USING (order_no)
				WHERE o.tenant_id = 'acme' AND o.idem_key = $1`, c.key).Scan(&linePrice); err != nil || linePrice != c.price {
				t.Errorf("the line was written at %d (%v), want %d", linePrice, err, c.price)
			}
			if n != 1 || stock(c.sku) != before-c.taken || rec.Status != idem.StatusSuccess || string(rec.Response.Body) != string(out.Body) {
				t.Errorf("%d orders, stock %d -> %d, record %s: want one order, %d units taken, the answer stored", n, before, stock(c.sku), rec.Status, c.taken)
			}
		})
	}
}

// A claim carries its hint's read in its own pipeline (no round trip of
// its own), and only to the request that inserted the record. A hint
// that fails does not fail the claim: it is claimed again without one,
// once; one that ran but does not scan leaves the claim as it went.
func TestAClaimCarriesItsHintOrClaimsWithoutIt(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	claim := func(key string, hint *idem.Hint) (idem.Claim, error) {
		return f.records.Claim(ctx, idem.ClaimParams{TenantID: "acme", Key: key, BizType: tickets.BizType,
			Fingerprint: "fp", WorkflowID: "wf/" + key, Hint: hint})
	}
	read := &idem.Hint{SQL: `SELECT json_build_object('n', $1::int)`, Args: []any{7}}
	c, err := claim("hinted", read)
	if err != nil || !c.Owner || string(c.Hint) != `{"n" : 7}` {
		t.Errorf("a new key: owner %v, hint %s (%v); want the owner, with {\"n\" : 7}", c.Owner, c.Hint, err)
	}
	if c, err := claim("hinted", read); err != nil || c.Owner || c.Hint != nil {
		t.Errorf("its duplicate: owner %v, hint %s (%v); want neither", c.Owner, c.Hint, err)
	}
	if c, err := claim("no-row", &idem.Hint{SQL: `SELECT 1 WHERE false`}); err != nil || !c.Owner || c.Hint != nil {
		t.Errorf("a hint that reads no row: owner %v, hint %s (%v); want the owner, no hint", c.Owner, c.Hint, err)
	}
	c, err = claim("failing", &idem.Hint{SQL: `SELECT (1/0)::text::json`})
	if err != nil || !c.Owner || c.Hint != nil {
		t.Errorf("a hint that fails: owner %v, hint %s (%v); want the owner, no hint", c.Owner, c.Hint, err)
	}
	// A read PostgreSQL ran but Go cannot scan (two columns): the claim
	// beside it has committed, and this request inserted the record.
	c, err = claim("unscannable", &idem.Hint{SQL: `SELECT '{}'::json, 2`})
	if err != nil || !c.Owner || c.Hint != nil {
		t.Errorf("a hint Go cannot scan: owner %v, hint %s (%v); want the owner, no hint", c.Owner, c.Hint, err)
	}
	var n int
	if err := f.pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_record WHERE tenant_id = 'acme' AND idem_key IN ('hinted', 'no-row', 'failing', 'unscannable')`).Scan(&n); err != nil || n != 4 {
		t.Errorf("%d records (%v), want 4", n, err)
	}
}
