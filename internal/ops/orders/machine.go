// Package orders is the purchase-order domain: the create request and its
// fingerprint, server-side pricing from the catalog and coupons, the order
// state machine, and the tables that hold them.
package orders

import "github.com/idemflow/idemflow/internal/apperr"

// Status is an order's state.
type Status string

// The order state machine:
//
//	INIT ─▶ CREATED ─▶ PAID ─▶ FULFILLED
//	           │          └──▶ REFUNDED
//	           └──▶ CANCELED
const (
	StatusInit      Status = "INIT"
	StatusCreated   Status = "CREATED"
	StatusPaid      Status = "PAID"
	StatusFulfilled Status = "FULFILLED"
	StatusCanceled  Status = "CANCELED"
	StatusRefunded  Status = "REFUNDED"
)

// transitions is the whole machine: nothing else is allowed.
var transitions = map[Status][]Status{
	StatusInit:    {StatusCreated},
	StatusCreated: {StatusPaid, StatusCanceled},
	StatusPaid:    {StatusFulfilled, StatusRefunded},
}

// CanTransition reports whether from -> to is an edge of the machine.
func CanTransition(from, to Status) bool {
	for _, t := range transitions[from] {
		if t == to {
			return true
		}
	}
	return false
}

// Action is a transition an agent can ask for.
type Action string

// Actions and the state each one leads to.
const (
	ActionPay     Action = "pay"
	ActionCancel  Action = "cancel"
	ActionRefund  Action = "refund"
	ActionFulfill Action = "fulfill"
)

// Target is the state an action moves an order to.
func (a Action) Target() (Status, bool) {
	switch a {
	case ActionPay:
		return StatusPaid, true
	case ActionCancel:
		return StatusCanceled, true
	case ActionRefund:
		return StatusRefunded, true
	case ActionFulfill:
		return StatusFulfilled, true
	}
	return "", false
}

// BizType names the action in idempotency records.
func (a Action) BizType() string { return "order." + string(a) }

// Scope is the first segment of the action's workflow IDs.
func (a Action) Scope() string { return "order-" + string(a) }

// checkTransition returns the typed rejection for a forbidden edge.
func checkTransition(orderNo string, from, to Status) error {
	if CanTransition(from, to) {
		return nil
	}
	return apperr.InvalidTransition("order "+orderNo, string(from), string(to))
}
