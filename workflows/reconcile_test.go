package workflows_test

import (
	"errors"
	"testing"
	"time"

	"github.com/idemflow/idemflow/activities"
	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/workflows"
	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/worker"
)

func TestReconcileCountsOutcomesAndSurvivesABadRecord(t *testing.T) {
	env := newEnv(t)
	env.RegisterWorkflow(workflows.Reconcile)
	stale := []idem.Intent{{Key: "a", WorkflowID: "w/a"}, {Key: "b", WorkflowID: "w/b"}, {Key: "c", WorkflowID: "w/c"}, {Key: "d", WorkflowID: "w/d"}}
	env.OnActivity(a.FindStale, mock.Anything, mock.Anything).Return(stale, nil)
	env.OnActivity(a.ReconcileIntent, mock.Anything, stale[0]).Return(activities.VerdictRunning, nil)
	env.OnActivity(a.ReconcileIntent, mock.Anything, stale[1]).Return(activities.VerdictFromRow, nil)
	env.OnActivity(a.ReconcileIntent, mock.Anything, stale[2]).Return(activities.VerdictFailed, nil)
	// d keeps failing: its retries back off for tens of seconds, which
	// the test environment's time skipping runs through at once.
	env.OnActivity(a.ReconcileIntent, mock.Anything, stale[3]).Return("", errors.New("temporal unreachable"))
	env.OnActivity(a.PurgeExpired, mock.Anything, mock.Anything).Return(activities.PurgeResult{Deleted: 42, Complete: true}, nil)

	start := env.Now()
	env.ExecuteWorkflow(workflows.Reconcile, workflows.ReconcileInput{ProcessingTimeout: idem.Duration(5 * time.Minute), Limit: 10, PurgeBatch: 100, PurgeBudget: idem.Duration(time.Second)})
	var res workflows.ReconcileResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if res.Stale != 4 || res.Fixed() != 2 || res.Outcomes[activities.VerdictRunning] != 1 || res.Outcomes[activities.VerdictError] != 1 || res.Purged != 42 {
		t.Fatalf("result %+v", res)
	}
	if skipped := env.Now().Sub(start); skipped < 10*time.Second {
		t.Fatalf("expected retries to skip workflow time forward, skipped %v", skipped)
	}
}

func TestReplayRecordedReconcileHistory(t *testing.T) {
	r := worker.NewWorkflowReplayer()
	r.RegisterWorkflow(workflows.Reconcile)
	if err := r.ReplayWorkflowHistoryFromJSONFile(nil, "testdata/reconcile_history.json"); err != nil {
		t.Fatal(err)
	}
}
