package orders

import (
	"sort"
	"strconv"

	"github.com/idemflow/idemflow/internal/apperr"
	"github.com/idemflow/idemflow/op"
)

// Limits of a create request.
const (
	maxItems    = 50
	maxQuantity = 1000
)

const (
	skuPattern    = `^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`
	couponPattern = `^[A-Za-z0-9_-]{1,64}$`
)

// Item is one line of a create request.
type Item struct {
	SKU      string `json:"sku"`
	Quantity int    `json:"quantity"`
}

// CreateRequest is the body of POST /v1/orders. It has no price, total or
// discount: the server computes them, and the strict decoder rejects such
// fields as unknown.
type CreateRequest struct {
	CustomerID string `json:"customer_id"`
	Items      []Item `json:"items"`
	CouponCode string `json:"coupon_code,omitempty"`
}

// createRules are the rules of a create request, on the schema derived
// from CreateRequest: the one place they are written (Create enforces and
// publishes them).
func createRules(s *op.Schema) {
	s.Description = "No prices: the server computes them."
	s.Properties["customer_id"].MinLength, s.Properties["customer_id"].MaxLength = op.Ptr(1), op.Ptr(128)
	items := s.Properties["items"]
	items.Type, items.Types = "array", nil // never null
	items.MinItems, items.MaxItems = op.Ptr(1), op.Ptr(maxItems)
	// Each SKU at most once (Normalize): JSON Schema can say no two lines
	// are equal, not that no two name one SKU; the description says the rest.
	items.UniqueItems = true
	items.Description = "One line per SKU: a SKU sent twice is refused (400); send one line with the total quantity."
	// The rule a generator can read: no two items share this member
	// (Schemathesis' hook honours it for any declaration).
	items.Extra = map[string]any{"x-unique-by": "sku"}
	items.Items.Properties["sku"].Pattern = skuPattern
	items.Items.Properties["quantity"].Minimum = op.Ptr(1.0)
	items.Items.Properties["quantity"].Maximum = op.Ptr(float64(maxQuantity))
	s.Properties["coupon_code"].Pattern = couponPattern
	s.Examples = []any{map[string]any{"customer_id": "c-7", "items": []any{map[string]any{"sku": "SKU-MOUSE", "quantity": 2}}, "coupon_code": "FIVEOFF"}}
}

// Normalize refuses a SKU sent twice (a rule across items, which the
// schema cannot say) and sorts the items by SKU, so that the same basket in
// another order is the same intent.
func (r *CreateRequest) Normalize() error {
	var v apperr.Invalid
	seen := map[string]bool{}
	for i, it := range r.Items {
		if seen[it.SKU] {
			v.Add(itemField(i, "sku"), "%s appears twice; send one line with the total quantity", it.SKU)
		}
		seen[it.SKU] = true
	}
	if err := v.Err(); err != nil {
		return err
	}
	sort.Slice(r.Items, func(i, j int) bool { return r.Items[i].SKU < r.Items[j].SKU })
	return nil
}

func itemField(i int, f string) string {
	return "items[" + strconv.Itoa(i) + "]." + f
}

// TransitionRequest is the body of POST /v1/orders/{order_no}/{action}.
type TransitionRequest struct {
	// PaymentRef is required by pay: the agent's reference for the payment.
	PaymentRef string `json:"payment_ref,omitempty"`
	// Reason is an optional note for cancel and refund.
	Reason string `json:"reason,omitempty"`
}
