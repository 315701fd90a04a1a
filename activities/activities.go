// Package activities holds idemflow's Temporal activities: the only code
// that writes business rows or calls an HTTP tool's downstream. An
// operation with a step runs it in one database transaction that also
// finishes the idempotency record, so a ticket never exists while its
// record still says PROCESSING, and a retried activity finds its own
// earlier commit. An HTTP tool's call cannot share a transaction with the
// record: it runs between two, the first committing that a request is
// about to leave, the second storing the answer and finishing the record
// (HTTPTool).
package activities

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/idemflow/idemflow/httptool"
	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/internal/apperr"
	"github.com/idemflow/idemflow/internal/problem"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
)

// Activities holds the activities' dependencies.
type Activities struct {
	DB      *pgxpool.Pool
	Records *idem.Store
	Logger  *slog.Logger
	// Temporal lets reconcile ask whether an intent's workflow still runs.
	Temporal client.Client
	// Observer, when set, hears of business steps, rejections, reconcile
	// verdicts and purged records (the metrics).
	Observer Observer
	// Tools are the HTTP tools this worker calls (HTTPTool), if any.
	Tools *httptool.Set
	// Tracer, when set, spans each call to a tool's downstream.
	Tracer trace.Tracer
}

// Observer hears what the activities did, for the metrics; the worker's
// metrics (internal/metrics) are one. Its methods are called concurrently.
type Observer interface {
	// Executed is one execution's result ("done", "rejected", "error")
	// and how long it took.
	Executed(bizType, result string, took time.Duration)
	// Rejected is one business rejection, by its code.
	Rejected(bizType, code string)
	// Reconciled is one stale intent's reconcile verdict (Verdicts).
	Reconciled(verdict string)
	// Purged is how many expired records one purge deleted.
	Purged(n int64)
}

// observer is a.Observer, or one that hears nothing.
func (a *Activities) observer() Observer {
	if a.Observer == nil {
		return unobserved{}
	}
	return a.Observer
}

type unobserved struct{}

func (unobserved) Executed(string, string, time.Duration) {}
func (unobserved) Rejected(string, string)                {}
func (unobserved) Reconciled(string)                      {}
func (unobserved) Purged(int64)                           {}

// New returns the activities over db.
func New(db *pgxpool.Pool, records *idem.Store, tc client.Client, logger *slog.Logger) *Activities {
	if logger == nil {
		logger = slog.Default()
	}
	return &Activities{DB: db, Records: records, Temporal: tc, Logger: logger}
}

// keyReused is the rejection of an intent whose key already wrote a
// business row with other parameters, or for another operation.
func keyReused(key, first, asked string) *apperr.RejectedError {
	return &apperr.RejectedError{Code: "idempotency-key-reused",
		Reason: (&idem.KeyReusedError{Key: key, BizType: first, Asked: asked}).Error()}
}

// execute runs one intent's business step in a transaction that holds the
// record's row lock and finishes the record in the same commit.
//
// The lock is what makes "activities can run more than once" harmless: a
// second execution (a retry, a zombie attempt, a second run of the workflow)
// waits for the first to commit and then sees SUCCESS or FAILED.
//
// The fingerprint is recomputed from req, the request in the input, never
// taken from the input: a workflow started on the task queue by anyone else
// cannot write content other than what its record was claimed for.
func (a *Activities) execute(ctx context.Context, in idem.Intent, req interface{ Fingerprint() (string, error) },
	step func(tx pgx.Tx) (idem.Outcome, error)) (idem.Outcome, error) {
	start := time.Now()
	out, err := a.executeLocked(ctx, in, req, step)
	a.executed(in.BizType, start, err)
	return out, err
}

// executed counts one execution of an intent's activity.
func (a *Activities) executed(bizType string, start time.Time, err error) {
	result := "done"
	var appErr *temporal.ApplicationError
	switch {
	case errors.As(err, &appErr) && appErr.Type() == idem.ErrTypeRejected:
		result = "rejected"
	case err != nil:
		result = "error"
	}
	a.observer().Executed(bizType, result, time.Since(start))
}

// lockOpen locks in's record within tx for an execution. done: the record
// is SUCCESS, and its answer is the execution's. A record that is gone,
// is another request's or is FAILED is an error no retry can fix.
func lockOpen(ctx context.Context, tx pgx.Tx, in idem.Intent) (rec idem.Record, done bool, err error) {
	rec, err = idem.GetTx(ctx, tx, in.TenantID, in.Key, true)
	if errors.Is(err, apperr.ErrNotFound) {
		return opened(in, idem.Locked{})
	}
	if err != nil {
		return idem.Record{}, false, fmt.Errorf("lock record: %w", err)
	}
	return opened(in, idem.Locked{Found: true, Record: rec})
}

// opened judges a locked record, as lockOpen says.
func opened(in idem.Intent, l idem.Locked) (rec idem.Record, done bool, err error) {
	if !l.Found {
		return idem.Record{}, false, temporal.NewNonRetryableApplicationError("idempotency record is gone", idem.ErrTypeGone, apperr.ErrNotFound)
	}
	rec = l.Record
	if rec.Fingerprint != in.Fingerprint {
		// The record was purged and re-created by another request under
		// the same key; this run belongs to neither.
		return idem.Record{}, false, temporal.NewNonRetryableApplicationError("record belongs to another request", idem.ErrTypeGone, nil)
	}
	switch rec.Status {
	case idem.StatusSuccess:
		return rec, true, nil
	case idem.StatusFailed:
		return idem.Record{}, false, temporal.NewNonRetryableApplicationError("intent already failed: "+rec.ErrorReason, idem.ErrTypeClosed, nil)
	}
	return rec, false, nil
}

// lock begins an execution's transaction on conn the long way, when the
// common path found the record not open for in (or the step sent no
// statement to open it with): whatever the pipeline began is rolled back,
// and a new transaction reads the record under its lock, with whether
// idempotency_key knows the key, and sets the step's savepoint. l says
// what it found.
func lock(ctx context.Context, conn *pgx.Conn, in idem.Intent) (pgx.Tx, idem.Locked, error) {
	if conn.PgConn().TxStatus() != 'I' {
		if _, err := conn.Exec(ctx, "ROLLBACK"); err != nil {
			return nil, idem.Locked{}, fmt.Errorf("roll back the open: %w", err)
		}
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, idem.Locked{}, fmt.Errorf("begin: %w", err)
	}
	var l idem.Locked
	b := &pgx.Batch{}
	idem.QueueLock(b, in.TenantID, in.Key, &l)
	b.Queue("SAVEPOINT " + stepSavepoint)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return nil, idem.Locked{}, fmt.Errorf("lock record: %w", err)
	}
	return tx, l, nil
}

// stepSavepoint is the savepoint a business step runs under.
const stepSavepoint = "step"

// stepTx is the transaction a business step runs in: the execution's,
// under stepSavepoint, which the execution releases or rolls back to. The
// step may nest savepoints of its own (Begin), but never ends it.
type stepTx struct{ pgx.Tx }

var errStepEnds = errors.New("a business step must not end its transaction: return, and the execution commits it with the record")

func (stepTx) Commit(context.Context) error   { return errStepEnds }
func (stepTx) Rollback(context.Context) error { return errStepEnds }

// executeLocked is execute's transaction, pipelined so that a new intent
// costs two round trips: the step's first statement, sent behind what
// opens the transaction (BEGIN, the record's lock and the step's
// savepoint: openingTx), with whatever else the step sends; and one that
// sends what the step left for later (op.Later), releases the savepoint,
// remembers the key, finishes the record, commits and announces it
// (idem.Store.QueueSettled). A step that sends nothing but later
// statements costs one: the last pipeline opens the transaction too.
//
// A pipeline that carried later statements and failed before its commit
// is not retried as it was: the execution runs again the long way, each
// statement sent when the step queues it, so that the step sees its own
// errors (a value PostgreSQL cannot store, a key already written).
func (a *Activities) executeLocked(ctx context.Context, in idem.Intent, req interface{ Fingerprint() (string, error) },
	step func(tx pgx.Tx) (idem.Outcome, error)) (idem.Outcome, error) {
	out, err := a.executeOnce(ctx, in, req, step, false)
	if errors.Is(err, errLaterFailed) {
		a.Logger.DebugContext(ctx, "a pipeline with later statements failed; running the step the long way", "tenant", in.TenantID, "key", in.Key, "error", err)
		return a.executeOnce(ctx, in, req, step, true)
	}
	return out, err
}

// errLaterFailed: a pipeline that carried the step's later statements
// failed before its commit; nothing was committed.
var errLaterFailed = errors.New("the pipeline with the step's later statements failed")

func (a *Activities) executeOnce(ctx context.Context, in idem.Intent, req interface{ Fingerprint() (string, error) },
	step func(tx pgx.Tx) (idem.Outcome, error), now bool) (idem.Outcome, error) {
	fingerprint, err := req.Fingerprint()
	if err != nil {
		return idem.Outcome{}, temporal.NewNonRetryableApplicationError(err.Error(), idem.ErrTypeForged, err)
	}
	if fingerprint != in.Fingerprint {
		return idem.Outcome{}, temporal.NewNonRetryableApplicationError("the request does not match the intent's fingerprint", idem.ErrTypeForged, nil)
	}
	pooled, err := a.DB.Acquire(ctx)
	if err != nil {
		return idem.Outcome{}, fmt.Errorf("acquire: %w", err)
	}
	// A connection left inside a transaction (an error below) is closed
	// by the pool, never reused.
	defer pooled.Release()
	conn := pooled.Conn()
	// Committed by the last batch, the transaction needs no ROLLBACK;
	// until then, any return rolls back whatever began.
	committed := false
	defer func() {
		if !committed && conn.PgConn().TxStatus() != 'I' {
			_, _ = conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}()

	// The common case: the record is open for in (the claim just
	// inserted it), and the step's first statement opens the transaction.
	first := &openingTx{conn: conn, in: in, now: now}
	out, err := step(first)
	rec := idem.Record{TenantID: in.TenantID, Key: in.Key, BizType: in.BizType, Fingerprint: in.Fingerprint,
		WorkflowID: in.WorkflowID, Attempts: in.Attempt, Status: idem.StatusProcessing}
	recalled := false
	// opensLate: the step sent nothing but later statements, and the
	// finishing pipeline opens the transaction with them.
	opensLate := first.state == stateUnopened && len(first.later) > 0 && err == nil
	later := first.later
	switch {
	case first.state == stateOpen, opensLate:
	case first.state == stateBroken:
		return idem.Outcome{}, first.err
	default:
		later = nil // the first run's; the step runs again below
		// A retry after an earlier execution, a purge that raced the
		// claim, or a step that sent nothing: decide under the lock, and
		// run the step again if the record is open after all.
		tx, l, lockErr := lock(ctx, conn, in)
		if lockErr != nil {
			return idem.Outcome{}, lockErr
		}
		var done bool
		var openErr error
		if rec, done, openErr = opened(in, l); openErr != nil || done {
			return rec.Response, openErr
		}
		// A row committed by an earlier execution is the answer; one
		// written under this key with other parameters means this intent
		// must not run. The claim inserts a record only for a key
		// idempotency_key does not know, so this is the rare case (a
		// purge raced the claim) and the only one that reads the
		// business row.
		if l.KeyKnown {
			prior, found, err := a.Records.Recall(ctx, tx, rec.TenantID, rec.Key)
			if err != nil {
				return idem.Outcome{}, err
			}
			switch {
			case found && prior.Fingerprint == rec.Fingerprint:
				recalled = true
				step = func(pgx.Tx) (idem.Outcome, error) { return prior.Outcome, nil }
			case found:
				rejection := keyReused(rec.Key, prior.BizType, rec.BizType)
				step = func(pgx.Tx) (idem.Outcome, error) { return idem.Outcome{}, rejection }
			}
		}
		out, err = step(stepTx{tx})
	}
	var rejected *apperr.RejectedError
	if unstorable(err) {
		// Input PostgreSQL cannot store (validation should have caught
		// it) fails the same way on every retry: settle it now.
		a.Logger.ErrorContext(ctx, "intent input cannot be stored", "tenant", rec.TenantID, "key", rec.Key, "workflow_id", in.WorkflowID, "error", err)
		err = errUnstorable
	}
	var final idem.Record
	b := &pgx.Batch{}
	switch {
	case errors.As(err, &rejected):
		a.observer().Rejected(in.BizType, rejected.Code)
		// On its own: after a failed statement the transaction accepts
		// nothing else, not even a batch's preparation, until then.
		if _, err := conn.Exec(ctx, "ROLLBACK TO SAVEPOINT "+stepSavepoint); err != nil {
			return idem.Outcome{}, fmt.Errorf("roll back rejected step: %w", err)
		}
		out = problem.Rejected(rejected).Outcome()
		if err := a.Records.QueueFinish(b, rec, idem.StatusFailed, out, rejected.Error(), &final); err != nil {
			return idem.Outcome{}, err
		}
	case err != nil:
		return idem.Outcome{}, err
	default:
		if opensLate {
			idem.QueueOpen(b, in, stepSavepoint)
		}
		b.QueuedQueries = append(b.QueuedQueries, later...)
		b.Queue("RELEASE SAVEPOINT " + stepSavepoint)
		if !recalled {
			// In the step's transaction: the key is remembered if and
			// only if its effect was written.
			idem.QueueRememberKey(b, rec.Intent())
		}
		if err := a.Records.QueueFinish(b, rec, idem.StatusSuccess, out, "", &final); err != nil {
			return idem.Outcome{}, err
		}
	}
	b.Queue("COMMIT").Exec(func(pgconn.CommandTag) error {
		committed = true
		return nil
	})
	a.Records.QueueSettled(b, rec.TenantID, rec.Key)
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		if !committed && len(later) > 0 {
			return idem.Outcome{}, fmt.Errorf("%w: %w", errLaterFailed, err)
		}
		if !committed {
			// Anything after a failed statement was skipped, COMMIT too:
			// the deferred rollback ends the transaction. A connection
			// lost meanwhile leaves the commit unknown, and the retry
			// finds out under the lock.
			return idem.Outcome{}, fmt.Errorf("finish: %w", err)
		}
		// Only the announcement, behind the commit, failed.
		a.Logger.WarnContext(ctx, "announcing a settled record", "tenant", rec.TenantID, "key", rec.Key, "error", err)
	}
	a.Records.Waiters.Settled(rec.TenantID, rec.Key, &final)
	if rejected != nil {
		a.Logger.InfoContext(ctx, "intent rejected", "tenant", rec.TenantID, "key", rec.Key, "code", rejected.Code)
		return idem.Outcome{}, temporal.NewNonRetryableApplicationError(rejected.Error(), idem.ErrTypeRejected, rejected, out)
	}
	return out, nil
}

// errUnstorable replaces a data exception from PostgreSQL in a business
// step: a stable rejection, with the raw error kept for the logs.
var errUnstorable = &apperr.RejectedError{Code: "unstorable-input", Status: 400,
	Reason: "the request holds a value the database cannot store"}

// unstorable reports a PostgreSQL data exception (SQLSTATE class 22, such
// as a NUL byte in text): no retry of the same input can succeed.
func unstorable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Code, "22")
}

// Resolution is what ResolveIntent decided.
type Resolution = idem.Resolution

// ResolveInput names a PROCESSING intent to settle.
type ResolveInput struct {
	Intent idem.Intent `json:"intent"`
	Reason string      `json:"reason"`
	// Preferred, when set, is the answer a completed workflow returned:
	// stored instead of one rebuilt from the row, as it is the exact answer
	// the first caller received. It is used only if the row exists.
	Preferred *idem.Outcome `json:"preferred,omitempty"`
	// Canceled: an operator stopped the intent; with no row, the stored
	// answer says so (problem.Canceled) rather than execution-failed.
	Canceled bool `json:"canceled,omitempty"`
}

// ResolveIntent settles a PROCESSING record whose workflow no longer runs
// (idem.Store.Resolve): SUCCESS with the answer rebuilt from the business
// row when one exists, FAILED (nothing was written, a retry may execute)
// when none does. The caller must know that no execution is still
// running: a workflow that gives up, or reconcile after asking Temporal.
func (a *Activities) ResolveIntent(ctx context.Context, in ResolveInput) (Resolution, error) {
	failed := problem.ExecutionFailed()
	if in.Canceled {
		failed = problem.Canceled()
	}
	var before func(context.Context, pgx.Tx) error
	if t, ok := a.Tools.Of(in.Intent.BizType); ok {
		var err error
		if before, err = a.settleToolCall(ctx, in.Intent, t, &failed); err != nil {
			return Resolution{}, err
		}
	}
	res, err := a.Records.Resolve(ctx, idem.ResolveParams{Intent: in.Intent, Preferred: in.Preferred, Failed: failed.Outcome(), Reason: in.Reason, Before: before})
	if err != nil {
		return Resolution{}, err
	}
	a.Logger.InfoContext(ctx, "intent resolved", "tenant", in.Intent.TenantID, "key", in.Intent.Key, "action", res.Action, "reason", in.Reason)
	return res, nil
}
