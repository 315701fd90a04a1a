package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/idemflow/idemflow/internal/apperr"
	"github.com/idemflow/idemflow/op"
	"github.com/idemflow/idemflow/starter"
)

// serveOperation serves a declared operation's POST: the same key, wait,
// replay and conflict rules as every other. The route's path parameters
// join the body; the declaration's check (an order that must exist) runs
// before anything is recorded.
func (g *Gateway) serveOperation(o *op.Operation) tenantHandler {
	return func(w http.ResponseWriter, r *http.Request, tenantID string) {
		path := map[string]string{}
		for _, p := range o.PathParams {
			path[p] = r.PathValue(p)
		}
		var body json.RawMessage
		g.serveIntent(w, r, o.BizType, &body, o.EmptyBodyAllowed(), func(key string) (starter.Intent, error) {
			p, err := o.Prepare(body, path)
			if err != nil {
				return starter.Intent{}, err
			}
			if err := o.Check(r.Context(), g.DB, tenantID, p); err != nil {
				if errors.Is(err, apperr.ErrNotFound) {
					return starter.Intent{}, err
				}
				return starter.Intent{}, fmt.Errorf("%w: %w", starter.ErrUnavailable, err)
			}
			return starter.OperationIntent(o, tenantID, key, p), nil
		})
	}
}
