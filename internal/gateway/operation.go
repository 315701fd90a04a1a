package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/idemflow/idemflow/intent"
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
		// A value the contract does not list is a 400 that also names
		// every field of the body its schema refuses, nothing recorded.
		by, badRule := fingerprintBy(w, r, o)
		origin, badOrigin := originOf(r.Header)
		g.serveIntent(w, r, o.BizType, &body, o.EmptyBodyAllowed(), func(key string) (starter.Intent, error) {
			p, err := o.PrepareAs(body, path, by)
			if badRule != nil || badOrigin != nil {
				return starter.Intent{}, fieldErrors(badRule, badOrigin, err)
			}
			if err != nil {
				return starter.Intent{}, err
			}
			if err := o.Check(r.Context(), g.DB, tenantID, p); err != nil {
				if errors.Is(err, apperr.ErrNotFound) {
					return starter.Intent{}, err
				}
				return starter.Intent{}, fmt.Errorf("%w: %w", starter.ErrUnavailable, err)
			}
			in := starter.OperationIntent(o, tenantID, key, p)
			in.Origin = origin
			return in, nil
		}, func(h http.Header, answer []byte) {
			if by == op.ByIntent {
				if d := differed(o, body, path, answer); len(d) > 0 {
					h.Set(HeaderDiffered, strings.Join(d, ", "))
				}
			}
		})
	}
}

// fingerprintBy is what the request asks to be compared on under its
// key: its intent fields with Idempotency-Fingerprint: intent (a caller
// that derives its key from them), else its whole body (no header, or
// body). Any other value is an *apperr.InvalidError. An answer to an
// intent-keyed request names the fields it was compared on.
func fingerprintBy(w http.ResponseWriter, r *http.Request, o *op.Operation) (op.FingerprintBy, error) {
	values := r.Header.Values(HeaderFingerprint)
	if len(values) == 0 {
		return op.ByBody, nil
	}
	// Exactly as the contract's enum lists them.
	v := values[0]
	if len(values) > 1 || (v != FingerprintIntent && v != FingerprintBody) {
		var inv apperr.Invalid
		inv.Add(HeaderFingerprint, "must be %s or %s, once", FingerprintBody, FingerprintIntent)
		return op.ByBody, inv.Err()
	}
	if v == FingerprintBody {
		return op.ByBody, nil
	}
	w.Header().Set(HeaderFingerprint, FingerprintIntent)
	if len(o.Intent) > 0 {
		w.Header().Set(HeaderIntentFields, strings.Join(o.Intent.Names(), ", "))
	}
	return op.ByIntent, nil
}

// originOf reads Idempotency-Origin: absent, or one UUID in its canonical
// text form (the nil UUID names no call, as none does). Any other value
// is an *apperr.InvalidError naming the header.
func originOf(h http.Header) (uuid.UUID, error) {
	vals := h.Values(HeaderOrigin)
	if len(vals) == 0 {
		return uuid.Nil, nil
	}
	if len(vals) == 1 && len(vals[0]) == 36 {
		if id, err := uuid.Parse(vals[0]); err == nil {
			return id, nil
		}
	}
	var inv apperr.Invalid
	inv.Add(HeaderOrigin, "must be one UUID (8-4-4-4-12 hexadecimal digits), the same on each retry of one call")
	return uuid.Nil, inv.Err()
}

// fieldErrors is one *apperr.InvalidError with the field errors of every
// one among errs, in order; errs of another kind, and nils, are left out.
// nil when there is none.
func fieldErrors(errs ...error) error {
	var fields []apperr.FieldError
	for _, err := range errs {
		if inv := (*apperr.InvalidError)(nil); errors.As(err, &inv) {
			fields = append(fields, inv.Fields...)
		}
	}
	if fields == nil {
		return nil
	}
	return &apperr.InvalidError{Fields: fields}
}

// differed names the members of an intent-keyed replay's request, not
// intent fields, whose values differ from the same members of the first
// answer (a ticket's title): what the caller sent that was not made. A
// member the answer does not hold is not named: nothing says what it was.
func differed(o *op.Operation, body json.RawMessage, path map[string]string, answer []byte) []string {
	var sent, made map[string]any
	if json.Unmarshal(body, &sent) != nil || json.Unmarshal(answer, &made) != nil {
		return nil
	}
	var out []string
	for name, v := range sent {
		if _, isPath := path[name]; isPath || o.Intent.Has(name) {
			continue
		}
		m, held := made[name]
		if !held {
			continue
		}
		a, errA := intent.Normalize(intent.Exact, v)
		b, errB := intent.Normalize(intent.Exact, m)
		if errA == nil && errB == nil && !reflect.DeepEqual(a, b) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}
