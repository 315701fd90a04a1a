package orders

// The order domain's contract with the rest of idemflow: what names its
// intents and how its workflows are identified. The declarations are in
// create.go (creation) and actions.go (pay, cancel, refund, fulfill), the
// states and actions in machine.go, the answers' views in order.go.

import (
	"embed"
	"encoding/json"

	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/op"
)

// The answers' JSON Schemas, served in the contract: an order (the body of
// a create's 201, its replays and GET /v1/orders/{order_no}) and a
// transition's answer (one schema for the four actions).
var (
	//go:embed order.schema.json
	orderSchema []byte
	//go:embed transition.schema.json
	transitionSchema []byte

	transitionAnswer = op.MustSchema(transitionSchema)

	// The orders' paths in the contract, with their answers' statuses
	// and texts (each declaration carries its own, op.Spec.Paths).
	//go:embed openapi.json
	contract []byte

	// The orders' tables, coupons, catalog and payments' schema.
	//go:embed migrations/*.sql
	migrationFiles embed.FS
)

// pathsOf are the contract's path items of routes, for a declaration's
// Paths.
func pathsOf(routes ...string) []byte {
	var all map[string]json.RawMessage
	if err := json.Unmarshal(contract, &all); err != nil {
		panic("orders: openapi.json: " + err.Error())
	}
	some := map[string]json.RawMessage{}
	for _, r := range routes {
		item, ok := all[r]
		if !ok {
			panic("orders: openapi.json has no path " + r)
		}
		some[r] = item
	}
	b, err := json.Marshal(some)
	if err != nil {
		panic(err)
	}
	return b
}

// links lead from an order's answer (a create's, whose order number is in
// the body, or a transition's, whose number is in its path) to its read
// and to each of its transitions.
func links(orderNo string) []op.Link {
	out := []op.Link{{Name: "getOrder", OperationID: "getOrder", Parameters: map[string]string{"order_no": orderNo}}}
	for _, a := range []Action{ActionPay, ActionCancel, ActionRefund, ActionFulfill} {
		id := string(a) + "Order"
		out = append(out, op.Link{Name: id, OperationID: id, Parameters: map[string]string{"order_no": orderNo}})
	}
	return out
}

const (
	// BizCreate names order creation in idempotency records.
	BizCreate = "order.create"
	// ScopeCreate is the first segment of a create intent's workflow ID.
	ScopeCreate = "order"
)

// WorkflowID is the workflow ID of an order-create intent.
func WorkflowID(tenantID, key string) string { return idem.WorkflowID(ScopeCreate, tenantID, key) }

// TransitionWorkflowID is the workflow ID of a pay, cancel, refund or
// fulfill intent.
func TransitionWorkflowID(action Action, tenantID, key string) string {
	return idem.WorkflowID(action.Scope(), tenantID, key)
}

// TransitionInput is what Transition, the step of an order's transitions,
// takes: the intent, the order, the action and the body.
type TransitionInput struct {
	Intent  idem.Intent       `json:"intent"`
	OrderNo string            `json:"order_no"`
	Action  Action            `json:"action"`
	Request TransitionRequest `json:"request"`
}
