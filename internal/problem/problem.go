// Package problem renders RFC 9457 problem details. Activities use it as well
// as the gateway, because a business rejection's body is stored and must be
// replayed byte for byte.
package problem

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"

	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/internal/apperr"
)

// ContentType of every error body.
const ContentType = "application/problem+json"

// Problem types. They are relative URI references (RFC 9457 §3.1.1),
// resolved against the gateway's base URL, where GET /problems/{slug}
// describes each.
const (
	TypeInvalidKey        = "/problems/invalid-idempotency-key"
	TypeInvalidRequest    = "/problems/invalid-request"
	TypeUnauthorized      = "/problems/unauthorized"
	TypeBodyTooLarge      = "/problems/body-too-large"
	TypeKeyReused         = "/problems/idempotency-key-reused"
	TypeInProgress        = "/problems/request-in-progress"
	TypeInvalidTransition = "/problems/invalid-transition"
	TypeNotFound          = "/problems/not-found"
	TypeUnavailable       = "/problems/service-unavailable"
	TypeExecutionFailed   = "/problems/execution-failed"
	TypeInternal          = "/problems/internal"
	TypeMethodNotAllowed  = "/problems/method-not-allowed"
	TypeCanceled          = "/problems/canceled-by-operator"
	TypeUnsupportedMedia  = "/problems/unsupported-media-type"
	TypeTooManySessions   = "/problems/too-many-sessions"
	TypeOutcomeUnknown    = "/problems/outcome-unknown"
	TypeInsufficientScope = "/problems/insufficient-scope"
	// TypeRejectedPrefix + RejectedError.Code, e.g. /problems/out-of-stock.
	TypeRejectedPrefix = "/problems/"
)

// descriptions are idemflow's own problem types' texts, served at GET
// /problems/{slug}; an operation's rejections are described in its
// declaration (op.Spec.Rejections).
var descriptions = map[string]string{
	TypeInvalidKey:        "The Idempotency-Key header is missing or malformed: it must be 1 to 255 visible ASCII characters with no comma or whitespace. Nothing was recorded.",
	TypeInvalidRequest:    "The body is not valid JSON, has unknown fields or invalid values. Nothing was recorded: fix the body and retry with the same key.",
	TypeUnauthorized:      "The bearer token is missing, unknown or revoked.",
	TypeBodyTooLarge:      "The body is larger than 1 MiB. Nothing was recorded.",
	TypeKeyReused:         "This Idempotency-Key was already used with different parameters. Nothing was executed: the key stays bound to the parameters it was first used with, and those replay its first answer.",
	TypeInProgress:        "A request with this Idempotency-Key is still being processed. Retry after the Retry-After delay with the same key.",
	TypeInvalidTransition: "The order is not in a state that allows this transition; current_state says which state it is in.",
	TypeNotFound:          "No such resource for this tenant.",
	TypeUnavailable:       "PostgreSQL or Temporal is unavailable. Nothing was executed without its guard; retry with the same key.",
	TypeExecutionFailed:   "The intent did not complete and nothing was written. Retry with the same key to execute it again.",
	TypeInternal:          "An unexpected error. Retry with the same key: it cannot cause a duplicate.",
	TypeMethodNotAllowed:  "The method is not allowed on this resource.",
	TypeCanceled:          "An operator canceled or terminated this request's workflow before it wrote anything. Nothing was written. Retry with the same key to execute it again.",
	TypeInsufficientScope: "The OAuth access token is valid, but its scopes do not allow this request; the WWW-Authenticate header names the scope it needs.",
	TypeTooManySessions:   "MCP over HTTP: this tenant has as many open sessions as it may hold. Close one, or wait for an idle one to expire, then connect again.",
	TypeOutcomeUnknown:    "An HTTP tool's call got no answer that says whether it took effect, and it may not be sent again: an at_most_once tool's call met a timeout, a dropped connection or a 5xx, or the downstream refused the request sent again under the same key after such an answer (a 4xx, or a 409 that outlasted the first request). It may or may not have happened. This answer is final: idemflow never sends the call again under this key. Check with the downstream service before you act on it.",
	TypeUnsupportedMedia:  "The body is not sent as application/json. Nothing was recorded: send Content-Type: application/json (or none) and retry with the same key.",

	// The business rejection every operation's step can answer
	// (TypeRejectedPrefix + code): recorded FAILED, nothing written.
	TypeRejectedPrefix + "unstorable-input": "The request's parameters could not be stored with its record. Nothing was written: fix the body and retry with the same key.",
}

// Describe is the text of one of idemflow's own problem types, e.g.
// TypeKeyReused.
func Describe(typ string) (string, bool) {
	d, ok := descriptions[typ]
	return d, ok
}

// Types lists idemflow's own problem types.
func Types() []string { return slices.Sorted(maps.Keys(descriptions)) }

// Problem is an RFC 9457 problem details object with idemflow's extensions.
type Problem struct {
	Type         string              `json:"type"`
	Title        string              `json:"title"`
	Status       int                 `json:"status"`
	Detail       string              `json:"detail"`
	Instance     string              `json:"instance,omitempty"`
	Code         string              `json:"code,omitempty"`
	Errors       []apperr.FieldError `json:"errors,omitempty"`
	CurrentState string              `json:"current_state,omitempty"`
	OperationID  string              `json:"operation_id,omitempty"`
}

// New makes a problem whose title is the status text.
func New(typ string, status int, detail string) Problem {
	return Problem{Type: typ, Title: http.StatusText(status), Status: status, Detail: detail}
}

// Body encodes p.
func (p Problem) Body() []byte {
	b, err := json.Marshal(p)
	if err != nil {
		panic(fmt.Sprintf("problem: marshal: %v", err)) // plain fields: cannot fail
	}
	return b
}

// Outcome is p as a stored answer.
func (p Problem) Outcome() idem.Outcome {
	return idem.Outcome{Status: p.Status, Body: p.Body()}
}

// Rejected is the 422 answer to a business rejection; its type names the
// rule (for example /problems/out-of-stock) so that callers can act on it.
func Rejected(e *apperr.RejectedError) Problem {
	status := e.Status
	if status == 0 {
		status = http.StatusUnprocessableEntity
	}
	p := New(TypeRejectedPrefix+e.Code, status, e.Reason)
	p.Title = "Business rule rejected the request"
	p.Code = e.Code
	p.CurrentState = e.CurrentState
	return p
}

// ExecutionFailed is the stored answer of an intent that ended without
// writing anything (its activity gave up, or reconcile found nothing). Its
// detail is stable: the raw cause (SQL text, a worker's pid@host) goes to
// the logs and the record's error_reason, never to the tenant.
func ExecutionFailed() Problem {
	return New(TypeExecutionFailed, http.StatusInternalServerError, "the request did not complete and nothing was written; retry with the same key to execute it again")
}

// CallUnsettled is the stored answer of an HTTP tool's intent that ended
// with its call's outcome unknown: unlike ExecutionFailed it does not say
// that nothing happened. A retry under the same key resends under the same
// downstream key, or looks the effect up first, so it cannot happen twice.
func CallUnsettled() Problem {
	return New(TypeExecutionFailed, http.StatusInternalServerError, "the call to the downstream did not end with a known outcome; retry with the same key: "+
		"the retry looks its effect up or resends it under the same downstream key, so it cannot take effect twice")
}

// OutcomeUnknown is the final answer of an HTTP tool's call whose outcome
// stayed unknown and that may never be sent again (idem.Outcome.Final).
func OutcomeUnknown(detail string) Problem {
	p := New(TypeOutcomeUnknown, idem.StatusOutcomeUnknown, detail)
	p.Title = "The call's outcome is unknown"
	p.Code = "outcome-unknown"
	return p
}

// Canceled is the stored answer of an intent an operator canceled or
// terminated before it wrote anything.
func Canceled() Problem {
	return New(TypeCanceled, http.StatusInternalServerError, "an operator stopped this request before it wrote anything; retry with the same key to execute it again")
}
