package starter

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/idemflow/idemflow/apperr"
	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/orders"
	"github.com/idemflow/idemflow/problem"
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
	return newIntent(tenantID, key, orders.BizCreate, fp, workflows.OrderWorkflowID(tenantID, key),
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
	return newIntent(tenantID, key, action.BizType(), fp, workflows.TransitionWorkflowID(action, tenantID, key),
		workflows.TransitionOrder, func(it idem.Intent) any {
			return orders.TransitionInput{Intent: it, OrderNo: orderNo, Action: action, Request: req}
		},
		fmt.Sprintf("%s order %s", action, orderNo)), nil
}

func (g *Gateway) createOrder(w http.ResponseWriter, r *http.Request, tenantID string) {
	var req orders.CreateRequest
	g.serveIntent(w, r, orders.BizCreate, &req, false, func(key string) (Intent, error) { return OrderIntent(tenantID, key, req) })
}

func (g *Gateway) transitionOrder(w http.ResponseWriter, r *http.Request, tenantID string) {
	action := orders.Action(r.PathValue("action"))
	if _, ok := action.Target(); !ok {
		writeProblem(w, problem.New(problem.TypeNotFound, http.StatusNotFound, "no order action "+string(action)+"; use pay, cancel, refund or fulfill"))
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
		writeProblem(w, problem.New(problem.TypeNotFound, http.StatusNotFound, "no order "+orderNo))
		return
	}
	var req orders.TransitionRequest
	g.serveIntent(w, r, action.BizType(), &req, true, func(key string) (Intent, error) {
		return TransitionIntent(tenantID, key, orderNo, action, req)
	})
}

func (g *Gateway) getOrder(w http.ResponseWriter, r *http.Request, tenantID string) {
	o, err := orders.Get(r.Context(), g.DB, tenantID, r.PathValue("order_no"))
	if errors.Is(err, apperr.ErrNotFound) {
		writeProblem(w, problem.New(problem.TypeNotFound, http.StatusNotFound, "no order "+r.PathValue("order_no")))
		return
	}
	if err != nil {
		g.unavailable(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(o.Body())
}
