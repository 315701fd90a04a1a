package starter

import (
	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/op"
)

// OperationIntent validates a declared operation's body (a
// *apperr.InvalidError when it can never succeed) and builds its
// submission: the operation's workflow, by name, over the normalized
// request.
func OperationIntent(o *op.Operation, tenantID, key string, body []byte) (Intent, error) {
	req, fp, summary, err := o.Prepare(body)
	if err != nil {
		return Intent{}, err
	}
	return Intent{
		Intent:   idem.Intent{TenantID: tenantID, Key: key, BizType: o.BizType, Fingerprint: fp, WorkflowID: o.WorkflowID(tenantID, key)},
		Workflow: o.Workflow,
		Input:    func(it idem.Intent) any { return op.Input{Intent: it, Request: req} },
		Summary:  truncate(summary, 200),
	}, nil
}
