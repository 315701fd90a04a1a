// Package worker runs idemflow's Temporal worker: it registers the
// reconcile workflow, the activities and each operation's workflow and
// activity on workflows.TaskQueue, and stops by draining.
package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/idemflow/idemflow/activities"
	"github.com/idemflow/idemflow/op"
	"github.com/idemflow/idemflow/workflows"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// StopTimeout is how long Stop waits for running activities.
const StopTimeout = 30 * time.Second

// New returns a worker on workflows.TaskQueue with every workflow and
// activity registered (Register), ops being every operation it runs.
// Start it with Start and stop it with Stop: Stop waits for running
// activities up to StopTimeout, so a deploy does not cut a transaction
// in half (it would roll back anyway, and be retried).
func New(c client.Client, acts *activities.Activities, ops []*op.Operation) sdkworker.Worker {
	w := sdkworker.New(c, workflows.TaskQueue, sdkworker.Options{
		WorkerStopTimeout: StopTimeout,
	})
	Register(w, acts, ops)
	return w
}

// Run starts w, blocks until ctx ends, then stops it. Stop drains: running
// activities get up to StopTimeout, so a deploy does not cut a business
// transaction in half.
func Run(ctx context.Context, w sdkworker.Worker) error {
	if err := w.Start(); err != nil {
		return fmt.Errorf("start worker: %w", err)
	}
	<-ctx.Done()
	w.Stop()
	return nil
}

// Register registers idemflow's workflows and activities on r: Reconcile
// and the methods of Activities under their names, and each of ops'
// workflow and activity under the names it declares, once per pair.
// ops is every operation the worker runs, the built-ins included, with
// names that do not clash (a process's list of operations checks them
// when it is built).
func Register(r sdkworker.Registry, acts *activities.Activities, ops []*op.Operation) {
	r.RegisterWorkflow(workflows.Reconcile)
	r.RegisterActivity(acts)
	byWorkflow := map[string][]*op.Operation{}
	var order []string
	for _, o := range ops {
		if _, ok := byWorkflow[o.Workflow]; !ok {
			order = append(order, o.Workflow)
		}
		byWorkflow[o.Workflow] = append(byWorkflow[o.Workflow], o)
	}
	for _, wf := range order {
		RegisterOperations(r, acts, byWorkflow[wf]...)
	}
}

// RegisterOperations registers, on r, the workflow and the activity that
// ops share (one operation, an order's transitions, or the HTTP tools),
// under their names. Operations with no step in the record's transaction
// are HTTP tools: their activity calls the tool (activities.HTTPTool).
func RegisterOperations(r sdkworker.Registry, acts *activities.Activities, ops ...*op.Operation) {
	wf, run := workflows.Operation(ops[0].Activity), activities.Operation{Activities: acts, Ops: ops}.Run
	if !ops[0].HasStep() {
		wf, run = workflows.ToolCall(ops[0].Activity), activities.HTTPTool{Activities: acts}.Run
	}
	r.RegisterWorkflowWithOptions(wf, workflow.RegisterOptions{Name: ops[0].Workflow})
	r.RegisterActivityWithOptions(run, activity.RegisterOptions{Name: ops[0].Activity})
}
