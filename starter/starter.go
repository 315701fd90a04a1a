// Package starter turns a validated intent into a claimed record and a
// started (or attached) workflow, and waits for its answer. Every entry
// point (the HTTP gateway, and through it MCP) submits through it.
package starter

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/google/uuid"
	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/internal/problem"
	"github.com/idemflow/idemflow/workflows"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
)

// ErrUnavailable wraps a failure to reach PostgreSQL or Temporal. The
// gateway fails closed on it: nothing executes without the guard.
var ErrUnavailable = errors.New("dependency unavailable")

// ErrUnconfirmed (with ErrUnavailable): PostgreSQL did not confirm the
// claim within ClaimTimeout. Unlike a failure to connect, the claim may
// have committed (a commit waiting for a synchronous standby that is not
// there is committed locally), so the intent may be recorded: a retry
// under the same key finds it and runs it at most once.
var ErrUnconfirmed = errors.New("the claim was not confirmed in time")

// ErrOutcomeUnread (with ErrUnavailable): the intent is recorded (its
// claim committed), but a statement after the claim (reading the settled
// record, or settling it for a run an operator stopped) failed or did not
// finish within ClaimTimeout. The intent may have executed: a retry under
// the same key gets its answer, and runs it at most once.
var ErrOutcomeUnread = errors.New("the intent's outcome could not be read in time")

// DefaultClaimTimeout bounds the claim, one statement that takes
// milliseconds: past it, PostgreSQL is not committing. Every statement
// after it on the intent's path has the same bound.
const DefaultClaimTimeout = 10 * time.Second

// ErrExecutionFailed: the intent's workflow ended without an answer and the
// record was not settled yet (reconcile will).
var ErrExecutionFailed = errors.New("execution failed")

// DefaultWait is how long a request waits for its intent to finish before
// answering 202 (the starting request) or 409 (a concurrent duplicate).
const DefaultWait = 5 * time.Second

// MaxWait caps Prefer: wait=N.
const MaxWait = 60 * time.Second

// Starter starts or attaches to intent workflows.
type Starter struct {
	Temporal client.Client
	Records  *idem.Store
	Logger   *slog.Logger
	// Answers, when set, keeps recent SUCCESS answers in memory.
	Answers *AnswerCache
	// ClosingWait bounds how long a reopened attempt waits for an earlier
	// attempt's run to close (DefaultClosingWait when zero).
	ClosingWait time.Duration
	// SearchAttributes: the namespace has workflows.SearchAttributes(), so
	// runs start with them (an operator finds them by key in the Web UI).
	// Off where they could not be registered: a start with an unknown
	// attribute would be refused.
	SearchAttributes bool
	// Tracer, when set, spans the claim, the start and the wait of each
	// intent (nil: no spans).
	Tracer trace.Tracer
	// Stages, when set, is told how long each of those took (StageClaim,
	// StageStart, StageWait): where a request's time goes.
	Stages func(stage string, took time.Duration)
	// ClaimTimeout bounds the claim, and each statement after it on the
	// intent's path (DefaultClaimTimeout when zero), so that an agent gets
	// an answer when PostgreSQL stops committing.
	ClaimTimeout time.Duration
}

// AnswerCache holds final SUCCESS records by (tenant, key). Such an answer
// never changes: the business row behind it is never deleted, and a purged
// record is rebuilt from that row with the same fingerprint and bytes. A
// FAILED record is never kept, since a retry may reopen it.
type AnswerCache struct {
	lru *lru.Cache[string, idem.Record]
}

// DefaultAnswerCacheSize bounds the cache by entries; MaxCachedAnswer
// bounds each one, so that the cache holds at most about 40 MiB of
// answers (a ticket's is about 600 bytes; an HTTP tool's downstream may
// answer with up to 1 MiB, which is read from PostgreSQL instead).
const (
	DefaultAnswerCacheSize = 10000
	MaxCachedAnswer        = 4 << 10
)

// NewAnswerCache keeps up to size answers.
func NewAnswerCache(size int) *AnswerCache {
	c, err := lru.New[string, idem.Record](max(size, 1))
	if err != nil {
		panic(err) // only for a size below 1, excluded above
	}
	return &AnswerCache{lru: c}
}

func answerKey(tenantID, key string) string { return tenantID + "\x00" + key }

func (c *AnswerCache) get(tenantID, key string) (idem.Record, bool) {
	if c == nil {
		return idem.Record{}, false
	}
	return c.lru.Get(answerKey(tenantID, key))
}

func (c *AnswerCache) keep(rec idem.Record) {
	if c != nil && rec.Status == idem.StatusSuccess && len(rec.Response.Body) <= MaxCachedAnswer {
		c.lru.Add(answerKey(rec.TenantID, rec.Key), rec)
	}
}

// Intent is one submission of an idempotent operation.
type Intent struct {
	idem.Intent
	// Workflow is the workflow function; Input builds its single argument
	// around the claimed intent (which carries the record's attempt) and
	// what Hint read with the claim (nil if nothing).
	Workflow any
	Input    func(it idem.Intent, hint json.RawMessage) any
	// Hint, if set, is read in the claim's pipeline (op.Spec.Hint).
	Hint *idem.Hint
	// Summary is shown for the execution in the Temporal Web UI.
	Summary string
	// Wait bounds how long Submit waits for the result; zero answers
	// "pending" at once (RFC 7240 wait=0).
	Wait time.Duration
	// Origin is the caller's name for this call (Idempotency-Origin), the
	// same on each of its transport retries; uuid.Nil when it sent none.
	// The call whose claim ran the intent is answered as the owner, never
	// as a replay, however many times it asks.
	Origin uuid.UUID
	// hintRead is what Hint read, once claimed (nil if nothing).
	hintRead json.RawMessage
}

// Reply is the answer to a submission.
type Reply struct {
	OperationID uuid.UUID
	WorkflowID  string
	// Done: Outcome is the intent's answer.
	Done    bool
	Outcome idem.Outcome
	// Replayed: this request did not start the attempt that produced the
	// answer (it is another call's retry or a concurrent duplicate).
	Replayed bool
	// Owner: this request started the current attempt, or is the call
	// that did (its Origin), asking again. A pending owner is
	// answered 202, a pending duplicate 409.
	Owner bool
}

// Submit records the intent (or finds its record), then answers from the
// record when it is final, or starts or attaches to its workflow and waits.
//
// Start-or-attach uses ExecuteWorkflow with the derived workflow ID,
// conflict policy USE_EXISTING and reuse policy ALLOW_DUPLICATE_FAILED_ONLY,
// rather than Update-with-Start:
//   - a duplicate of a running intent attaches to it (USE_EXISTING) and
//     long-polls the same result, which is exactly "wait for the first";
//   - a duplicate of a completed intent gets the already-started error, which
//     the SDK turns into a handle on that run, so it reads the stored result
//     instead of running again;
//   - a failed run (business rejection, or given up) may run again, which is
//     what a retry of a FAILED record needs;
//   - an intent is one short activity, with no long-lived workflow to send
//     updates to: Update-with-Start would add an update handler and a
//     workflow that must stay open, and update IDs only deduplicate while
//     the workflow is open, so it would not protect anything more.
//
// Any request may (re)start the workflow, not only the one that inserted the
// record: if that one died between the insert and the start, the retry
// starts it, and the intent is not lost.
func (s *Starter) Submit(ctx context.Context, in Intent) (Reply, error) {
	claimCtx, span := s.span(ctx, StageClaim, in.Intent)
	if rec, ok := s.Answers.get(in.TenantID, in.Key); ok {
		span.SetAttributes(attribute.Bool("idemflow.answer_cache", true))
		span.End()
		if rec.Fingerprint != in.Fingerprint {
			return Reply{OperationID: rec.ID}, &idem.KeyReusedError{Key: in.Key, BizType: rec.BizType, Asked: in.BizType}
		}
		return Reply{OperationID: rec.ID, WorkflowID: rec.WorkflowID, Done: true, Outcome: rec.Response, Replayed: !rec.Mine(in.Origin)}, nil
	}
	bound := s.statementTimeout()
	boundCtx, cancelClaim := context.WithTimeout(claimCtx, bound)
	claim, err := s.Records.Claim(boundCtx, idem.ClaimParams{
		TenantID: in.TenantID, Key: in.Key, BizType: in.BizType,
		Fingerprint: in.Fingerprint, WorkflowID: in.WorkflowID, Hint: in.Hint, Origin: in.Origin,
	})
	if err != nil && errors.Is(boundCtx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
		err = fmt.Errorf("%w (%s): %w", ErrUnconfirmed, bound, err)
	}
	cancelClaim()
	span.SetAttributes(attribute.Bool("idemflow.owner", claim.Owner), attribute.String("idemflow.record_status", string(claim.Record.Status)))
	if err != nil {
		span.RecordError(err)
	}
	span.End()
	var reused *idem.KeyReusedError
	if errors.As(err, &reused) {
		return Reply{OperationID: claim.Record.ID}, err
	}
	if err != nil {
		return Reply{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	rec := claim.Record
	if rec.Status == "" {
		// No record is no answer: never a final outcome of status 0,
		// which the gateway cannot write.
		return Reply{}, fmt.Errorf("%w: the claim of %s/%s read no record", ErrUnavailable, in.TenantID, in.Key)
	}
	// The call that claimed the record, asking again, is its owner still:
	// its first answer never reached it.
	mine := claim.Owner || rec.Mine(in.Origin)
	reply := Reply{OperationID: rec.ID, WorkflowID: rec.WorkflowID, Owner: mine, Replayed: !mine}
	if rec.Status != idem.StatusProcessing {
		s.Answers.keep(rec)
		reply.Done, reply.Outcome = true, rec.Response
		return reply, nil
	}
	in.Attempt = rec.Attempts
	in.hintRead = claim.Hint
	if claim.Owner && rec.Attempts > 1 {
		s.awaitEarlierRun(ctx, in)
	}
	// The record, not the run, is the answer: a run's result is trusted
	// only through the record it settled. A run can end with the record
	// still PROCESSING: it was an earlier attempt's, closing while this
	// one was reopened, or the record was reopened by another request
	// meanwhile. Start or attach again then, until the wait runs out.
	deadline := time.Now().Add(in.Wait)
	for {
		final, err := s.startAndWait(ctx, in, time.Until(deadline))
		var st *stoppedError
		stopped := errors.As(err, &st)
		if stopped {
			if attempt, ok := s.runAttempt(ctx, in.WorkflowID, st.runID); ok && attempt != in.Attempt {
				// The stopped run was an earlier attempt's, which this
				// request had attached to: the operator stopped that
				// attempt, not this one, which now gets its own run.
				s.logger().InfoContext(ctx, "an earlier attempt's run was stopped by an operator", "tenant", in.TenantID, "key", in.Key,
					"workflow_id", in.WorkflowID, "run_attempt", attempt, "attempt", in.Attempt)
				stopped, err = false, nil
			}
		}
		switch {
		case errors.Is(err, errPending):
			return reply, nil
		case errors.Is(err, ErrUnavailable):
			return Reply{}, err
		case stopped:
			// Terminated runs no code of its own: settle for it, with the
			// attempt it ran. A canceled run settled itself, and this
			// finds it final.
			s.logger().InfoContext(ctx, "intent run stopped by an operator", "tenant", in.TenantID, "key", in.Key, "workflow_id", in.WorkflowID)
			rctx, cancel := context.WithTimeout(ctx, s.statementTimeout())
			_, err := s.Records.Resolve(rctx, idem.ResolveParams{Intent: in.Intent,
				Failed: problem.Canceled().Outcome(), Reason: "stopped by an operator"})
			cancel()
			if err != nil {
				return Reply{}, fmt.Errorf("%w: %w: settle after the stop: %w", ErrUnavailable, ErrOutcomeUnread, err)
			}
		}
		// The worker beside this gateway hands over the record it
		// committed; otherwise it is read.
		var cur idem.Record
		if final != nil {
			cur = *final
		} else {
			gctx, cancel := context.WithTimeout(ctx, s.statementTimeout())
			cur, err = s.Records.Get(gctx, in.TenantID, in.Key)
			cancel()
			if err != nil {
				return Reply{}, fmt.Errorf("%w: %w: read the record: %w", ErrUnavailable, ErrOutcomeUnread, err)
			}
		}
		if cur.ID != rec.ID {
			// Purged and claimed again meanwhile: not this request's.
			break
		}
		if cur.Status != idem.StatusProcessing {
			s.Answers.keep(cur)
			reply.Done, reply.Outcome = true, cur.Response
			return reply, nil
		}
		if stopped {
			break
		}
		if time.Now().After(deadline) {
			return reply, nil // pending
		}
		in.Attempt = cur.Attempts
	}
	return reply, ErrExecutionFailed
}

// statementTimeout bounds each of the intent's statements: ClaimTimeout,
// or DefaultClaimTimeout when that is not set.
func (s *Starter) statementTimeout() time.Duration {
	if s.ClaimTimeout <= 0 {
		return DefaultClaimTimeout
	}
	return s.ClaimTimeout
}

// DefaultClosingWait bounds how long a reopened attempt waits for the run
// of an earlier one to close: past a workflow task timeout (10 s), so that
// a run whose worker died as it was closing is closed by another worker.
const DefaultClosingWait = 15 * time.Second

// awaitEarlierRun waits, up to ClosingWait, for a run of an earlier attempt
// that is still open to close. A reopened record means the earlier attempt
// settled FAILED, but its run may still be closing; a start with
// USE_EXISTING would attach to it, and with Prefer: wait=0 answer 202 with
// nothing left to run the new attempt until reconcile. The run is
// recognised by the attempt in its input. Any error leaves it to the start
// loop (and reconcile): this only makes the common case right at once.
func (s *Starter) awaitEarlierRun(ctx context.Context, in Intent) {
	desc, err := s.Temporal.DescribeWorkflowExecution(ctx, in.WorkflowID, "")
	if err != nil || desc.WorkflowExecutionInfo.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return
	}
	runID := desc.WorkflowExecutionInfo.GetExecution().GetRunId()
	if attempt, ok := s.runAttempt(ctx, in.WorkflowID, runID); !ok || attempt >= in.Attempt {
		return // this attempt's own run, or one it cannot tell
	}
	wctx, cancel := context.WithTimeout(ctx, cmp.Or(s.ClosingWait, DefaultClosingWait))
	defer cancel()
	_ = s.Temporal.GetWorkflow(wctx, in.WorkflowID, runID).Get(wctx, nil)
}

// runAttempt reads the record attempt a run was started for, from its
// input (every intent workflow's input has the intent under "intent").
// ok is false when it cannot tell: an error, or a run of another shape.
func (s *Starter) runAttempt(ctx context.Context, workflowID, runID string) (attempt int, ok bool) {
	it := s.Temporal.GetWorkflowHistory(ctx, workflowID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	if !it.HasNext() {
		return 0, false
	}
	first, err := it.Next()
	if err != nil {
		return 0, false
	}
	var input struct {
		Intent idem.Intent `json:"intent"`
	}
	payloads := first.GetWorkflowExecutionStartedEventAttributes().GetInput()
	if payloads == nil || converter.GetDefaultDataConverter().FromPayloads(payloads, &input) != nil || input.Intent.Attempt == 0 {
		return 0, false
	}
	return input.Intent.Attempt, true
}

var errPending = errors.New("still running")

// stoppedError: an operator terminated or canceled the run (runID) this
// request started or attached to.
type stoppedError struct{ runID string }

func (e *stoppedError) Error() string { return "stopped by an operator" }

// startAndWait starts or attaches to the intent's run and waits for it to
// end. Its result is not read: the caller reads the record, unless final
// is set: the record as this process's worker committed it.
func (s *Starter) startAndWait(ctx context.Context, in Intent, wait time.Duration) (final *idem.Record, err error) {
	// Listen before starting: with eager start the worker beside us can
	// settle the record before ExecuteWorkflow returns.
	settled, stop := s.Records.Waiters.Wait(in.TenantID, in.Key)
	defer stop()
	opts := client.StartWorkflowOptions{
		ID:                       in.WorkflowID,
		TaskQueue:                workflows.TaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY,
		StaticSummary:            in.Summary,
		StaticDetails:            details(in),
		TypedSearchAttributes:    s.searchAttributes(in.Intent),
		// Where this client also runs a worker on the task queue (serve,
		// dev), the server hands the first workflow task back in the start
		// response: no matching round trip. Elsewhere the SDK starts
		// normally.
		EnableEagerStart: true,
	}
	startCtx, span := s.span(ctx, StageStart, in.Intent)
	run, err := s.Temporal.ExecuteWorkflow(startCtx, opts, in.Workflow, in.Input(in.Intent, in.hintRead))
	if err != nil && unknownSearchAttribute(err) {
		// Registered a moment ago, the server's cache may not know them
		// yet: start without them rather than refuse the intent.
		s.Logger.Warn("start without search attributes", "workflow_id", in.WorkflowID, "error", err)
		opts.TypedSearchAttributes = temporal.SearchAttributes{}
		run, err = s.Temporal.ExecuteWorkflow(startCtx, opts, in.Workflow, in.Input(in.Intent, in.hintRead))
	}
	if err != nil {
		span.RecordError(err)
		span.End()
		return nil, fmt.Errorf("%w: start workflow %s: %w", ErrUnavailable, in.WorkflowID, err)
	}
	span.SetAttributes(attribute.String("idemflow.run_id", run.GetRunID()))
	span.End()
	if wait <= 0 {
		return nil, errPending // wait=0: answered at once, nothing polled
	}
	waitCtx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	waitCtx, span = s.span(waitCtx, StageWait, in.Intent)
	err = waitRun(waitCtx, run, settled.Done())
	span.SetAttributes(attribute.Bool("idemflow.woken_here", errors.Is(err, errSettledHere)))
	span.End()
	if errors.Is(err, errSettledHere) {
		return settled.Final(), nil
	}
	if err == nil {
		return nil, nil
	}
	if ctx.Err() == nil && (waitCtx.Err() != nil || isDeadline(err)) {
		return nil, errPending
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	var terminated *temporal.TerminatedError
	var canceled *temporal.CanceledError
	if errors.As(err, &terminated) || errors.As(err, &canceled) {
		return nil, &stoppedError{runID: run.GetRunID()}
	}
	var wfErr *temporal.WorkflowExecutionError
	if errors.As(err, &wfErr) {
		// A business rejection, or a run that gave up: either way the
		// record says what happened.
		return nil, nil
	}
	return nil, fmt.Errorf("%w: wait for workflow %s: %w", ErrUnavailable, in.WorkflowID, err)
}

// errSettledHere: the record was settled and this process was told
// (its own worker, or another process's by NOTIFY).
var errSettledHere = errors.New("settled in this process")

// HistoryPollAfter is how long a waiting request relies on the wake-up
// alone before it also long-polls the run's history. Every settle wakes it
// (in this process, or by NOTIFY from another), a business rejection, a
// run that gave up and a cancel included: the poll is for what settles
// nothing (an operator's terminate, a settle that failed, a lost
// notification). Most intents end well within it, and then cost neither
// the poll's RPC nor the server's work for it.
const HistoryPollAfter = 500 * time.Millisecond

// waitRun waits for the run to end, or for the intent's record to be
// settled (settled), whichever comes first. Past HistoryPollAfter the run
// is watched too: it may end unsettled.
func waitRun(ctx context.Context, run client.WorkflowRun, settled <-chan struct{}) error {
	if settled == nil {
		return run.Get(ctx, nil)
	}
	grace := time.NewTimer(HistoryPollAfter)
	defer grace.Stop()
	select {
	case <-settled:
		return errSettledHere
	case <-ctx.Done():
		return ctx.Err()
	case <-grace.C:
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run.Get(ctx, nil) }()
	select {
	case err := <-done:
		return err
	case <-settled:
		return errSettledHere
	}
}

// The stages of an intent's submission, each spanned and timed: the claim
// of its record, the start of its run, and the wait for its answer.
const (
	StageClaim = "claim"
	StageStart = "start"
	StageWait  = "wait"
)

// span starts one of the intent's spans (a stage),
// timed for Stages when it is set.
func (s *Starter) span(ctx context.Context, name string, in idem.Intent) (context.Context, trace.Span) {
	var span trace.Span
	if s.Tracer == nil {
		// A span that records nothing (not the caller's, which must
		// not be ended here).
		span = trace.SpanFromContext(context.Background())
	} else {
		ctx, span = s.Tracer.Start(ctx, "idemflow."+name, trace.WithAttributes(
			attribute.String("idemflow.tenant", in.TenantID), attribute.String("idemflow.biz_type", in.BizType),
			attribute.String("idemflow.workflow_id", in.WorkflowID)))
	}
	if s.Stages != nil {
		span = timedSpan{Span: span, stage: name, start: time.Now(), observe: s.Stages}
	}
	return ctx, span
}

// timedSpan tells how long its stage took when it ends.
type timedSpan struct {
	trace.Span
	stage   string
	start   time.Time
	observe func(string, time.Duration)
}

func (t timedSpan) End(opts ...trace.SpanEndOption) {
	t.observe(t.stage, time.Since(t.start))
	t.Span.End(opts...)
}

func (s *Starter) logger() *slog.Logger {
	if s.Logger != nil {
		return s.Logger
	}
	return slog.Default()
}

// isDeadline reports a wait that ran out. gRPC enforces the context's
// deadline with its own timer, so the server's DeadlineExceeded can arrive
// a moment before the context itself reports it.
func isDeadline(err error) bool {
	var de *serviceerror.DeadlineExceeded
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &de)
}

func (s *Starter) searchAttributes(in idem.Intent) temporal.SearchAttributes {
	if !s.SearchAttributes {
		return temporal.SearchAttributes{}
	}
	return workflows.IntentSearchAttributes(in)
}

// details is the run's card in the Web UI (Markdown): whose intent, under
// which key, and what it does.
func details(in Intent) string {
	return fmt.Sprintf("**%s**\n\n- tenant: `%s`\n- idempotency key: `%s`\n- business type: `%s`\n- request fingerprint: `%s`\n- record attempt: %d\n\n"+
		"The answer the agent got is this run's result (`body`); a retry under the same key gets the same bytes from idemflow's record.",
		in.Summary, in.TenantID, in.Key, in.BizType, in.Fingerprint, in.Attempt)
}

func unknownSearchAttribute(err error) bool {
	var inv *serviceerror.InvalidArgument
	return errors.As(err, &inv) && strings.Contains(strings.ToLower(inv.Message), "search attribute")
}
