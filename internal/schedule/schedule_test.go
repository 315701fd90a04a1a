package schedule_test

import (
	"context"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/internal/ops/tickets"
	"github.com/idemflow/idemflow/internal/schedule"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
	"github.com/idemflow/idemflow/workflows"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
)

var record = flag.Bool("record", false, "re-record the reconcile history used by the workflows replay test")

func countSchedules(t *testing.T, c client.Client) int {
	t.Helper()
	it, err := c.ScheduleClient().List(context.Background(), client.ScheduleListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		if e.ID == workflows.ReconcileScheduleID {
			n++
		}
	}
	return n
}

func TestApplyTwiceGivesOneScheduleAndUpdatesIt(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{NoWorker: true})
	ctx := context.Background()
	ns := s.Server.GetDefaultNamespace()
	cfg := schedule.DefaultConfig()
	created, err := schedule.Apply(ctx, s.Temporal, ns, cfg)
	if err != nil || !created {
		t.Fatalf("first apply: %v %v", created, err)
	}
	cfg.Interval = 7 * time.Minute
	created, err = schedule.Apply(ctx, s.Temporal, ns, cfg)
	if err != nil || created {
		t.Fatalf("second apply: %v %v", created, err)
	}
	// Listing goes through visibility, which may lag a moment.
	deadline := time.Now().Add(10 * time.Second)
	for countSchedules(t, s.Temporal) != 1 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if n := countSchedules(t, s.Temporal); n != 1 {
		t.Fatalf("%d schedules", n)
	}
	d, err := schedule.Handle(ctx, s.Temporal).Describe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := d.Schedule.Spec.Intervals; len(got) != 1 || got[0].Every != 7*time.Minute {
		t.Fatalf("interval not updated: %+v", got)
	}
}

func TestValidateRejectsAHorizonWithinOneActivityAttempt(t *testing.T) {
	cfg := schedule.DefaultConfig()
	cfg.Input.ProcessingTimeout = idem.Duration(workflows.ActivityStartToClose)
	if err := cfg.Validate(); err == nil {
		t.Fatal("a processing timeout equal to the activity start-to-close must be rejected")
	}
	if err := schedule.DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestRetentionAdviceFollowsTheSeedFormula(t *testing.T) {
	// 1 h retry window, daily reconcile: 3 x 1 h + 24 h = 27 h minimum.
	if a := schedule.RetentionAdvice(48*time.Hour, time.Hour, 24*time.Hour); a != "" {
		t.Fatalf("48h should satisfy it: %s", a)
	}
	a := schedule.RetentionAdvice(24*time.Hour, time.Hour, 24*time.Hour)
	if !strings.Contains(a, "27h0m0s") || !strings.Contains(a, "29h0m0s") {
		t.Fatalf("advice should print the formula with values: %q", a)
	}
}

// TestScheduledRunFixesAStuckIntent triggers the installed schedule and
// checks that the run it starts settles a stale record and shows its
// counts to operators as search attributes.
func TestScheduledRunFixesAStuckIntent(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ns := s.Server.GetDefaultNamespace()
	// A gateway died after recording this intent.
	if _, err := s.Records.Claim(ctx, idem.ClaimParams{TenantID: testenv.TenantA, Key: "orphan", BizType: "ticket.create", Fingerprint: "fp", WorkflowID: tickets.WorkflowID(testenv.TenantA, "orphan")}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool.Exec(ctx, `UPDATE idempotency_record SET updated_at = now() - interval '1 hour'`); err != nil {
		t.Fatal(err)
	}
	cfg := schedule.DefaultConfig()
	cfg.Interval = time.Hour // only the trigger below runs it
	if _, err := schedule.Apply(ctx, s.Temporal, ns, cfg); err != nil {
		t.Fatal(err)
	}
	if err := schedule.Handle(ctx, s.Temporal).Trigger(ctx, client.ScheduleTriggerOptions{}); err != nil {
		t.Fatal(err)
	}
	var runID, workflowID string
	for runID == "" {
		if ctx.Err() != nil {
			t.Fatal("the triggered run never started")
		}
		d, err := schedule.Handle(ctx, s.Temporal).Describe(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ra := d.Info.RecentActions; len(ra) > 0 {
			workflowID, runID = ra[0].StartWorkflowResult.WorkflowID, ra[0].StartWorkflowResult.FirstExecutionRunID
		}
		time.Sleep(100 * time.Millisecond)
	}
	var res workflows.ReconcileResult
	if err := s.Temporal.GetWorkflow(ctx, workflowID, runID).Get(ctx, &res); err != nil {
		t.Fatal(err)
	}
	if res.Stale != 1 || res.Fixed() != 1 || res.Outcomes["failed"] != 1 {
		t.Fatalf("result %+v", res)
	}
	rec, _ := s.Records.Get(ctx, testenv.TenantA, "orphan")
	if rec.Status != idem.StatusFailed {
		t.Fatalf("record %s", rec.Status)
	}
	// Operators find runs that fixed something by search attribute.
	found := false
	for !found && ctx.Err() == nil {
		resp, err := s.Temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: ns, Query: "IdemflowFixed > 0"})
		if err != nil {
			t.Fatal(err)
		}
		found = len(resp.Executions) == 1
		time.Sleep(100 * time.Millisecond)
	}
	if !found {
		t.Fatal("the run is not findable by IdemflowFixed")
	}
	if *record {
		testenv.SaveHistory(t, s.Temporal, workflowID, runID, "../../workflows/testdata/reconcile_history.json")
	}
}
