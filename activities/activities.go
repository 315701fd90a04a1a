// Package activities holds idemflow's Temporal activities: the only code
// that writes business rows. Each runs in one database transaction that also
// finishes the idempotency record, so a ticket never exists while its record
// still says PROCESSING, and a retried activity finds its own earlier commit.
package activities

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/idemflow/idemflow/apperr"
	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/orders"
	"github.com/idemflow/idemflow/problem"
	"github.com/idemflow/idemflow/tickets"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
)

// Error types of non-retryable application errors. Workflows and the
// gateway match on them.
const (
	// ErrTypeRejected: a business rule said no; details hold the stored
	// idem.Outcome (a 422 problem).
	ErrTypeRejected = "BusinessRejected"
	// ErrTypeClosed: the record is FAILED; this attempt must not execute.
	ErrTypeClosed = "IntentClosed"
	// ErrTypeGone: the record does not exist (purged); nothing to do.
	ErrTypeGone = "IntentGone"
)

// NonRetryable lists the error types no retry can fix.
var NonRetryable = []string{ErrTypeRejected, ErrTypeClosed, ErrTypeGone}

// lookupFunc finds the business row of an intent inside q and renders its
// stored answer; apperr.ErrNotFound when no row exists.
type lookupFunc func(ctx context.Context, q idem.Querier, in idem.Intent) (idem.Outcome, error)

// Activities holds the activities' dependencies.
type Activities struct {
	DB      *pgxpool.Pool
	Records *idem.Store
	Logger  *slog.Logger
	// Temporal lets reconcile ask whether an intent's workflow still runs.
	Temporal client.Client

	lookups map[string]lookupFunc
}

// New returns the activities over db.
func New(db *pgxpool.Pool, records *idem.Store, tc client.Client, logger *slog.Logger) *Activities {
	if logger == nil {
		logger = slog.Default()
	}
	a := &Activities{DB: db, Records: records, Temporal: tc, Logger: logger}
	a.lookups = map[string]lookupFunc{
		tickets.BizType:  lookupTicket,
		orders.BizCreate: orders.Answer,
	}
	for _, act := range []orders.Action{orders.ActionPay, orders.ActionCancel, orders.ActionRefund, orders.ActionFulfill} {
		a.lookups[act.BizType()] = orders.Answer
	}
	return a
}

// execute runs one intent's business step in a transaction that holds the
// record's row lock and finishes the record in the same commit.
//
// The lock is what makes "activities can run more than once" harmless: a
// second execution (a retry, a zombie attempt, a second run of the workflow)
// waits for the first to commit and then sees SUCCESS or FAILED.
func (a *Activities) execute(ctx context.Context, in idem.Intent, step func(tx pgx.Tx) (idem.Outcome, error)) (idem.Outcome, error) {
	tx, err := a.DB.Begin(ctx)
	if err != nil {
		return idem.Outcome{}, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit

	rec, err := idem.GetTx(ctx, tx, in.TenantID, in.Key, true)
	if errors.Is(err, idem.ErrNotFound) {
		return idem.Outcome{}, temporal.NewNonRetryableApplicationError("idempotency record is gone", ErrTypeGone, err)
	}
	if err != nil {
		return idem.Outcome{}, fmt.Errorf("lock record: %w", err)
	}
	if rec.Fingerprint != in.Fingerprint {
		// The record was purged and re-created by another request under
		// the same key; this run belongs to neither.
		return idem.Outcome{}, temporal.NewNonRetryableApplicationError("record belongs to another request", ErrTypeGone, nil)
	}
	switch rec.Status {
	case idem.StatusSuccess:
		return rec.Response, nil
	case idem.StatusFailed:
		return idem.Outcome{}, temporal.NewNonRetryableApplicationError("intent already failed: "+rec.ErrorReason, ErrTypeClosed, nil)
	}

	// The step runs under a savepoint, so a business rejection undoes its
	// writes while the record stays locked: FAILED (no row) is then written
	// in the same transaction, with no moment for anyone else to step in.
	sp, err := tx.Begin(ctx)
	if err != nil {
		return idem.Outcome{}, fmt.Errorf("savepoint: %w", err)
	}
	out, err := step(sp)
	var rejected *apperr.RejectedError
	switch {
	case errors.As(err, &rejected):
		if err := sp.Rollback(ctx); err != nil {
			return idem.Outcome{}, fmt.Errorf("roll back rejected step: %w", err)
		}
		out = problem.Rejected(rejected).Outcome()
		if err := a.Records.Finish(ctx, tx, rec, idem.StatusFailed, out, rejected.Error()); err != nil {
			return idem.Outcome{}, err
		}
	case err != nil:
		return idem.Outcome{}, err
	default:
		if err := sp.Commit(ctx); err != nil {
			return idem.Outcome{}, fmt.Errorf("release savepoint: %w", err)
		}
		if err := a.Records.Finish(ctx, tx, rec, idem.StatusSuccess, out, ""); err != nil {
			return idem.Outcome{}, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return idem.Outcome{}, fmt.Errorf("commit: %w", err)
	}
	if rejected != nil {
		a.Logger.InfoContext(ctx, "intent rejected", "tenant", rec.TenantID, "key", rec.Key, "code", rejected.Code)
		return idem.Outcome{}, temporal.NewNonRetryableApplicationError(rejected.Error(), ErrTypeRejected, rejected, out)
	}
	return out, nil
}

// CreateTicket inserts the ticket of an intent, or returns the one an
// earlier execution inserted.
func (a *Activities) CreateTicket(ctx context.Context, in tickets.CreateInput) (idem.Outcome, error) {
	return a.execute(ctx, in.Intent, func(tx pgx.Tx) (idem.Outcome, error) {
		if out, err := lookupTicket(ctx, tx, in.Intent); !errors.Is(err, apperr.ErrNotFound) {
			return out, err
		}
		t, err := tickets.Insert(ctx, tx, tickets.New(in))
		if err != nil {
			return idem.Outcome{}, err
		}
		return t.Outcome(), nil
	})
}

func lookupTicket(ctx context.Context, q idem.Querier, in idem.Intent) (idem.Outcome, error) {
	t, err := tickets.GetByKey(ctx, q, in.TenantID, in.Key)
	if err != nil {
		return idem.Outcome{}, err
	}
	if t.Fingerprint != in.Fingerprint {
		return idem.Outcome{}, &apperr.RejectedError{Code: "idempotency-key-reused",
			Reason: "a ticket already exists under this key with different parameters"}
	}
	return t.Outcome(), nil
}

// Resolution is what ResolveIntent decided.
type Resolution struct {
	Status  idem.Status  `json:"status"`
	Outcome idem.Outcome `json:"outcome"`
	// Action is "none" (already final), "backfilled" (row found, SUCCESS
	// written) or "failed" (no row, FAILED written).
	Action string `json:"action"`
}

// ResolveInput names a PROCESSING intent to settle.
type ResolveInput struct {
	Intent idem.Intent `json:"intent"`
	Reason string      `json:"reason"`
	// Preferred, when set, is the answer a completed workflow returned:
	// stored instead of one rebuilt from the row, as it is the exact answer
	// the first caller received. It is used only if the row exists.
	Preferred *idem.Outcome `json:"preferred,omitempty"`
}

// ResolveIntent settles a PROCESSING record whose workflow no longer runs:
// SUCCESS with a snapshot rebuilt from the business row when one exists,
// FAILED (nothing was written, a retry may execute) when none does. It never
// writes a business row. The caller must know that no execution is still
// running: a workflow that gives up, or reconcile after asking Temporal.
func (a *Activities) ResolveIntent(ctx context.Context, in ResolveInput) (Resolution, error) {
	lookup, ok := a.lookups[in.Intent.BizType]
	if !ok {
		return Resolution{}, temporal.NewNonRetryableApplicationError("unknown biz type "+in.Intent.BizType, "UnknownBizType", nil)
	}
	tx, err := a.DB.Begin(ctx)
	if err != nil {
		return Resolution{}, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	rec, err := idem.GetTx(ctx, tx, in.Intent.TenantID, in.Intent.Key, true)
	if errors.Is(err, idem.ErrNotFound) {
		return Resolution{Action: "none"}, nil
	}
	if err != nil {
		return Resolution{}, fmt.Errorf("lock record: %w", err)
	}
	if rec.Status != idem.StatusProcessing || rec.Fingerprint != in.Intent.Fingerprint {
		return Resolution{Status: rec.Status, Outcome: rec.Response, Action: "none"}, nil
	}
	res := Resolution{Status: idem.StatusSuccess, Action: "backfilled"}
	res.Outcome, err = lookup(ctx, tx, rec.Intent())
	var rejected *apperr.RejectedError
	switch {
	case err == nil:
		if in.Preferred != nil {
			res.Outcome = *in.Preferred
		}
		err = a.Records.Finish(ctx, tx, rec, idem.StatusSuccess, res.Outcome, "")
	case errors.Is(err, apperr.ErrNotFound):
		res = Resolution{Status: idem.StatusFailed, Action: "failed", Outcome: problem.ExecutionFailed(in.Reason).Outcome()}
		err = a.Records.Finish(ctx, tx, rec, idem.StatusFailed, res.Outcome, in.Reason)
	case errors.As(err, &rejected):
		res = Resolution{Status: idem.StatusFailed, Action: "failed", Outcome: problem.Rejected(rejected).Outcome()}
		err = a.Records.Finish(ctx, tx, rec, idem.StatusFailed, res.Outcome, rejected.Error())
	}
	if err != nil {
		return Resolution{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return Resolution{}, fmt.Errorf("commit: %w", err)
	}
	a.Logger.InfoContext(ctx, "intent resolved", "tenant", rec.TenantID, "key", rec.Key, "action", res.Action)
	return res, nil
}

// Guards lists every table whose (tenant_id, idem_key) must be unique.
func Guards() []idem.Guard {
	return append([]idem.Guard{idem.RecordGuard, tickets.Guard}, orders.Guards...)
}
