package orders

import (
	"regexp"
	"sort"
	"strconv"
	"unicode/utf8"

	"github.com/idemflow/idemflow/apperr"
	"github.com/idemflow/idemflow/idem"
)

// Limits of a create request.
const (
	maxItems    = 50
	maxQuantity = 1000
)

var (
	skuPattern    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)
	couponPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
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

// Normalize validates the request and sorts its items by SKU, so that the
// same basket in another order is the same intent.
func (r *CreateRequest) Normalize() error {
	var v apperr.Invalid
	if n := utf8.RuneCountInString(r.CustomerID); n == 0 || n > 128 {
		v.Add("customer_id", "is required, at most 128 characters")
	}
	if len(r.Items) == 0 || len(r.Items) > maxItems {
		v.Add("items", "must hold 1 to %d items, got %d", maxItems, len(r.Items))
	}
	seen := map[string]bool{}
	for i, it := range r.Items {
		switch {
		case !skuPattern.MatchString(it.SKU):
			v.Add(itemField(i, "sku"), "must be 1-64 of [A-Za-z0-9_.-]")
		case seen[it.SKU]:
			v.Add(itemField(i, "sku"), "%s appears twice; send one line with the total quantity", it.SKU)
		}
		seen[it.SKU] = true
		if it.Quantity < 1 || it.Quantity > maxQuantity {
			v.Add(itemField(i, "quantity"), "must be 1 to %d, got %d", maxQuantity, it.Quantity)
		}
	}
	if r.CouponCode != "" && !couponPattern.MatchString(r.CouponCode) {
		v.Add("coupon_code", "must be 1-64 of [A-Za-z0-9_-]")
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

// Fingerprint covers customer, items (SKU and quantity, sorted) and coupon:
// exactly what changes the outcome. Call after Normalize.
func (r CreateRequest) Fingerprint() (string, error) {
	return idem.Fingerprint(BizCreate, r)
}

// TransitionRequest is the body of POST /v1/orders/{order_no}/{action}.
type TransitionRequest struct {
	// PaymentRef is required by pay: the agent's reference for the payment.
	PaymentRef string `json:"payment_ref,omitempty"`
	// Reason is an optional note for cancel and refund.
	Reason string `json:"reason,omitempty"`
}

// Normalize validates the body for action.
func (r *TransitionRequest) Normalize(action Action) error {
	var v apperr.Invalid
	if action == ActionPay {
		if n := utf8.RuneCountInString(r.PaymentRef); n == 0 || n > 128 {
			v.Add("payment_ref", "is required for pay, at most 128 characters")
		}
	} else if r.PaymentRef != "" {
		v.Add("payment_ref", "is only accepted by pay")
	}
	if utf8.RuneCountInString(r.Reason) > 500 {
		v.Add("reason", "is at most 500 characters")
	}
	return v.Err()
}

// TransitionFingerprint covers the order, the action and the body.
func TransitionFingerprint(orderNo string, action Action, r TransitionRequest) (string, error) {
	return idem.Fingerprint(action.BizType(), struct {
		OrderNo string            `json:"order_no"`
		Body    TransitionRequest `json:"body"`
	}{orderNo, r})
}
