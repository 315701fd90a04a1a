// Package apperr holds the typed errors that callers act on (the HTTP
// gateway maps them to problem types, the MCP server to tool errors). A
// rejection may name the HTTP status it answers with (a 404 or 409 rather
// than the default 422), because that status is stored with the intent's
// answer and replayed.
package apperr

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// FieldError is one invalid input field.
type FieldError struct {
	Field  string `json:"field"`
	Reason string `json:"reason"`
}

// InvalidError reports request parameters that can never succeed as sent.
// Nothing is recorded for them, so the same key may be retried corrected.
type InvalidError struct {
	Fields []FieldError
}

func (e *InvalidError) Error() string {
	parts := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		parts[i] = f.Field + ": " + f.Reason
	}
	return "invalid request: " + strings.Join(parts, "; ")
}

// Invalid accumulates field errors; Err returns nil when there are none.
type Invalid struct{ fields []FieldError }

// Add records a field error.
func (v *Invalid) Add(field, format string, args ...any) {
	v.fields = append(v.fields, FieldError{Field: field, Reason: fmt.Sprintf(format, args...)})
}

// Has reports whether a field error was recorded for field.
func (v *Invalid) Has(field string) bool {
	return slices.ContainsFunc(v.fields, func(f FieldError) bool { return f.Field == field })
}

// Err returns an *InvalidError, or nil.
func (v *Invalid) Err() error {
	if len(v.fields) == 0 {
		return nil
	}
	return &InvalidError{Fields: v.fields}
}

// RejectedError is a business rule saying no (out of stock, bad coupon).
// The intent is recorded FAILED with no row written, and a later retry under
// the same key may execute again.
type RejectedError struct {
	Code   string // stable, machine-readable: "out-of-stock", "invalid-coupon"
	Reason string
	// Status is the HTTP status to answer with; 0 means 422. 502 is
	// outcome-unknown's alone: a FAILED record answered 502 is final
	// (idem.Outcome.Final), never reopened by a retry.
	Status int
	// CurrentState is set for "invalid-transition": the state the
	// resource is in.
	CurrentState string
}

func (e *RejectedError) Error() string { return e.Code + ": " + e.Reason }

// ErrNotFound: the resource does not exist for this tenant.
var ErrNotFound = errors.New("not found")

// InvalidTransition is the rejection of a state change from the wrong state.
func InvalidTransition(resource, current, to string) *RejectedError {
	return &RejectedError{
		Code:         "invalid-transition",
		Reason:       fmt.Sprintf("%s is %s and cannot become %s", resource, current, to),
		Status:       409,
		CurrentState: current,
	}
}
