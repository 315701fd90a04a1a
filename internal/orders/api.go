package orders

// The order domain's contract with the rest of idemflow: what names its
// intents and how its workflows are identified. The declarations are in
// create.go (creation) and actions.go (pay, cancel, refund, fulfill), the
// states and actions in machine.go, the answers' views in order.go.

import (
	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/internal/problem"
)

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

// described maps codes to their descriptions (problem.Descriptions), for
// a declaration's Rejections.
func described(codes ...string) map[string]string {
	out := map[string]string{}
	for _, c := range codes {
		out[c] = problem.Descriptions[problem.TypeRejectedPrefix+c]
	}
	return out
}
