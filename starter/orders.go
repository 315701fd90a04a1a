package starter

import (
	"fmt"

	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/orders"
	"github.com/idemflow/idemflow/workflows"
)

// OrderIntent validates a create-order request and builds its submission.
func OrderIntent(tenantID, key string, req orders.CreateRequest) (Intent, error) {
	if err := req.Normalize(); err != nil {
		return Intent{}, err
	}
	fp, err := req.Fingerprint()
	if err != nil {
		return Intent{}, err
	}
	return newIntent(tenantID, key, orders.BizCreate, fp, orders.WorkflowID(tenantID, key),
		workflows.CreateOrder, func(it idem.Intent) any { return orders.CreateInput{Intent: it, Request: req} },
		fmt.Sprintf("order for %s: %d item(s)", req.CustomerID, len(req.Items))), nil
}

// TransitionIntent validates an order transition and builds its submission.
func TransitionIntent(tenantID, key, orderNo string, action orders.Action, req orders.TransitionRequest) (Intent, error) {
	if err := req.Normalize(action); err != nil {
		return Intent{}, err
	}
	fp, err := orders.TransitionFingerprint(orderNo, action, req)
	if err != nil {
		return Intent{}, err
	}
	return newIntent(tenantID, key, action.BizType(), fp, orders.TransitionWorkflowID(action, tenantID, key),
		workflows.TransitionOrder, func(it idem.Intent) any {
			return orders.TransitionInput{Intent: it, OrderNo: orderNo, Action: action, Request: req}
		},
		fmt.Sprintf("%s order %s", action, orderNo)), nil
}
