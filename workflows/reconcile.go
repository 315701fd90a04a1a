package workflows

import (
	"fmt"
	"time"

	"github.com/idemflow/idemflow/activities"
	"github.com/idemflow/idemflow/idem"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// ReconcileScheduleID is the one schedule that runs Reconcile.
const ReconcileScheduleID = "idemflow-reconcile"

// Search attributes a Reconcile run sets, so that an operator can find runs
// that fixed something ("IdemflowFixed > 0") in the Web UI.
var (
	SAStale  = temporal.NewSearchAttributeKeyInt64("IdemflowStale")
	SAFixed  = temporal.NewSearchAttributeKeyInt64("IdemflowFixed")
	SAPurged = temporal.NewSearchAttributeKeyInt64("IdemflowPurged")
)

// ReconcileInput configures one reconcile-and-purge run.
type ReconcileInput struct {
	// ProcessingTimeout: PROCESSING records untouched for longer are stale.
	ProcessingTimeout idem.Duration `json:"processing_timeout"`
	// Limit of stale records handled per run; the next run takes the rest.
	Limit int `json:"limit"`
	// PurgeBatch and PurgeBudget bound the purge step.
	PurgeBatch  int           `json:"purge_batch"`
	PurgeBudget idem.Duration `json:"purge_budget"`
}

// ReconcileResult counts what a run found and did.
type ReconcileResult struct {
	Stale         int                        `json:"stale"`
	Outcomes      map[activities.Verdict]int `json:"outcomes"`
	Purged        int64                      `json:"purged"`
	PurgeComplete bool                       `json:"purge_complete"`
}

// Fixed counts the records this run settled.
func (r ReconcileResult) Fixed() int {
	return r.Outcomes[activities.VerdictFromWorkflow] + r.Outcomes[activities.VerdictFromRow] + r.Outcomes[activities.VerdictFailed]
}

// Reconcile settles stale PROCESSING records and purges expired ones.
//
// Both steps run in one workflow on one schedule: an operator has one
// thing to watch and pause, and they cannot interfere, since purge never
// touches a PROCESSING record and reconcile only touches those.
func Reconcile(ctx workflow.Context, in ReconcileInput) (ReconcileResult, error) {
	res := ReconcileResult{Outcomes: map[activities.Verdict]int{}}
	short := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 5, MaximumInterval: 10 * time.Second},
	})
	var stale []idem.Intent
	if err := workflow.ExecuteActivity(short, a.FindStale, activities.FindStaleInput{Horizon: in.ProcessingTimeout, Limit: in.Limit}).Get(ctx, &stale); err != nil {
		return res, err
	}
	res.Stale = len(stale)
	futures := make([]workflow.Future, len(stale))
	for i, it := range stale {
		futures[i] = workflow.ExecuteActivity(short, a.ReconcileIntent, it)
	}
	for i, f := range futures {
		var verdict activities.Verdict
		if err := f.Get(ctx, &verdict); err != nil {
			// One bad record must not block the others; it stays stale
			// and is retried by the next run.
			workflow.GetLogger(ctx).Error("reconcile intent", "workflow_id", stale[i].WorkflowID, "error", err)
			verdict = activities.VerdictError
		}
		res.Outcomes[verdict]++
	}

	purgeCtx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: in.PurgeBudget.D() + time.Minute,
		HeartbeatTimeout:    30 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3},
	})
	var purged activities.PurgeResult
	if err := workflow.ExecuteActivity(purgeCtx, a.PurgeExpired, activities.PurgeInput{BatchSize: in.PurgeBatch, Budget: in.PurgeBudget}).Get(ctx, &purged); err != nil {
		return res, err
	}
	res.Purged, res.PurgeComplete = purged.Deleted, purged.Complete

	if err := workflow.UpsertTypedSearchAttributes(ctx,
		SAStale.ValueSet(int64(res.Stale)), SAFixed.ValueSet(int64(res.Fixed())), SAPurged.ValueSet(res.Purged)); err != nil {
		return res, err
	}
	workflow.SetCurrentDetails(ctx, fmt.Sprintf(
		"**stale PROCESSING:** %d  \n**left running:** %d  \n**SUCCESS from workflow result:** %d  \n**SUCCESS from business row:** %d  \n**FAILED (nothing written):** %d  \n**already final:** %d  \n**errors:** %d  \n**purged:** %d (complete: %t)",
		res.Stale, res.Outcomes[activities.VerdictRunning], res.Outcomes[activities.VerdictFromWorkflow],
		res.Outcomes[activities.VerdictFromRow], res.Outcomes[activities.VerdictFailed],
		res.Outcomes[activities.VerdictSettled], res.Outcomes[activities.VerdictError], res.Purged, res.PurgeComplete))
	return res, nil
}
