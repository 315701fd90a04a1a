package activities

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemflow/idemflow/idem"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
)

// Verdict is what reconcile did with one stale intent; runs count them and
// show the counts in the Web UI. (Not an idem.Outcome, the stored answer.)
type Verdict string

// The verdicts.
const (
	VerdictRunning      Verdict = "running"       // workflow still running: left alone
	VerdictFromWorkflow Verdict = "from-workflow" // completed workflow: SUCCESS with its result
	VerdictFromRow      Verdict = "from-row"      // business row found: SUCCESS rebuilt from it
	VerdictFailed       Verdict = "failed"        // nothing written, nothing running: FAILED
	VerdictSettled      Verdict = "already-final" // someone else finished it meanwhile
	VerdictError        Verdict = "error"         // reconciling it failed; the next run retries
)

// Verdicts lists every verdict, for what must know them before they
// happen (the metrics export each at 0).
// TestVerdictsListsEveryVerdictAndTheMetricsExportEach reads the constants
// above from this file and fails on one left out.
func Verdicts() []Verdict {
	return []Verdict{VerdictRunning, VerdictFromWorkflow, VerdictFromRow, VerdictFailed, VerdictSettled, VerdictError}
}

// FindStaleInput selects PROCESSING records older than the horizon.
type FindStaleInput struct {
	Horizon idem.Duration `json:"horizon"`
	Limit   int           `json:"limit"`
}

// FindStale lists stale PROCESSING intents.
func (a *Activities) FindStale(ctx context.Context, in FindStaleInput) ([]idem.Intent, error) {
	recs, err := a.Records.Stale(ctx, in.Horizon.D(), in.Limit)
	if err != nil {
		return nil, err
	}
	out := make([]idem.Intent, len(recs))
	for i, r := range recs {
		out[i] = r.Intent()
	}
	return out, nil
}

// ReconcileIntent settles one stale PROCESSING intent. It asks Temporal
// first: a running workflow is left alone (it will finish the record
// itself); a completed one gives the exact answer its first caller got.
// Otherwise the business row decides (ResolveIntent). It never writes a
// business row, and every update names PROCESSING as the expected state.
func (a *Activities) ReconcileIntent(ctx context.Context, in idem.Intent) (Verdict, error) {
	v, err := a.reconcileIntent(ctx, in)
	if err != nil {
		a.observer().Reconciled(string(VerdictError))
		return v, err
	}
	a.observer().Reconciled(string(v))
	a.Logger.InfoContext(ctx, "reconciled", "tenant", in.TenantID, "key", in.Key, "workflow_id", in.WorkflowID, "verdict", v)
	return v, nil
}

func (a *Activities) reconcileIntent(ctx context.Context, in idem.Intent) (Verdict, error) {
	if a.Temporal == nil {
		return "", errors.New("reconcile needs a Temporal client")
	}
	desc, err := a.Temporal.DescribeWorkflowExecution(ctx, in.WorkflowID, "")
	var notFound *serviceerror.NotFound
	var preferred *idem.Outcome
	switch {
	case errors.As(err, &notFound):
		// Never started (the gateway died before the start) or forgotten
		// after the namespace retention.
	case err != nil:
		return "", fmt.Errorf("describe workflow %s: %w", in.WorkflowID, err)
	default:
		switch desc.GetWorkflowExecutionInfo().GetStatus() {
		case enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
			return VerdictRunning, nil
		case enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED:
			var out idem.Outcome
			run := a.Temporal.GetWorkflow(ctx, in.WorkflowID, desc.GetWorkflowExecutionInfo().GetExecution().GetRunId())
			if err := run.Get(ctx, &out); err != nil {
				return "", fmt.Errorf("read result of %s: %w", in.WorkflowID, err)
			}
			preferred = &out
		}
	}
	res, err := a.ResolveIntent(ctx, ResolveInput{Intent: in, Reason: "reconcile: no running workflow and no business row", Preferred: preferred})
	if err != nil {
		return "", err
	}
	switch {
	case res.Action == idem.ResolvedNone:
		return VerdictSettled, nil
	case res.Status == idem.StatusFailed:
		return VerdictFailed, nil
	case preferred != nil:
		return VerdictFromWorkflow, nil
	default:
		return VerdictFromRow, nil
	}
}

// PurgeInput bounds one purge run.
type PurgeInput struct {
	BatchSize int           `json:"batch_size"`
	Budget    idem.Duration `json:"budget"`
}

// PurgeResult says how much one purge run deleted.
type PurgeResult struct {
	Deleted int64 `json:"deleted"`
	// Complete is false when the time budget ran out with more to delete:
	// the next scheduled run continues.
	Complete bool `json:"complete"`
}

// PurgeExpired deletes expired records in batches until none is left or
// the budget is spent. It heartbeats its count after every batch, so a
// retry after a worker restart carries the total on; deleting is itself
// idempotent, so the retry simply continues.
func (a *Activities) PurgeExpired(ctx context.Context, in PurgeInput) (PurgeResult, error) {
	var res PurgeResult
	if activity.HasHeartbeatDetails(ctx) {
		_ = activity.GetHeartbeatDetails(ctx, &res.Deleted)
	}
	deadline := time.Now().Add(in.Budget.D())
	for {
		n, err := a.Records.PurgeBatch(ctx, in.BatchSize)
		if err != nil {
			return res, err
		}
		res.Deleted += n
		a.observer().Purged(n)
		activity.RecordHeartbeat(ctx, res.Deleted)
		if n < int64(in.BatchSize) {
			res.Complete = true
			return res, nil
		}
		if time.Now().After(deadline) {
			return res, nil
		}
	}
}
