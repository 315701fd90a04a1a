package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/internal/ops/orders"
	"github.com/idemflow/idemflow/internal/tooling/docs"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
)

func order(s *testenv.Stack, tenantID, key, body string) testenv.Response {
	return s.Do(testenv.Request{Path: "/v1/orders", Token: s.Tokens[tenantID], Key: key, Body: body})
}

func transition(s *testenv.Stack, tenantID, orderNo, action, key, body string) testenv.Response {
	return s.Do(testenv.Request{Path: "/v1/orders/" + orderNo + "/" + action, Token: s.Tokens[tenantID], Key: key, Body: body})
}

func orderNo(t *testing.T, r testenv.Response) string {
	t.Helper()
	var v struct {
		OrderNo string `json:"order_no"`
	}
	if err := json.Unmarshal(r.Body, &v); err != nil || v.OrderNo == "" {
		t.Fatalf("no order_no in %d %s", r.Status, r.Body)
	}
	return v.OrderNo
}

func stock(t *testing.T, s *testenv.Stack, sku string) (avail, reserved int) {
	t.Helper()
	if err := s.Pool.QueryRow(context.Background(), `SELECT stock, reserved FROM product WHERE tenant_id = $1 AND sku = $2`, testenv.TenantA, sku).Scan(&avail, &reserved); err != nil {
		t.Fatal(err)
	}
	return avail, reserved
}

const basket = `{"customer_id":"c-7","items":[{"sku":"SKU-MOUSE","quantity":2},{"sku":"SKU-CABLE","quantity":3}],"coupon_code":"FIVEOFF"}`

func TestCreateOrderIsPricedByTheServerAndReplayed(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	first := order(s, testenv.TenantA, "o-1", basket)
	if first.Status != http.StatusCreated {
		t.Fatalf("%d %s", first.Status, first.Body)
	}
	var v orders.View
	if err := json.Unmarshal(first.Body, &v); err != nil {
		t.Fatal(err)
	}
	// 2 x 2900 + 3 x 990 - 500.
	if v.Status != orders.StatusCreated || v.TotalMinor != 2*2900+3*990-500 || v.Currency != "EUR" || len(v.Items) != 2 ||
		v.IdempotencyKey != "o-1" || v.WorkflowID != "order/acme/o-1" || !strings.HasPrefix(v.OrderNo, "ORD-") {
		t.Fatalf("view %+v", v)
	}
	if first.Header.Get("Location") != "/v1/orders/"+v.OrderNo {
		t.Fatalf("Location %q", first.Header.Get("Location"))
	}
	// The same basket listed in another order is the same intent.
	reordered := `{"items":[{"quantity":3,"sku":"SKU-CABLE"},{"sku":"SKU-MOUSE","quantity":2}],"coupon_code":"FIVEOFF","customer_id":"c-7"}`
	again := order(s, testenv.TenantA, "o-1", reordered)
	if again.Status != 201 || !bytes.Equal(again.Body, first.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %s", again.Status, again.Body)
	}
	if avail, reserved := stock(t, s, "SKU-MOUSE"); avail != 248 || reserved != 2 {
		t.Fatalf("mouse stock %d reserved %d", avail, reserved)
	}
	got := s.Do(testenv.Request{Method: "GET", Path: "/v1/orders/" + v.OrderNo, Token: s.Tokens[testenv.TenantA]})
	if got.Status != 200 || !bytes.Equal(got.Body, first.Body) {
		t.Fatalf("GET: %d %s", got.Status, got.Body)
	}
	if other := s.Do(testenv.Request{Method: "GET", Path: "/v1/orders/" + v.OrderNo, Token: s.Tokens[testenv.TenantB]}); other.Status != 404 {
		t.Fatalf("other tenant GET: %d", other.Status)
	}
}

func TestClientPricesAreRejectedAndACouponChangeIsAConflict(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	for _, body := range []string{
		`{"customer_id":"c","items":[{"sku":"SKU-MOUSE","quantity":1}],"total_minor":1}`,
		`{"customer_id":"c","items":[{"sku":"SKU-MOUSE","quantity":1,"unit_price_minor":1}]}`,
		`{"customer_id":"c","items":[{"sku":"SKU-MOUSE","quantity":1}],"discount_minor":100}`,
		`{"customer_id":"c","items":[{"sku":"SKU-MOUSE","quantity":0}]}`,
		`{"customer_id":"c","items":[]}`,
		`{"customer_id":"c","items":[{"sku":"SKU-MOUSE","quantity":1},{"sku":"SKU-MOUSE","quantity":1}]}`,
	} {
		if r := order(s, testenv.TenantA, "o-price", body); r.Status != 400 {
			t.Fatalf("%s: %d %s", body, r.Status, r.Body)
		}
	}
	if n := testenv.Count(t, s.Pool, "idempotency_record", ""); n != 0 {
		t.Fatalf("rejected input recorded %d intents", n)
	}
	if r := order(s, testenv.TenantA, "o-c", `{"customer_id":"c","items":[{"sku":"SKU-MOUSE","quantity":1}],"coupon_code":"FIVEOFF"}`); r.Status != 201 {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	r := order(s, testenv.TenantA, "o-c", `{"customer_id":"c","items":[{"sku":"SKU-MOUSE","quantity":1}],"coupon_code":"WELCOME10"}`)
	if r.Status != 422 {
		t.Fatalf("changed coupon: %d %s", r.Status, r.Body)
	}
	assertProblem(t, r, "/problems/idempotency-key-reused")
	if n := testenv.Count(t, s.Pool, "purchase_order", ""); n != 1 {
		t.Fatalf("%d orders", n)
	}
}

func TestOutOfStockThenRestockThenRetryMakesOneOrder(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	body := `{"customer_id":"c","items":[{"sku":"SKU-LAMP","quantity":5}]}`
	r := order(s, testenv.TenantA, "lamp", body)
	if r.Status != 422 {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	assertProblem(t, r, "/problems/out-of-stock")
	rec, _ := s.Records.Get(context.Background(), testenv.TenantA, "lamp")
	if rec.Status != idem.StatusFailed || testenv.Count(t, s.Pool, "purchase_order", "") != 0 {
		t.Fatalf("after rejection: record %s", rec.Status)
	}
	// A replay of the rejection is the same answer, until something changes.
	if again := order(s, testenv.TenantA, "lamp", body); again.Status != 422 || !bytes.Equal(again.Body, r.Body) {
		t.Fatalf("retry while still out of stock: %d %s", again.Status, again.Body)
	}
	if err := orders.Restock(context.Background(), s.Pool, testenv.TenantA, "SKU-LAMP", 10); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r := order(s, testenv.TenantA, "lamp", body); r.Status != 201 {
				t.Errorf("after restock: %d %s", r.Status, r.Body)
			}
		}()
	}
	wg.Wait()
	if n := testenv.Count(t, s.Pool, "purchase_order", ""); n != 1 {
		t.Fatalf("%d orders", n)
	}
	if avail, reserved := stock(t, s, "SKU-LAMP"); avail != 8 || reserved != 5 {
		t.Fatalf("lamp stock %d reserved %d", avail, reserved)
	}
}

func TestConcurrentPayAndCancelExactlyOneWins(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	for round := range 5 {
		created := order(s, testenv.TenantA, fmt.Sprintf("race-%d", round), `{"customer_id":"c","items":[{"sku":"SKU-KEYBOARD","quantity":1}]}`)
		no := orderNo(t, created)
		var pay, cancel testenv.Response
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			pay = transition(s, testenv.TenantA, no, "pay", fmt.Sprintf("pay-%d", round), `{"payment_ref":"psp-1"}`)
		}()
		go func() {
			defer wg.Done()
			cancel = transition(s, testenv.TenantA, no, "cancel", fmt.Sprintf("cancel-%d", round), ``)
		}()
		wg.Wait()
		win, lose := pay, cancel
		if pay.Status != 200 {
			win, lose = cancel, pay
		}
		if win.Status != 200 || lose.Status != 409 {
			t.Fatalf("round %d: pay %d %s / cancel %d %s", round, pay.Status, pay.Body, cancel.Status, cancel.Body)
		}
		assertProblem(t, lose, "/problems/invalid-transition")
		var p struct {
			CurrentState string `json:"current_state"`
		}
		_ = json.Unmarshal(lose.Body, &p)
		if p.CurrentState != "PAID" && p.CurrentState != "CANCELED" {
			t.Fatalf("current_state %q", p.CurrentState)
		}
	}
}

func TestRetriedPaymentChargesOnce(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	no := orderNo(t, order(s, testenv.TenantA, "p", `{"customer_id":"c","items":[{"sku":"SKU-MONITOR","quantity":1}]}`))
	var wg sync.WaitGroup
	bodies := make([][]byte, 8)
	for i := range bodies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := transition(s, testenv.TenantA, no, "pay", "pay-once", `{"payment_ref":"psp-9"}`)
			if r.Status != 200 {
				t.Errorf("%d %s", r.Status, r.Body)
			}
			bodies[i] = r.Body
		}()
	}
	wg.Wait()
	for _, b := range bodies {
		if !bytes.Equal(b, bodies[0]) {
			t.Fatalf("answers differ")
		}
	}
	if n := testenv.Count(t, s.Pool, "payment_charge", "order_no = $1", no); n != 1 {
		t.Fatalf("%d charges", n)
	}
	if r := transition(s, testenv.TenantA, no, "refund", "refund-1", `{"reason":"damaged"}`); r.Status != 200 {
		t.Fatalf("refund: %d %s", r.Status, r.Body)
	}
	if r := transition(s, testenv.TenantA, no, "cancel", "cancel-after-refund", ``); r.Status != 409 {
		t.Fatalf("cancel after refund: %d %s", r.Status, r.Body)
	}
	// Another tenant cannot even name the order.
	if r := transition(s, testenv.TenantB, no, "refund", "x", ``); r.Status != 404 {
		t.Fatalf("cross-tenant transition: %d %s", r.Status, r.Body)
	}
}

// TestOrderInvariantsUnderRandomInterleavings fires creates, pays, cancels
// and refunds at random, concurrently, each sent one to three times under
// its key (retries and duplicates), some keys shared by two intents, and
// then checks the invariants in the database.
func TestOrderInvariantsUnderRandomInterleavings(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	ctx := context.Background()
	skus := []string{"SKU-LAMP", "SKU-MONITOR", "SKU-MOUSE"}
	initial := map[string]int{}
	for _, sku := range skus {
		a, r := stock(t, s, sku)
		initial[sku] = a + r
	}
	rng := rand.New(rand.NewPCG(7, 11))
	var mu sync.Mutex
	var created []string
	var wg sync.WaitGroup
	// Every answer is one the contract allows for a retried intent:
	// done, accepted, a conflict or a business rejection.
	allowed := map[int]bool{200: true, 201: true, 202: true, 409: true, 422: true}
	send := func(times int, f func() testenv.Response) {
		for range times {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if r := f(); !allowed[r.Status] {
					t.Errorf("unexpected answer %d %s", r.Status, r.Body)
				}
			}()
		}
	}
	coupons := []string{"", "", "FIVEOFF", "LAST1"}
	for wave := range 4 {
		for range 12 {
			key := fmt.Sprintf("w%d-c%d", wave, rng.IntN(8)) // collisions: same key, maybe another basket
			coupon := ""
			if c := coupons[rng.IntN(len(coupons))]; c != "" {
				coupon = `,"coupon_code":"` + c + `"`
			}
			body := fmt.Sprintf(`{"customer_id":"c%d","items":[{"sku":"%s","quantity":%d}]%s}`, rng.IntN(3), skus[rng.IntN(len(skus))], 1+rng.IntN(2), coupon)
			send(1+rng.IntN(3), func() testenv.Response {
				r := order(s, testenv.TenantA, key, body)
				if r.Status == 201 {
					mu.Lock()
					created = append(created, orderNo(t, r))
					mu.Unlock()
				}
				return r
			})
		}
		wg.Wait()
		mu.Lock()
		pool := append([]string(nil), created...)
		mu.Unlock()
		for i := range 16 {
			if len(pool) == 0 {
				break
			}
			no := pool[rng.IntN(len(pool))]
			action := []string{"pay", "cancel", "refund", "fulfill"}[rng.IntN(4)]
			key := fmt.Sprintf("w%d-t%d", wave, i%10)
			body := ``
			if action == "pay" {
				body = `{"payment_ref":"psp"}`
			}
			send(1+rng.IntN(3), func() testenv.Response { return transition(s, testenv.TenantA, no, action, key, body) })
		}
		wg.Wait()
	}

	var bad int
	if err := s.Pool.QueryRow(ctx, `SELECT count(*) FROM purchase_order WHERE status NOT IN ('CREATED','PAID','FULFILLED','CANCELED','REFUNDED')`).Scan(&bad); err != nil || bad != 0 {
		t.Fatalf("%d orders outside the machine (%v)", bad, err)
	}
	if err := s.Pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM purchase_order GROUP BY tenant_id, idem_key HAVING count(*) > 1) d`).Scan(&bad); err != nil || bad != 0 {
		t.Fatalf("%d keys with two orders (%v)", bad, err)
	}
	// Every event is an edge of the machine, and each order's events
	// chain from INIT to the order's status.
	rows, err := s.Pool.Query(ctx, `SELECT e.order_no, e.from_status, e.to_status, o.status
		FROM order_event e JOIN purchase_order o USING (order_no) ORDER BY e.order_no, e.id`)
	if err != nil {
		t.Fatal(err)
	}
	last := map[string]string{}
	final := map[string]string{}
	for rows.Next() {
		var no, from, to, status string
		if err := rows.Scan(&no, &from, &to, &status); err != nil {
			t.Fatal(err)
		}
		if !orders.CanTransition(orders.Status(from), orders.Status(to)) {
			t.Fatalf("event %s -> %s is not in the machine", from, to)
		}
		want := last[no]
		if want == "" {
			want = string(orders.StatusInit)
		}
		if from != want {
			t.Fatalf("order %s: event from %s follows %s", no, from, want)
		}
		last[no], final[no] = to, status
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	if n := testenv.Count(t, s.Pool, "purchase_order", ""); n != len(last) {
		t.Fatalf("%d orders, %d with events", n, len(last))
	}
	for no, to := range last {
		if final[no] != to {
			t.Fatalf("order %s is %s, its last event says %s", no, final[no], to)
		}
	}
	// Stock: live orders (CREATED, PAID) hold their reservations, fulfilled
	// ones shipped theirs, canceled and refunded ones gave them back.
	for _, sku := range skus {
		avail, reserved := stock(t, s, sku)
		var held, shipped int
		if err := s.Pool.QueryRow(ctx, `SELECT
			COALESCE(sum(i.quantity) FILTER (WHERE o.status IN ('CREATED', 'PAID')), 0),
			COALESCE(sum(i.quantity) FILTER (WHERE o.status = 'FULFILLED'), 0)
			FROM order_item i JOIN purchase_order o USING (order_no) WHERE i.tenant_id = $1 AND i.sku = $2`, testenv.TenantA, sku).Scan(&held, &shipped); err != nil {
			t.Fatal(err)
		}
		if avail < 0 || avail+reserved+shipped != initial[sku] || reserved != held {
			t.Fatalf("%s: stock %d + reserved %d + shipped %d != %d, or reserved != %d held by live orders", sku, avail, reserved, shipped, initial[sku], held)
		}
	}
	// Coupons: uses count the redemptions, which only live orders keep.
	var mismatched int
	if err := s.Pool.QueryRow(ctx, `SELECT count(*) FROM coupon c WHERE c.tenant_id = $1 AND c.uses <> (
		SELECT count(*) FROM coupon_redemption r WHERE r.tenant_id = c.tenant_id AND r.code = c.code)`, testenv.TenantA).Scan(&mismatched); err != nil || mismatched != 0 {
		t.Fatalf("%d coupons whose uses differ from their redemptions (%v)", mismatched, err)
	}
	if err := s.Pool.QueryRow(ctx, `SELECT count(*) FROM coupon_redemption r JOIN purchase_order o USING (order_no)
		WHERE o.status = 'CANCELED' OR o.coupon_code IS DISTINCT FROM r.code`).Scan(&mismatched); err != nil || mismatched != 0 {
		t.Fatalf("%d redemptions held by canceled or other orders (%v)", mismatched, err)
	}
	if err := s.Pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT order_no FROM payment_charge GROUP BY order_no HAVING count(*) > 1) d`).Scan(&bad); err != nil || bad != 0 {
		t.Fatalf("%d orders charged twice (%v)", bad, err)
	}
	if n := testenv.Count(t, s.Pool, "idempotency_record", "status = 'PROCESSING'"); n != 0 {
		t.Fatalf("%d intents left PROCESSING", n)
	}
	t.Logf("%d orders, %d events", testenv.Count(t, s.Pool, "purchase_order", ""), testenv.Count(t, s.Pool, "order_event", ""))
}

func TestCancelGivesTheCouponBack(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	last1 := `{"customer_id":"c","items":[{"sku":"SKU-MOUSE","quantity":1}],"coupon_code":"LAST1"}`
	no := orderNo(t, order(s, testenv.TenantA, "cp-1", last1))
	if r := order(s, testenv.TenantA, "cp-2", last1); r.Status != 422 {
		t.Fatalf("a used-up coupon: %d %s", r.Status, r.Body)
	}
	if r := transition(s, testenv.TenantA, no, "cancel", "cp-cancel", ``); r.Status != 200 {
		t.Fatalf("cancel: %d %s", r.Status, r.Body)
	}
	// The rejected intent is retried under its key and now executes.
	if r := order(s, testenv.TenantA, "cp-2", last1); r.Status != 201 {
		t.Fatalf("after the cancel: %d %s", r.Status, r.Body)
	}
	var uses int
	if err := s.Pool.QueryRow(context.Background(), `SELECT uses FROM coupon WHERE tenant_id = 'acme' AND code = 'LAST1'`).Scan(&uses); err != nil || uses != 1 {
		t.Fatalf("uses %d %v", uses, err)
	}
}

// docs/http-contract.md's order body, as written, is one the server
// takes, and prices as the catalog says.
func TestTheContractsOrderBodyIsAnOrder(t *testing.T) {
	blocks, err := docs.Blocks("../../docs/http-contract.md")
	if err != nil {
		t.Fatal(err)
	}
	var body string
	for _, b := range blocks {
		if b.Lang == "json" && strings.Contains(b.Text, `"items"`) {
			body = b.Text
		}
	}
	if body == "" {
		t.Fatal("docs/http-contract.md has no order body")
	}
	s := testenv.NewStack(t, testenv.Options{})
	r := order(s, testenv.TenantA, "doc-order", body)
	var v orders.View
	if err := json.Unmarshal(r.Body, &v); r.Status != http.StatusCreated || err != nil {
		t.Fatalf("the contract's order body: %d %s", r.Status, r.Body)
	}
	if v.Status != orders.StatusCreated || v.TotalMinor != 2*2900-500 {
		t.Fatalf("the contract's order: %+v", v)
	}
}
