package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"

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
		by := fingerprintBy(w, r, o)
		g.serveIntent(w, r, o.BizType, &body, o.EmptyBodyAllowed(), func(key string) (starter.Intent, error) {
			p, err := o.PrepareAs(body, path, by)
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
// that derives its key from them), else its whole body. An answer to an
// intent-keyed request names the fields it was compared on.
func fingerprintBy(w http.ResponseWriter, r *http.Request, o *op.Operation) op.FingerprintBy {
	if !strings.EqualFold(strings.TrimSpace(r.Header.Get(HeaderFingerprint)), FingerprintIntent) {
		return op.ByBody
	}
	w.Header().Set(HeaderFingerprint, FingerprintIntent)
	if len(o.Intent) > 0 {
		w.Header().Set(HeaderIntentFields, strings.Join(o.Intent.Names(), ", "))
	}
	return op.ByIntent
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
