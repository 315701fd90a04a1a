package httptool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/idemflow/idemflow/idem"
	"go.opentelemetry.io/otel/propagation"
)

// Verdict is what a downstream's answer says about the effect.
type Verdict int

// The verdicts of a call and of a lookup.
const (
	// Unknown: no answer that says (a timeout, a dropped connection, a
	// 5xx, a 408, 409, 425 or 429, a 3xx), or a lookup that could not
	// tell.
	Unknown Verdict = iota
	// Succeeded: a 2xx, or a lookup's 200; Answer is the effect.
	Succeeded
	// Rejected: any other 4xx to a call; nothing happened.
	Rejected
	// Absent: a lookup's 404; the key did nothing.
	Absent
	// Unsettled: an answer that leaves the outcome unknown for good
	// (activities' resendAnswer): nothing is sent again.
	Unsettled
)

// String names the verdict, for logs and spans.
func (v Verdict) String() string {
	switch v {
	case Succeeded:
		return "succeeded"
	case Rejected:
		return "rejected"
	case Absent:
		return "absent"
	case Unsettled:
		return "unsettled"
	}
	return "unknown"
}

// MaxAnswer bounds a downstream answer idemflow stores and replays.
const MaxAnswer = 1 << 20

// Result is a call's or a lookup's answer, judged.
type Result struct {
	Verdict Verdict
	// Answer is the downstream's status, body and media type.
	Answer idem.Outcome
	// Err says why the verdict is Unknown. It holds no header value.
	Err error
	// Replayed: the downstream marked the answer as one it gives again
	// for a key it has seen (CallSpec.ReplayedHeader).
	Replayed bool
	header   http.Header
}

// Send makes the tool's call for one intent: request is the agent's JSON
// object, downstreamKey the key of (tenant, key, tool).
func (t *Tool) Send(ctx context.Context, downstreamKey string, request json.RawMessage) Result {
	body := []byte(request)
	if f := t.spec.Call.KeyField; f != "" {
		var members map[string]json.RawMessage
		if err := json.Unmarshal(request, &members); err != nil {
			return Result{Err: fmt.Errorf("the request is not a JSON object: %w", err)}
		}
		members[f], _ = json.Marshal(downstreamKey)
		var err error
		if body, err = json.Marshal(members); err != nil {
			return Result{Err: err}
		}
	}
	h := t.headers.Clone()
	h.Set("Content-Type", "application/json")
	if k := t.spec.Call.KeyHeader; k != "" {
		h.Set(k, downstreamKey)
	}
	res := t.do(ctx, t.spec.Call.Method, t.spec.Call.URL, h, body)
	if res.Err != nil {
		return res
	}
	if r := t.spec.Call.ReplayedHeader; r != "" {
		res.Replayed = strings.EqualFold(strings.TrimSpace(res.header.Get(r)), "true")
	}
	switch s := res.Answer.Status; {
	case s >= 200 && s < 300:
		res.Verdict = Succeeded
	case s >= 400 && s < 500 && s != 408 && s != 409 && s != 425 && s != 429:
		res.Verdict = Rejected
	default:
		res.Err = fmt.Errorf("%s %s answered %d", t.spec.Call.Method, t.spec.Call.URL, s)
	}
	return res
}

// Find looks up what downstreamKey did, without sending the call.
func (t *Tool) Find(ctx context.Context, downstreamKey string) Result {
	if t.spec.Lookup == nil {
		return Result{Err: errors.New("the tool has no lookup")}
	}
	u := strings.ReplaceAll(t.spec.Lookup.URL, "{key}", url.QueryEscape(downstreamKey))
	res := t.do(ctx, http.MethodGet, u, t.lookupHeaders.Clone(), nil)
	if res.Err != nil {
		return res
	}
	switch res.Answer.Status {
	case http.StatusOK:
		res.Verdict = Succeeded
		if s := t.spec.Lookup.FoundStatus; s != 0 {
			// Answered as the call's own success would be.
			res.Answer.Status = s
		}
	case http.StatusNotFound:
		res.Verdict = Absent
	default:
		res.Err = fmt.Errorf("lookup %s answered %d", t.spec.Lookup.URL, res.Answer.Status)
	}
	return res
}

// do sends one request within the tool's timeout. Its errors name the
// method and URL (which hold no secret), never a header.
func (t *Tool) do(ctx context.Context, method, u string, h http.Header, body []byte) Result {
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return Result{Err: fmt.Errorf("%s %s: %w", method, u, err)}
	}
	req.Header = h
	// Go's client sends a request again by itself when a connection it
	// reused drops before the answer, if it can rewind the body and the
	// request looks idempotent, as one with an Idempotency-Key header
	// does. That resend is idemflow's to make: the first request may have
	// taken effect, and the downstream's answer to a second under the same
	// key (a refusal of the repeated key) then says less than to a first.
	// Without GetBody the client cannot rewind, so it never resends.
	req.GetBody = nil
	// The caller's trace goes on (nothing is written without one).
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
	resp, err := t.client.Do(req)
	if err != nil {
		return Result{Err: fmt.Errorf("%s %s: %w", method, u, unwrapURL(err))}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxAnswer+1))
	if err != nil {
		return Result{Err: fmt.Errorf("%s %s: reading the answer: %w", method, u, err)}
	}
	if len(b) > MaxAnswer {
		return Result{Err: fmt.Errorf("%s %s: the answer is over %d bytes", method, u, MaxAnswer)}
	}
	return Result{Answer: idem.Outcome{Status: resp.StatusCode, Body: idem.Answer(b), ContentType: resp.Header.Get("Content-Type")}, header: resp.Header}
}

// unwrapURL drops *url.Error's own "Post \"…\":" prefix, which do already
// writes.
func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		if ue.Timeout() {
			return fmt.Errorf("no answer within the tool's timeout: %w", ue.Err)
		}
		return ue.Err
	}
	return err
}
