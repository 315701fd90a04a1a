package orders

// An order's transitions as declarations: pay, cancel, refund and fulfill,
// each its own operation under POST /v1/orders/{order_no}/{action}.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/intent"
	"github.com/idemflow/idemflow/internal/problem"
	"github.com/idemflow/idemflow/op"
	"github.com/jackc/pgx/v5"
)

// PayRequest is pay's request: the order (from the path over HTTP) and
// the agent's reference for the payment.
type PayRequest struct {
	OrderNo    string `json:"order_no" jsonschema:"the order, as returned by create_order"`
	PaymentRef string `json:"payment_ref" jsonschema:"the agent's reference for the payment"`
	Reason     string `json:"reason,omitempty" jsonschema:"an optional note"`
}

// ChangeRequest is the request of cancel, refund and fulfill.
type ChangeRequest struct {
	OrderNo string `json:"order_no" jsonschema:"the order, as returned by create_order"`
	Reason  string `json:"reason,omitempty" jsonschema:"an optional note, for cancel and refund"`
}

// The declarations of an order's transitions. The four share the workflow
// and the activity TransitionOrder, as they did before declarations (the
// worker dispatches by business type), so recorded histories replay and
// each keeps its scope, business type and fingerprints.
var (
	Pay = transition(ActionPay, "Pay a CREATED order; the payment is charged at most once.",
		func(r PayRequest) (string, TransitionRequest) {
			return r.OrderNo, TransitionRequest{PaymentRef: r.PaymentRef, Reason: r.Reason}
		},
		func(s *op.Schema) {
			s.Properties["payment_ref"].MinLength, s.Properties["payment_ref"].MaxLength = op.Ptr(1), op.Ptr(128)
			transitionRules(s)
		},
		// The payment is the order's, under the agent's reference for it;
		// the reason is a note a model rewords.
		op.IntentField{Name: "order_no", Norm: intent.ID}, op.IntentField{Name: "payment_ref", Norm: intent.ID})
	Cancel  = change(ActionCancel, "Cancel a CREATED order and release its stock.")
	Refund  = change(ActionRefund, "Refund a PAID order; the refund is made at most once.")
	Fulfill = change(ActionFulfill, "Mark a PAID order fulfilled (shipped).")
)

func change(a Action, description string) *op.Operation {
	return transition(a, description, func(r ChangeRequest) (string, TransitionRequest) {
		return r.OrderNo, TransitionRequest{Reason: r.Reason}
	}, transitionRules, op.IntentField{Name: "order_no", Norm: intent.ID})
}

func transitionRules(s *op.Schema) {
	s.Properties["order_no"].MinLength = op.Ptr(1)
	s.Properties["reason"].MaxLength = op.Ptr(500)
}

// transition declares action a over the request R, which split reads as
// the order and the body the fingerprint and the step have always taken.
func transition[R any](a Action, description string, split func(R) (string, TransitionRequest), rules func(*op.Schema), fields ...op.IntentField) *op.Operation {
	return op.Define(op.Spec[R, event]{
		Name:        string(a) + "_order",
		Description: description,
		Route:       "/v1/orders/{order_no}/" + string(a),
		BizType:     a.BizType(),
		Scope:       a.Scope(),
		Workflow:    "TransitionOrder",
		Activity:    "TransitionOrder",
		Rules:       rules,
		Intent:      fields,
		Summary: func(r R) string {
			orderNo, _ := split(r)
			return fmt.Sprintf("%s order %s", a, orderNo)
		},
		Fingerprint: func(r R) any {
			orderNo, body := split(r)
			return struct {
				OrderNo string            `json:"order_no"`
				Body    TransitionRequest `json:"body"`
			}{orderNo, body}
		},
		Check: func(ctx context.Context, q op.Querier, tenantID string, r R) error {
			orderNo, _ := split(r)
			exists, err := Exists(ctx, q, tenantID, orderNo)
			if err == nil && !exists {
				return op.NotFound("no order " + orderNo)
			}
			return err
		},
		Step: func(ctx context.Context, tx pgx.Tx, in op.In[R]) (event, error) {
			orderNo, body := split(in.Request)
			it := idem.Intent{TenantID: in.TenantID, Key: in.Key, BizType: a.BizType(), Fingerprint: in.Fingerprint, WorkflowID: in.WorkflowID}
			answer, err := Transition(ctx, tx, TransitionInput{Intent: it, OrderNo: orderNo, Action: a, Request: body}, time.Now())
			return event{OrderNo: orderNo, Body: answer}, err
		},
		Lookup: lookupEvent,
		View: func(e event) op.Answer {
			return op.Answer{Status: 200, Body: json.RawMessage(e.Body)}
		},
		Table:      "order_event",
		Rejections: transitionRejections(),
		Answer:     transitionAnswer,
		Paths:      pathsOf("/v1/orders/{order_no}/" + string(a)),
		Links:      links("$request.path.order_no"),
		Inspect:    eventLines,
	})
}

// event is what an order intent leaves to answer from: its event's order
// and stored answer (every create and transition writes one event).
type event struct {
	OrderNo string
	Body    []byte
}

// lookupEvent reads the event a key wrote.
func lookupEvent(ctx context.Context, q op.Querier, tenantID, key string) (event, bool, error) {
	var e event
	err := q.QueryRow(ctx, `SELECT order_no, response_body FROM order_event WHERE tenant_id = $1 AND idem_key = $2`,
		tenantID, key).Scan(&e.OrderNo, &e.Body)
	if errors.Is(err, pgx.ErrNoRows) {
		return e, false, nil
	}
	return e, err == nil, err
}

// transitionRejections are what a transition's step can answer. An invalid
// transition is a rejection of any state machine's (apperr), described
// with idemflow's own problem types.
func transitionRejections() map[string]string {
	invalid, _ := problem.Describe(problem.TypeInvalidTransition)
	return map[string]string{
		"invalid-transition": invalid,
		"order-not-found":    "The order named in the path does not exist for this tenant. Nothing was written.",
		"unknown-action":     "The path names no order action; the actions are pay, cancel, refund and fulfill. Nothing was written.",
	}
}
