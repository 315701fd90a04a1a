// Package worker runs idemflow's Temporal worker.
package worker

import (
	"time"

	"github.com/idemflow/idemflow/activities"
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

// Register registers idemflow's workflows and activities on r.
func Register(r sdkworker.Registry, acts *activities.Activities) {
	r.RegisterWorkflow(workflows.CreateTicket)
	r.RegisterWorkflow(workflows.Reconcile)
	r.RegisterWorkflow(workflows.CreateOrder)
	r.RegisterWorkflow(workflows.TransitionOrder)
	r.RegisterActivity(acts)
}
