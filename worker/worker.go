// Package worker runs idemflow's Temporal worker.
package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/idemflow/idemflow/activities"
	"github.com/idemflow/idemflow/registry"
	"github.com/idemflow/idemflow/workflows"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
)

// New returns a worker on workflows.TaskQueue with every workflow and
// activity registered. Start it with Start and stop it with Stop: Stop waits
// for running activities up to the WorkerStopTimeout, so a deploy does not
// cut a transaction in half (it would roll back anyway, and be retried).
func New(c client.Client, acts *activities.Activities) sdkworker.Worker {
	w := sdkworker.New(c, workflows.TaskQueue, sdkworker.Options{
		WorkerStopTimeout: 30 * time.Second,
	})
	Register(w, acts)
	return w
}

// Run starts w, blocks until ctx ends, then stops it. Stop drains: running
// activities get up to the WorkerStopTimeout, so a deploy does not cut a
// business transaction in half.
func Run(ctx context.Context, w sdkworker.Worker) error {
	if err := w.Start(); err != nil {
		return fmt.Errorf("start worker: %w", err)
	}
	<-ctx.Done()
	w.Stop()
	return nil
}

// Register registers idemflow's workflows and activities on r.
func Register(r sdkworker.Registry, acts *activities.Activities) {
	for _, t := range registry.Types() {
		for _, wf := range t.Workflows {
			r.RegisterWorkflow(wf)
		}
	}
	r.RegisterWorkflow(workflows.Reconcile)
	r.RegisterActivity(acts)
}
