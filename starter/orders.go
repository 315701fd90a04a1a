package starter

import (
	"fmt"

	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/orders"
	"github.com/idemflow/idemflow/workflows"
)

// Transition is how a pay, cancel, refund or fulfill request becomes a
// submission.
var Transition = Kind[*orders.ActionRequest]{
	BizType: func(t *orders.ActionRequest) string { return t.Action.BizType() },
	WorkflowID: func(tenantID, key string, t *orders.ActionRequest) string {
		return orders.TransitionWorkflowID(t.Action, tenantID, key)
	},
	Workflow: workflows.TransitionOrder,
	Input: func(it idem.Intent, t *orders.ActionRequest) any {
		return orders.TransitionInput{Intent: it, OrderNo: t.OrderNo, Action: t.Action, Request: t.Request}
	},
	Summary: func(t *orders.ActionRequest) string { return fmt.Sprintf("%s order %s", t.Action, t.OrderNo) },
}

// TransitionIntent validates an order transition and builds its submission.
func TransitionIntent(tenantID, key, orderNo string, action orders.Action, req orders.TransitionRequest) (Intent, error) {
	return Build(Transition, tenantID, key, &orders.ActionRequest{OrderNo: orderNo, Action: action, Request: req})
}
