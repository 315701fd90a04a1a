package gateway

import (
	"encoding/json"
	"net/http"

	"github.com/idemflow/idemflow/op"
	"github.com/idemflow/idemflow/starter"
)

// serveOperation serves a declared operation's POST: the same key, wait,
// replay and conflict rules as every built-in.
func (g *Gateway) serveOperation(o *op.Operation) tenantHandler {
	return func(w http.ResponseWriter, r *http.Request, tenantID string) {
		var body json.RawMessage
		g.serveIntent(w, r, o.BizType, &body, false, func(key string) (starter.Intent, error) {
			return starter.OperationIntent(o, tenantID, key, body)
		})
	}
}
