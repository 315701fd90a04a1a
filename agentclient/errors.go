package agentclient

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Sentinels for the answers no retry can change; test with errors.Is.
var (
	// ErrKeyReused: the key was used before with other parameters (422).
	ErrKeyReused = errors.New("idempotency key reused with different parameters")
	// ErrInvalidRequest: idemflow refused the request as sent (400, or
	// 415 for a body not sent as JSON). Nothing was recorded: fix the
	// body with ReviseIntent and send it again under the same key. (A
	// 400 of the intent's own, a downstream's, is ErrRejected.)
	ErrInvalidRequest = errors.New("invalid request")
	// ErrUnauthorized: the token is missing, unknown or revoked (401).
	ErrUnauthorized = errors.New("unauthorized")
	// ErrTooLarge: the body is over the server's limit (413).
	ErrTooLarge = errors.New("request body too large")
	// ErrNotFound: no such resource for this tenant (404).
	ErrNotFound = errors.New("not found")
	// ErrRejected: the operation said no, and its answer is stored under
	// the key: a business rule (out of stock, bad coupon, invalid
	// transition), or an HTTP tool's downstream with a 4xx of its own;
	// see *RejectedError for which. The same key with the same request
	// may run again; other parameters need a new key.
	ErrRejected = errors.New("rejected")
	// ErrOutcomeUnknown: an at_most_once HTTP tool's call got no answer
	// that says whether it took effect (502, /problems/outcome-unknown).
	// It is final: idemflow never sends the call again under this key, so
	// a retry only reads this answer again. Ask the downstream service.
	ErrOutcomeUnknown = errors.New("outcome unknown")
	// ErrUnfinished: an operation's run ended without a final answer
	// (its attempts gave up, or an operator stopped it). Sending the
	// intent again under its key runs it again, and it cannot take effect
	// twice. Do does that itself; ReadOperation reports it.
	ErrUnfinished = errors.New("ended without a final answer")
)

// typeOutcomeUnknown is the problem type of ErrOutcomeUnknown.
const typeOutcomeUnknown = "/problems/outcome-unknown"

// CodeDownstreamRejected is RejectedError.Code of an HTTP tool's call that
// its downstream rejected (a 4xx of its own, whatever its body).
const CodeDownstreamRejected = "downstream-rejected"

// Problem is an RFC 9457 problem details body.
type Problem struct {
	Type         string `json:"type"`
	Title        string `json:"title"`
	Status       int    `json:"status"`
	Detail       string `json:"detail"`
	Code         string `json:"code,omitempty"`
	CurrentState string `json:"current_state,omitempty"`
	OperationID  string `json:"operation_id,omitempty"`
	Errors       []struct {
		Field  string `json:"field"`
		Reason string `json:"reason"`
	} `json:"errors,omitempty"`
}

// PendingError is a deadline that ended while the intent was recorded and
// still running: the operation that will hold its answer (a 202's, or
// another request's run found in progress), which ReadOperation reads
// later. It unwraps to the context's error (context.DeadlineExceeded).
type PendingError struct {
	Pending
	Err error
}

func (e *PendingError) Error() string {
	return fmt.Sprintf("operation %s still running: %v", e.OperationID, e.Err)
}

func (e *PendingError) Unwrap() error { return e.Err }

// ProblemError is an error answer; it unwraps to one of the sentinels.
type ProblemError struct {
	Status  int
	Problem Problem
	// Body is the answer as it came, byte for byte: a retry with the same
	// key answers the same bytes. An HTTP tool's downstream may answer
	// with any body, so Problem may be empty.
	Body json.RawMessage
	// Settled: the answer is the intent's own, stored under its key
	// (it carried Idempotent-Replayed): a rejection by the operation or
	// its downstream, not idemflow's refusal of the request. The key is
	// spent on this request: other parameters need a new key.
	Settled bool
	kind    error
}

func (e *ProblemError) Error() string {
	if e.Problem.Detail != "" {
		return fmt.Sprintf("%d %s: %s", e.Status, e.Problem.Type, e.Problem.Detail)
	}
	return fmt.Sprintf("HTTP %d", e.Status)
}

// Unwrap returns the sentinel for the status, if any.
func (e *ProblemError) Unwrap() error { return e.kind }

// RejectedError is a business rejection, with the rule that said no.
type RejectedError struct {
	ProblemError
	// Code: "out-of-stock", "invalid-coupon", "invalid-transition", ...
	Code string
	// CurrentState is set for invalid-transition.
	CurrentState string
}

func problemType(body []byte) string {
	var p Problem
	_ = json.Unmarshal(body, &p)
	return p.Type
}

// problemError types an error answer; settled says it is the intent's
// own (judge).
func problemError(status int, body []byte, settled bool) error {
	var p Problem
	_ = json.Unmarshal(body, &p)
	pe := ProblemError{Status: status, Problem: p, Body: body, Settled: settled}
	if settled {
		switch {
		case p.Type == typeOutcomeUnknown:
			pe.kind = ErrOutcomeUnknown
		case status >= 400 && status < 500:
			// The operation's rejection: a business rule's, whose
			// problem names its code, or the downstream's, whatever its
			// body says.
			pe.kind = ErrRejected
			code := CodeDownstreamRejected
			if p.Code != "" && p.Type == "/problems/"+p.Code {
				code = p.Code
			}
			return &RejectedError{ProblemError: pe, Code: code, CurrentState: p.CurrentState}
		}
		return &pe
	}
	switch {
	case status == 400, status == 415:
		pe.kind = ErrInvalidRequest
	case status == 401:
		pe.kind = ErrUnauthorized
	case status == 404:
		pe.kind = ErrNotFound
	case status == 413:
		pe.kind = ErrTooLarge
	case p.Type == typeOutcomeUnknown:
		pe.kind = ErrOutcomeUnknown
	case p.Type == "/problems/idempotency-key-reused":
		pe.kind = ErrKeyReused
	case status == 422 || (status == 409 && p.Type == "/problems/invalid-transition"):
		pe.kind = ErrRejected
		code := p.Code
		if code == "" {
			code = strings.TrimPrefix(p.Type, "/problems/")
		}
		return &RejectedError{ProblemError: pe, Code: code, CurrentState: p.CurrentState}
	}
	return &pe
}
