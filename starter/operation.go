package starter

import (
	"encoding/json"

	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/op"
)

// OperationIntent builds the submission of a declared operation's
// prepared request (op.Operation.Prepare): the operation's workflow, by
// name, over the normalized request.
func OperationIntent(o *op.Operation, tenantID, key string, p op.Prepared) Intent {
	return Intent{
		Intent:   idem.Intent{TenantID: tenantID, Key: key, BizType: o.BizType, Fingerprint: p.Fingerprint, WorkflowID: o.WorkflowID(tenantID, key)},
		Workflow: o.Workflow,
		Input: func(it idem.Intent, hint json.RawMessage) any {
			req, err := p.Request()
			if err != nil {
				panic(err) // a request Prepare decoded marshals again
			}
			return op.Input{Intent: it, Request: req, Hint: hint}
		},
		Hint:    o.Hint(tenantID, p),
		Summary: truncate(p.Summary, 200),
	}
}
