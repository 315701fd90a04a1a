// Package workflows holds idemflow's Temporal workflows. Workflow code is
// deterministic: every clock, random value and I/O goes through workflow.*
// or an activity.
package workflows

import (
	"errors"
	"slices"
	"time"

	"github.com/idemflow/idemflow/activities"
	"github.com/idemflow/idemflow/idem"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// TaskQueue is the one task queue of idemflow's worker.
const TaskQueue = "idemflow"

// ActivityStartToClose bounds one activity attempt. The reconcile horizon
// (processing timeout) must be larger, or reconcile would settle intents
// whose activity is still inside an attempt.
const ActivityStartToClose = 30 * time.Second

// activityScheduleToClose bounds all attempts: past it the workflow settles
// the record rather than leave an agent's intent open for ever.
const activityScheduleToClose = 2 * time.Minute

var executeOptions = workflow.ActivityOptions{
	StartToCloseTimeout:    ActivityStartToClose,
	ScheduleToCloseTimeout: activityScheduleToClose,
	RetryPolicy: &temporal.RetryPolicy{
		InitialInterval:        200 * time.Millisecond,
		BackoffCoefficient:     2,
		MaximumInterval:        10 * time.Second,
		NonRetryableErrorTypes: idem.NonRetryable(),
	},
}

// localOptions are the fast path: the business step runs in the worker
// that holds the workflow task, so a healthy intent completes within the
// task that started it, with no activity task round trip through matching.
// One attempt keeps the regular attempt's bound, so the reconcile horizon
// still exceeds any attempt; retries stay within that bound too, because a
// local activity holds its workflow task open while it retries. Past it, a
// failure that may pass falls back to the regular activity, whose retries
// are durable in Temporal's history and survive a worker's death.
var localOptions = workflow.LocalActivityOptions{
	StartToCloseTimeout:    ActivityStartToClose,
	ScheduleToCloseTimeout: ActivityStartToClose,
	RetryPolicy: &temporal.RetryPolicy{
		InitialInterval:        100 * time.Millisecond,
		BackoffCoefficient:     2,
		MaximumInterval:        5 * time.Second,
		NonRetryableErrorTypes: idem.NonRetryable(),
	},
}

// settleOptions retry longer: settling is what keeps the record from staying
// PROCESSING, and it only reads and updates one row.
var settleOptions = workflow.ActivityOptions{
	StartToCloseTimeout:    10 * time.Second,
	ScheduleToCloseTimeout: 10 * time.Minute,
	RetryPolicy: &temporal.RetryPolicy{
		InitialInterval:    time.Second,
		BackoffCoefficient: 2,
		MaximumInterval:    time.Minute,
	},
}

var a *activities.Activities

// runIntent executes an intent's activity and, when it gives up for any
// reason other than a business rejection, settles the record so that it
// does not wait for reconcile: SUCCESS if the row was committed after all,
// FAILED if nothing was written.
//
// An operator's cancel (Web UI or CLI) means "stop this attempt": the
// record is settled FAILED with problem.Canceled (or SUCCESS, when the row
// was committed before the cancel arrived), the run ends canceled, and an
// agent's retry under the same key may run the intent again, since the
// reuse policy lets a canceled run be followed by a new one. Settling runs
// on a disconnected context: on the canceled one it would be dropped.
func runIntent(ctx workflow.Context, intent idem.Intent, activity any, how string, input any) (idem.Outcome, error) {
	var out idem.Outcome
	var err error
	what := intent.BizType + " for " + intent.TenantID + ", key " + intent.Key
	// The step runs as a local activity first (no round trip to the
	// server for a step that takes milliseconds); a failure that may pass
	// falls back to a regular activity, whose retries are durable.
	lo := localOptions
	lo.Summary = "run " + what + " " + how + " (local activity)"
	err = workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, lo), activity, input).Get(ctx, &out)
	if err != nil && !isFinalErr(err) && !temporal.IsCanceledError(err) {
		workflow.GetLogger(ctx).Warn("local attempts failed; retrying durably", "error", err)
		err = workflow.ExecuteActivity(durable(ctx, "retry "+what+" durably, after the local attempts failed"), activity, input).Get(ctx, &out)
	}
	if err == nil {
		markStatus(ctx, idem.StatusSuccess)
		return out, nil
	}
	if isFinalErr(err) {
		markStatus(ctx, idem.StatusFailed)
		return idem.Outcome{}, err
	}
	canceled := temporal.IsCanceledError(err)
	workflow.GetLogger(ctx).Warn("intent activity gave up; settling the record", "error", err, "canceled", canceled)
	var res activities.Resolution
	settleCtx, _ := workflow.NewDisconnectedContext(ctx)
	so := settleOptions
	so.Summary = "settle the record of " + what + ": SUCCESS if its row exists, else FAILED"
	settle := workflow.WithActivityOptions(settleCtx, so)
	if serr := workflow.ExecuteActivity(settle, a.ResolveIntent, activities.ResolveInput{
		Intent: intent, Reason: "execution gave up: " + err.Error(), Canceled: canceled,
	}).Get(settle, &res); serr != nil {
		return idem.Outcome{}, err
	}
	markStatus(settleCtx, res.Status)
	if res.Status == idem.StatusSuccess {
		return res.Outcome, nil
	}
	return idem.Outcome{}, err
}

func durable(ctx workflow.Context, summary string) workflow.Context {
	o := executeOptions
	o.Summary = summary
	return workflow.WithActivityOptions(ctx, o)
}

// isFinalErr reports an error no retry can fix (a business rejection, a
// closed or forged intent): the activity already settled the record.
func isFinalErr(err error) bool {
	var appErr *temporal.ApplicationError
	return errors.As(err, &appErr) && appErr.Type() != "" && slices.Contains(idem.NonRetryable(), appErr.Type())
}
