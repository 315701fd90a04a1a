// Package schedule installs and operates the Temporal Schedule that runs
// the Reconcile workflow.
package schedule

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/workflows"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
)

// Config is the schedule's desired state.
type Config struct {
	// Interval between runs.
	Interval time.Duration
	// CatchupWindow: runs missed while Temporal was down are taken if
	// they are this recent; SKIP overlap keeps it to one at a time.
	CatchupWindow time.Duration
	Input         workflows.ReconcileInput
}

// Defaults: every minute, records PROCESSING for 5 minutes are stale (well
// above a create's P99, and above one activity attempt, see Validate),
// purge 500 rows a batch for at most 20 s a run.
const (
	DefaultInterval          = time.Minute
	DefaultCatchupWindow     = 10 * time.Minute
	DefaultProcessingTimeout = 5 * time.Minute
	DefaultLimit             = 200
	DefaultPurgeBatch        = 500
	DefaultPurgeBudget       = 20 * time.Second
)

// DefaultConfig returns the defaults above.
func DefaultConfig() Config {
	return Config{
		Interval:      DefaultInterval,
		CatchupWindow: DefaultCatchupWindow,
		Input: workflows.ReconcileInput{
			ProcessingTimeout: idem.Duration(DefaultProcessingTimeout),
			Limit:             DefaultLimit,
			PurgeBatch:        DefaultPurgeBatch,
			PurgeBudget:       idem.Duration(DefaultPurgeBudget),
		},
	}
}

// Validate rejects settings that would break the guarantee. A processing
// timeout at or below one activity attempt's start-to-close would let
// reconcile judge an intent whose attempt may still commit, and a slow
// create would become a duplicate; reconcile also asks Temporal, but the
// horizon is the first line.
func (c Config) Validate() error {
	switch {
	case c.Input.ProcessingTimeout.D() <= workflows.ActivityStartToClose:
		return fmt.Errorf("processing timeout %v must be larger than the activity start-to-close timeout %v",
			c.Input.ProcessingTimeout.D(), workflows.ActivityStartToClose)
	case c.Interval < time.Second:
		return fmt.Errorf("schedule interval %v is below one second", c.Interval)
	case c.Input.Limit < 1 || c.Input.PurgeBatch < 1 || c.Input.PurgeBudget <= 0:
		return fmt.Errorf("limit, purge batch and purge budget must be positive")
	}
	return nil
}

// RetentionAdvice checks a record retention against the rule retention >=
// max retry window x safety factor (3 to 5) + reconcile period (README,
// "Record retention and Temporal retention"). It returns "" when retention
// satisfies it with the factor 3. Below it nothing executes twice (a
// purged key is recalled from its business row), but a late retry gets an
// answer rebuilt from the row rather than the stored bytes.
func RetentionAdvice(retention, maxRetryWindow, reconcilePeriod time.Duration) string {
	need := 3*maxRetryWindow + reconcilePeriod
	if retention >= need {
		return ""
	}
	return fmt.Sprintf("record retention %v is below max retry window %v x safety factor 3..5 + reconcile period %v = %v..%v; "+
		"a retry arriving after its record is purged gets its answer rebuilt from the business row, not the stored bytes", retention, maxRetryWindow, reconcilePeriod,
		need, 5*maxRetryWindow+reconcilePeriod)
}

func (c Config) action() *client.ScheduleWorkflowAction {
	return &client.ScheduleWorkflowAction{
		ID:            "idemflow-reconcile-run",
		Workflow:      workflows.Reconcile,
		Args:          []any{c.Input},
		TaskQueue:     workflows.TaskQueue,
		StaticSummary: fmt.Sprintf("reconcile PROCESSING older than %v, purge expired records", c.Input.ProcessingTimeout.D()),
	}
}

// Apply creates the schedule, or updates an existing one to cfg: applying
// twice never makes two schedules.
func Apply(ctx context.Context, c client.Client, namespace string, cfg Config) (created bool, err error) {
	if err := cfg.Validate(); err != nil {
		return false, err
	}
	if err := EnsureSearchAttributes(ctx, c, namespace); err != nil {
		return false, err
	}
	spec := client.ScheduleSpec{Intervals: []client.ScheduleIntervalSpec{{Every: cfg.Interval}}}
	_, err = c.ScheduleClient().Create(ctx, client.ScheduleOptions{
		ID:            workflows.ReconcileScheduleID,
		Spec:          spec,
		Action:        cfg.action(),
		Overlap:       enumspb.SCHEDULE_OVERLAP_POLICY_SKIP,
		CatchupWindow: cfg.CatchupWindow,
		Note:          "installed by idemflow",
	})
	if err == nil {
		return true, nil
	}
	if !errors.Is(err, temporal.ErrScheduleAlreadyRunning) {
		return false, fmt.Errorf("create schedule: %w", err)
	}
	h := c.ScheduleClient().GetHandle(ctx, workflows.ReconcileScheduleID)
	err = h.Update(ctx, client.ScheduleUpdateOptions{
		DoUpdate: func(in client.ScheduleUpdateInput) (*client.ScheduleUpdate, error) {
			s := in.Description.Schedule
			s.Spec = &spec
			s.Action = cfg.action()
			s.Policy = &client.SchedulePolicies{Overlap: enumspb.SCHEDULE_OVERLAP_POLICY_SKIP, CatchupWindow: cfg.CatchupWindow}
			return &client.ScheduleUpdate{Schedule: &s}, nil
		},
	})
	if err != nil {
		return false, fmt.Errorf("update schedule: %w", err)
	}
	return false, nil
}

// EnsureSearchAttributes registers the reconcile run's search attributes
// that the namespace lacks.
func EnsureSearchAttributes(ctx context.Context, c client.Client, namespace string) error {
	_, err := AddMissingSearchAttributes(ctx, c, namespace, workflows.SearchAttributes())
	return err
}

// NamespaceSettle bounds how long a namespace that exists may still be
// unknown to a frontend: Temporal remembers a namespace it looked up and
// did not find for a second (its registry's read-through cache), so one
// registered just after a lookup (a process that polled for it while the
// server started) is refused as not found meanwhile.
const NamespaceSettle = 15 * time.Second

// AddMissingSearchAttributes registers those of want that the namespace
// lacks, and says how many it added. A namespace not found is asked again
// for up to NamespaceSettle: it may exist and not be seen yet.
func AddMissingSearchAttributes(ctx context.Context, c client.Client, namespace string, want map[string]enumspb.IndexedValueType) (int, error) {
	var have *operatorservice.ListSearchAttributesResponse
	err := whileNamespaceSettles(ctx, func() (err error) {
		have, err = c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("list search attributes: %w", err)
	}
	missing := map[string]enumspb.IndexedValueType{}
	for name, typ := range want {
		if _, ok := have.GetCustomAttributes()[name]; !ok {
			missing[name] = typ
		}
	}
	if len(missing) == 0 {
		return 0, nil
	}
	err = whileNamespaceSettles(ctx, func() error {
		_, err := c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
			Namespace: namespace, SearchAttributes: missing,
		})
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("add search attributes: %w", err)
	}
	return len(missing), nil
}

// whileNamespaceSettles calls call again while it finds no namespace, for
// up to NamespaceSettle, and returns its last error.
func whileNamespaceSettles(ctx context.Context, call func() error) error {
	deadline := time.Now().Add(NamespaceSettle)
	for {
		err := call()
		var missing *serviceerror.NamespaceNotFound
		if !errors.As(err, &missing) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Handle returns the schedule's handle, for describe, trigger, pause and
// unpause.
func Handle(ctx context.Context, c client.Client) client.ScheduleHandle {
	return c.ScheduleClient().GetHandle(ctx, workflows.ReconcileScheduleID)
}
