package orders

import (
	"context"
	"fmt"

	"github.com/idemflow/idemflow/idem"
)

// Findings are the ways a tenant's orders break the domain's rules, by
// kind, with a line for each.
type Findings struct {
	IllegalTransitions, StockOff, CouponsOff, DoubleCaptures int
	Violations                                               []string
}

func (f *Findings) violate(format string, args ...any) {
	f.Violations = append(f.Violations, fmt.Sprintf(format, args...))
}

// CheckConsistency reads, within q, what tenant's orders left and holds it
// to the order domain's rules, whatever the faults the orders met: each
// order's events follow the state machine from INIT to its status; every
// unit of stock is on sale, reserved by a live order or shipped
// (initialStock is each SKU's units at the start); a coupon's uses are
// its redemptions; a paid order has one captured charge, a refunded one
// one refunded charge, an unpaid one none. chaos checks it after its run.
func CheckConsistency(ctx context.Context, q idem.Querier, tenant string, initialStock map[string]int) (Findings, error) {
	var f Findings
	rows, err := q.Query(ctx, `SELECT o.order_no, o.status, coalesce(array_agg(e.from_status ORDER BY e.id) FILTER (WHERE e.id IS NOT NULL), '{}'),
			coalesce(array_agg(e.to_status ORDER BY e.id) FILTER (WHERE e.id IS NOT NULL), '{}')
		FROM purchase_order o LEFT JOIN order_event e ON e.order_no = o.order_no
		WHERE o.tenant_id = $1 GROUP BY o.order_no, o.status`, tenant)
	if err != nil {
		return f, err
	}
	for rows.Next() {
		var no, status string
		var from, to []string
		if err := rows.Scan(&no, &status, &from, &to); err != nil {
			rows.Close()
			return f, err
		}
		at := StatusInit
		for i := range from {
			if Status(from[i]) != at || !CanTransition(at, Status(to[i])) {
				f.IllegalTransitions++
				f.violate("order %s: event %s -> %s from %s", no, from[i], to[i], at)
			}
			at = Status(to[i])
		}
		if Status(status) != at {
			f.IllegalTransitions++
			f.violate("order %s is %s, its events end at %s", no, status, at)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return f, err
	}

	// Stock: every unit is on sale, reserved by a live order, or shipped.
	srows, err := q.Query(ctx, `SELECT p.sku, p.stock, p.reserved,
			coalesce((SELECT sum(i.quantity) FROM order_item i JOIN purchase_order o ON o.order_no = i.order_no
				WHERE o.tenant_id = p.tenant_id AND i.sku = p.sku AND o.status IN ('CREATED', 'PAID')), 0),
			coalesce((SELECT sum(i.quantity) FROM order_item i JOIN purchase_order o ON o.order_no = i.order_no
				WHERE o.tenant_id = p.tenant_id AND i.sku = p.sku AND o.status = 'FULFILLED'), 0)
		FROM product p WHERE p.tenant_id = $1`, tenant)
	if err != nil {
		return f, err
	}
	for srows.Next() {
		var sku string
		var stock, reserved, live, shipped int
		if err := srows.Scan(&sku, &stock, &reserved, &live, &shipped); err != nil {
			srows.Close()
			return f, err
		}
		if reserved != live || stock+reserved+shipped != initialStock[sku] {
			f.StockOff++
			f.violate("%s: stock %d + reserved %d (live orders hold %d) + shipped %d != %d at start", sku, stock, reserved, live, shipped, initialStock[sku])
		}
	}
	srows.Close()
	if err := srows.Err(); err != nil {
		return f, err
	}
	crows, err := q.Query(ctx, `SELECT c.code, c.uses, (SELECT count(*) FROM coupon_redemption x WHERE x.tenant_id = c.tenant_id AND x.code = c.code)
		FROM coupon c WHERE c.tenant_id = $1`, tenant)
	if err != nil {
		return f, err
	}
	for crows.Next() {
		var code string
		var uses, redeemed int
		if err := crows.Scan(&code, &uses, &redeemed); err != nil {
			crows.Close()
			return f, err
		}
		if uses != redeemed {
			f.CouponsOff++
			f.violate("coupon %s: uses %d, redemptions %d", code, uses, redeemed)
		}
	}
	crows.Close()
	if err := crows.Err(); err != nil {
		return f, err
	}

	// Payments: one charge per paid order, none for an unpaid one.
	prows, err := q.Query(ctx, `SELECT o.order_no, o.status,
			count(p.*) FILTER (WHERE p.status = 'captured'), count(p.*) FILTER (WHERE p.status = 'refunded')
		FROM purchase_order o LEFT JOIN payment_charge p ON p.order_no = o.order_no
		WHERE o.tenant_id = $1 GROUP BY o.order_no, o.status`, tenant)
	if err != nil {
		return f, err
	}
	defer prows.Close()
	for prows.Next() {
		var no, status string
		var captured, refunded int
		if err := prows.Scan(&no, &status, &captured, &refunded); err != nil {
			return f, err
		}
		want := map[string][2]int{"PAID": {1, 0}, "FULFILLED": {1, 0}, "REFUNDED": {0, 1}}[status]
		if captured+refunded > 1 {
			f.DoubleCaptures++
		}
		if captured != want[0] || refunded != want[1] {
			f.violate("order %s (%s): %d captured, %d refunded charges", no, status, captured, refunded)
		}
	}
	return f, prows.Err()
}
