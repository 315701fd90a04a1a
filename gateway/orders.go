package gateway

import (
	"net/http"

	"github.com/idemflow/idemflow/orders"
	"github.com/idemflow/idemflow/starter"
)

func (g *Gateway) transitionOrder(w http.ResponseWriter, r *http.Request, tenantID string) {
	action := orders.Action(r.PathValue("action"))
	if _, ok := action.Target(); !ok {
		writeNotFound(w, "no order action "+string(action)+"; use pay, cancel, refund or fulfill")
		return
	}
	orderNo := r.PathValue("order_no")
	// Another tenant's order, or none, is a 404 before anything is recorded.
	exists, err := orders.Exists(r.Context(), g.DB, tenantID, orderNo)
	if err != nil {
		g.unavailable(w, r, err)
		return
	}
	if !exists {
		writeNotFound(w, "no order "+orderNo)
		return
	}
	var req orders.TransitionRequest
	g.serveIntent(w, r, action.BizType(), &req, true, func(key string) (starter.Intent, error) {
		return starter.TransitionIntent(tenantID, key, orderNo, action, req)
	})
}

func (g *Gateway) getOrder(w http.ResponseWriter, r *http.Request, tenantID string) {
	o, err := orders.Get(r.Context(), g.DB, tenantID, r.PathValue("order_no"))
	g.answerRead(w, r, "no order "+r.PathValue("order_no"), err, func() { writeBody(w, o.Body()) })
}
