package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/idemflow/idemflow/httptool"
	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/internal/apperr"
	"github.com/idemflow/idemflow/internal/problem"
	"github.com/idemflow/idemflow/op"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/temporal"
)

// HTTPTool is the activity of HTTP tools (httptool): one call to
// a team's own API per intent. The call cannot join the record's
// transaction, so it runs between two. The first, under the record's lock,
// commits that a request is about to leave (tool_call "sending"); the
// second stores the answer and finishes the record. An attempt that finds
// a request sent and no answer never sends blind: a key_header tool
// resends under the same downstream key, which the downstream
// deduplicates; a lookup tool first asks the downstream what the key did,
// once the earlier request's timeout has surely passed; an at_most_once
// tool ends with outcome-unknown, for good.
type HTTPTool struct {
	*Activities
}

// Run calls the intent's tool, or returns the answer an earlier execution
// stored.
func (a HTTPTool) Run(ctx context.Context, in op.Input) (idem.Outcome, error) {
	start := time.Now()
	out, err := a.run(ctx, in)
	a.executed(in.Intent.BizType, start, err)
	return out, err
}

// step is what the first transaction decided.
type step int

// plan is what the first transaction decided, and what the answer to the
// request it allows will mean.
type plan struct {
	next step
	// sends is the row's count of requests sent, for markResend's
	// compare-and-set.
	sends int
	// resend: a request under the key was sent before and its outcome is
	// unknown, so the downstream may hold the key already. Its answer to
	// this one then says less than to a first request: a refusal may be
	// of the key, not of the call (resendAnswer).
	resend bool
	// sinceFirst is how long ago the first request under the key was
	// sent, by the database's clock.
	sinceFirst time.Duration
}

const (
	stepSend   step = iota // send the call
	stepLookup             // ask the downstream what the key did first
	stepDone               // the intent is settled: its answer, or its error
)

func (a HTTPTool) run(ctx context.Context, in op.Input) (idem.Outcome, error) {
	t, ok := a.Tools.Of(in.Intent.BizType)
	if !ok {
		return idem.Outcome{}, temporal.NewNonRetryableApplicationError("no HTTP tool is a "+in.Intent.BizType, idem.ErrTypeForged, nil)
	}
	// The request is decoded once, for its fingerprint and its call.
	d, err := t.Op.DecodeInput(in)
	var fingerprint string
	if err == nil {
		fingerprint, err = t.Op.FingerprintOf(d)
	}
	if err == nil && fingerprint != in.Intent.Fingerprint {
		err = errors.New("the request does not match the intent's fingerprint")
	}
	var request json.RawMessage
	if err == nil {
		request, err = t.Op.RequestJSON(d)
	}
	if err != nil {
		return idem.Outcome{}, temporal.NewNonRetryableApplicationError(err.Error(), idem.ErrTypeForged, err)
	}
	key := idem.DownstreamKey(in.Intent.TenantID, in.Intent.Key, t.Name)

	p, out, err := a.begin(ctx, in.Intent, t)
	if p.next == stepDone || err != nil {
		return out, err
	}
	if p.next == stepLookup {
		found := a.traced(ctx, "lookup", t, func(ctx context.Context) httptool.Result { return t.Find(ctx, key) })
		switch found.Verdict {
		case httptool.Succeeded:
			return a.finish(ctx, in.Intent, t, found)
		case httptool.Absent:
			// The key did nothing: send, unless another execution sent
			// since this one read the row. The downstream does not hold
			// the key, so its answer means what a first one would.
			if out, err := a.markResend(ctx, in.Intent, p.sends); err != nil || out != nil {
				return deref(out), err
			}
			p.resend = false
		default:
			return idem.Outcome{}, retryAfter(fmt.Errorf("look up %s: %w", t, found.Err), time.Second)
		}
	}
	res := a.traced(ctx, "send", t, func(ctx context.Context) httptool.Result { return t.Send(ctx, key, request) })
	if p.resend {
		res = resendAnswer(t, res, p.sinceFirst)
	}
	return a.finish(ctx, in.Intent, t, res)
}

// resendAnswer judges the answer to a request sent again after an unknown
// outcome, under the same downstream key. The downstream may hold the key
// from the request whose answer was lost, so a refusal need not mean that
// nothing happened:
//   - a 4xx rejection (a downstream that answers a repeated key with 422,
//     or one that refuses a duplicate by its own rule) says nothing of the
//     first request: the outcome is unknown for good;
//   - a 409 is the key still in use: while the first request may still be
//     running (its timeout and Grace since it was sent) it is waited out
//     and sent again; after that, the downstream holds the key and will
//     not say what it did: unknown for good too.
//
// A downstream that deduplicates answers the first answer again. A 2xx is
// believed as it is; a refusal only when the downstream marks it as the
// answer it gives again (the tool's replayed_header): then it is the
// first request's own, and nothing happened. Only a downstream that
// cannot say so ends unknown.
func resendAnswer(t *httptool.Tool, res httptool.Result, sinceFirst time.Duration) httptool.Result {
	status := res.Answer.Status
	switch {
	case res.Replayed && res.Err == nil:
		return res
	case res.Verdict == httptool.Rejected:
	case status == http.StatusConflict && sinceFirst >= t.Timeout()+httptool.Grace:
	default:
		return res
	}
	return httptool.Result{Verdict: httptool.Unsettled, Answer: res.Answer,
		Err: fmt.Errorf("got %d to the request sent again under the same key, which does not say whether the first request, whose answer was lost, took effect", status)}
}

// traced spans one request to the tool's downstream ("send", "lookup"),
// which carries the span as its traceparent: an instrumented downstream's
// own spans join the intent's trace.
func (a *Activities) traced(ctx context.Context, what string, t *httptool.Tool, call func(context.Context) httptool.Result) httptool.Result {
	if a.Tracer == nil {
		return call(ctx)
	}
	ctx, span := a.Tracer.Start(ctx, "idemflow.tool."+what, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("idemflow.tool", t.Name)))
	defer span.End()
	res := call(ctx)
	span.SetAttributes(attribute.Int("http.response.status_code", res.Answer.Status), attribute.String("idemflow.verdict", res.Verdict.String()))
	if res.Err != nil {
		span.RecordError(res.Err)
	}
	return res
}

// begin is the first transaction: under the record's lock it decides what
// this attempt does, and commits that a request is about to be sent
// before one is.
func (a HTTPTool) begin(ctx context.Context, in idem.Intent, t *httptool.Tool) (p plan, out idem.Outcome, err error) {
	var final error
	err = pgx.BeginFunc(ctx, a.DB, func(tx pgx.Tx) error {
		rec, done, err := lockOpen(ctx, tx, in)
		if err != nil || done {
			p.next, out = stepDone, rec.Response
			return err
		}
		p.next = stepDone
		prior, found, err := a.Records.Recall(ctx, tx, rec.TenantID, rec.Key)
		if err != nil {
			return err
		}
		if found {
			if prior.Fingerprint != rec.Fingerprint {
				return a.reject(ctx, tx, rec, keyReused(rec.Key, prior.BizType, rec.BizType), &out, &final)
			}
			out = prior.Outcome
			return a.Records.Finish(ctx, tx, rec, idem.StatusSuccess, out, "")
		}
		call, sent, err := httptool.Get(ctx, tx, rec.TenantID, rec.Key)
		if err != nil {
			return err
		}
		switch {
		case !sent:
			p.next = stepSend
			return httptool.MarkSending(ctx, tx, in, 0)
		case call.Fingerprint != rec.Fingerprint || call.BizType != rec.BizType:
			// A call sent under this key for another request, whose
			// record was purged before it was ever answered.
			return a.reject(ctx, tx, rec, keyReused(rec.Key, call.BizType, rec.BizType), &out, &final)
		case call.State == httptool.Done:
			out = call.Answer
			if err := idem.RememberKey(ctx, tx, in); err != nil {
				return err
			}
			return a.Records.Finish(ctx, tx, rec, idem.StatusSuccess, out, "")
		case call.State == httptool.OutcomeUnknown:
			// Settled unknown for good before its record was purged: the
			// same answer again, with the reason it gave then.
			return a.reject(ctx, tx, rec, unknownAgain(t, call.Answer), &out, &final)
		case t.AtMostOnce():
			return a.giveUp(ctx, tx, rec, t, atMostOnceReason, &out, &final)
		}
		p.resend, p.sinceFirst = true, call.SinceFirstSent
		if t.HasLookup() {
			if wait := t.Timeout() + httptool.Grace - call.SinceSent; wait > 0 {
				p.next = stepSend // nothing to commit; the error below says wait
				return retryAfter(fmt.Errorf("%s: a request sent %s ago may still be running; it is looked up once its timeout has passed",
					t, call.SinceSent.Round(time.Millisecond)), wait)
			}
			p.next, p.sends = stepLookup, call.Sends
			return nil
		}
		p.next = stepSend
		return httptool.MarkSending(ctx, tx, in, call.Sends)
	})
	if p.next == stepDone && err == nil {
		a.Records.Settled(in.TenantID, in.Key, nil)
		err = final
	}
	return p, out, err
}

// markResend commits, under the record's lock, that the call is sent
// again after a lookup found nothing. out is set when the intent was
// settled meanwhile.
func (a HTTPTool) markResend(ctx context.Context, in idem.Intent, sends int) (*idem.Outcome, error) {
	var out *idem.Outcome
	err := pgx.BeginFunc(ctx, a.DB, func(tx pgx.Tx) error {
		rec, done, err := lockOpen(ctx, tx, in)
		if err != nil || done {
			out = &rec.Response
			return err
		}
		return httptool.MarkSending(ctx, tx, in, sends)
	})
	if errors.Is(err, httptool.ErrSentMeanwhile) {
		return nil, retryAfter(err, time.Second)
	}
	return out, err
}

// finish is the second transaction: it stores the call's answer and
// finishes the record, or leaves both for the next attempt when the
// outcome is unknown.
func (a HTTPTool) finish(ctx context.Context, in idem.Intent, t *httptool.Tool, res httptool.Result) (idem.Outcome, error) {
	if res.Verdict == httptool.Unknown && !t.AtMostOnce() {
		if res.Answer.Status == http.StatusConflict {
			// The key is in use by a request that may still be running:
			// wait out its timeout before sending again.
			return idem.Outcome{}, retryAfter(fmt.Errorf("%s: %w", t, res.Err), t.Timeout()+httptool.Grace)
		}
		wait := time.Duration(0)
		if !t.Resends() {
			wait = t.Timeout() + httptool.Grace
		}
		a.Logger.WarnContext(ctx, "HTTP tool call's outcome unknown; retrying", "tool", t.Name, "tenant", in.TenantID, "key", in.Key, "error", res.Err)
		return idem.Outcome{}, retryAfter(fmt.Errorf("%s: %w", t, res.Err), wait)
	}
	var out idem.Outcome
	var final error
	err := pgx.BeginFunc(ctx, a.DB, func(tx pgx.Tx) error {
		rec, done, err := lockOpen(ctx, tx, in)
		if err != nil || done {
			out = rec.Response
			return err
		}
		switch res.Verdict {
		case httptool.Succeeded:
			out = res.Answer
			if err := httptool.Settle(ctx, tx, in, httptool.Done, out); err != nil {
				return err
			}
			if err := idem.RememberKey(ctx, tx, in); err != nil {
				return err
			}
			return a.Records.Finish(ctx, tx, rec, idem.StatusSuccess, out, "")
		case httptool.Rejected:
			// Nothing happened: the row goes, and a retry sends afresh.
			out = res.Answer
			if err := httptool.Forget(ctx, tx, in); err != nil {
				return err
			}
			a.observer().Rejected(in.BizType, httptool.CodeRejected)
			final = temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s: the downstream rejected the call with %d", t, out.Status),
				idem.ErrTypeRejected, nil, out)
			return a.Records.Finish(ctx, tx, rec, idem.StatusFailed, out, fmt.Sprintf("downstream answered %d", out.Status))
		case httptool.Unsettled:
			return a.giveUp(ctx, tx, rec, t, res.Err.Error(), &out, &final)
		default:
			return a.giveUp(ctx, tx, rec, t, atMostOnceReason, &out, &final)
		}
	})
	if err == nil {
		a.Records.Settled(in.TenantID, in.Key, nil)
		err = final
	}
	return out, err
}

// reject finishes rec FAILED with a rejection's answer, within tx, and
// sets final to the rejection as the activity's error, to return once tx
// committed (pgx.BeginFunc rolls back on any error).
func (a HTTPTool) reject(ctx context.Context, tx pgx.Tx, rec idem.Record, r *apperr.RejectedError, out *idem.Outcome, final *error) error {
	a.observer().Rejected(rec.BizType, r.Code)
	*out = problem.Rejected(r).Outcome()
	if r.Code == httptool.CodeOutcomeUnknown {
		*out = problem.OutcomeUnknown(r.Reason).Outcome()
	}
	if err := a.Records.Finish(ctx, tx, rec, idem.StatusFailed, *out, r.Error()); err != nil {
		return err
	}
	*final = temporal.NewNonRetryableApplicationError(r.Error(), idem.ErrTypeRejected, r, *out)
	return nil
}

// giveUp ends a call whose outcome is unknown for good (why says how): the
// row says so, and the record is FAILED with outcome-unknown, final
// (idem.Outcome.Final): nothing is sent again under this key.
func (a HTTPTool) giveUp(ctx context.Context, tx pgx.Tx, rec idem.Record, t *httptool.Tool, why string, out *idem.Outcome, final *error) error {
	r := outcomeUnknown(t, why)
	if err := httptool.Settle(ctx, tx, rec.Intent(), httptool.OutcomeUnknown, problem.OutcomeUnknown(r.Reason).Outcome()); err != nil {
		return err
	}
	return a.reject(ctx, tx, rec, r, out, final)
}

// unknownAgain is the rejection of a call settled unknown for good, from
// the answer stored then (problem.OutcomeUnknown's, whose detail is the
// reason): answered again, it is the same bytes.
func unknownAgain(t *httptool.Tool, stored idem.Outcome) *apperr.RejectedError {
	var p struct {
		Detail string `json:"detail"`
	}
	if json.Unmarshal(stored.Body, &p) != nil || p.Detail == "" {
		return outcomeUnknown(t, atMostOnceReason)
	}
	return &apperr.RejectedError{Code: httptool.CodeOutcomeUnknown, Status: idem.StatusOutcomeUnknown, Reason: p.Detail}
}

// atMostOnceReason is why an at_most_once tool's unknown outcome is final.
const atMostOnceReason = "got no answer that says whether it took effect. It is at_most_once"

// outcomeUnknown is the rejection of a call whose outcome is unknown for
// good; why completes "the call to NAME ...".
func outcomeUnknown(t *httptool.Tool, why string) *apperr.RejectedError {
	return &apperr.RejectedError{Code: httptool.CodeOutcomeUnknown, Status: idem.StatusOutcomeUnknown,
		Reason: "the call to " + t.Name + " " + why + "; it may have taken effect, and it is never sent again under this key"}
}

func retryAfter(err error, wait time.Duration) error {
	return temporal.NewApplicationErrorWithOptions(err.Error(), "ToolCallPending", temporal.ApplicationErrorOptions{
		Cause: err, NextRetryDelay: max(wait, 0)})
}

func deref(o *idem.Outcome) idem.Outcome {
	if o == nil {
		return idem.Outcome{}
	}
	return *o
}

// settleToolCall prepares the settling of an HTTP tool's intent that no
// execution runs any more (idem.Store.Resolve), and never sends its call.
// With no request sent, nothing is to be done: FAILED says truly that
// nothing happened. With one sent and its outcome unknown, failed becomes
// CallUnsettled, which does not say so; and a lookup tool's key is looked
// up first (once the last request's timeout has passed): found, before
// stores the found answer as the call's, and Resolve recalls it as the
// intent's (SUCCESS). An at_most_once tool's unknown outcome is final:
// before settles the call as outcome-unknown, and so is the answer.
func (a *Activities) settleToolCall(ctx context.Context, in idem.Intent, t *httptool.Tool, failed *problem.Problem) (before func(context.Context, pgx.Tx) error, err error) {
	call, sent, err := httptool.Get(ctx, a.DB, in.TenantID, in.Key)
	if err != nil || !sent || call.State != httptool.Sending || call.Fingerprint != in.Fingerprint {
		return nil, err
	}
	*failed = problem.CallUnsettled()
	switch {
	case t.AtMostOnce():
		unknown := problem.OutcomeUnknown(outcomeUnknown(t, atMostOnceReason).Reason)
		*failed = unknown
		return func(ctx context.Context, tx pgx.Tx) error {
			return httptool.Settle(ctx, tx, in, httptool.OutcomeUnknown, unknown.Outcome())
		}, nil
	case !t.HasLookup():
		return nil, nil
	}
	if wait := t.Timeout() + httptool.Grace - call.SinceSent; wait > 0 {
		return nil, retryAfter(fmt.Errorf("%s: the last request may still be running; looked up once its timeout has passed", t), wait)
	}
	found := a.traced(ctx, "lookup", t, func(ctx context.Context) httptool.Result {
		return t.Find(ctx, idem.DownstreamKey(in.TenantID, in.Key, t.Name))
	})
	switch found.Verdict {
	case httptool.Succeeded:
		return func(ctx context.Context, tx pgx.Tx) error {
			if err := httptool.Settle(ctx, tx, in, httptool.Done, found.Answer); err != nil {
				return err
			}
			return idem.RememberKey(ctx, tx, in)
		}, nil
	case httptool.Unknown:
		a.Logger.WarnContext(ctx, "HTTP tool lookup failed while settling; the record is FAILED and a retry looks up again",
			"tool", t.Name, "tenant", in.TenantID, "key", in.Key, "error", found.Err)
	}
	return nil, nil
}
