package agentclient

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// agentRun is what the test's agent workflow does in one run: its tool
// calls (all "create_ticket" with the same arguments, so that a shared key
// would answer a later call as a replay), then what ends the run.
type agentRun struct {
	Customer string
	Regular  int // regular activities
	Local    int // local activities, after the regular ones
	// Continues: the run continues as new this many times, each new run
	// making the same calls.
	Continues int
	// FailFirstAttempt fails the workflow's first attempt after its calls,
	// so that its retry policy runs them again in a new run.
	FailFirstAttempt bool
	// FailAfterEffect fails each activity's first attempt after idemflow
	// executed it, so that Temporal runs it again (one intent).
	FailAfterEffect bool
	// WaitForDone waits for the signal "done" after the calls (a reset's
	// point is before them).
	WaitForDone bool
	// ToolQueue runs the regular activities on another task queue.
	ToolQueue string
}

const agentQueue = "agent-keys"

func agentWorkflow(ctx workflow.Context, r agentRun) ([]string, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 30 * time.Second, TaskQueue: r.ToolQueue,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: 50 * time.Millisecond, MaximumAttempts: 3}})
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: 30 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: 50 * time.Millisecond, MaximumAttempts: 3}})
	var keys []string
	for i := 0; i < r.Regular+r.Local; i++ {
		var key string
		f := workflow.ExecuteActivity(ctx, "create_ticket", r)
		if i >= r.Regular {
			f = workflow.ExecuteLocalActivity(lctx, "create_ticket", r)
		}
		if err := f.Get(ctx, &key); err != nil {
			return keys, err
		}
		keys = append(keys, key)
	}
	if r.WaitForDone {
		workflow.GetSignalChannel(ctx, "done").Receive(ctx, nil)
	}
	if r.Continues > 0 {
		r.Continues--
		return keys, workflow.NewContinueAsNewError(ctx, agentWorkflow, r)
	}
	if r.FailFirstAttempt && workflow.GetInfo(ctx).Attempt == 1 {
		return keys, temporal.NewApplicationError("the first attempt fails after its calls", "test")
	}
	return keys, nil
}

// createTicket is the agent's tool: one ticket under ActivityKey.
func createTicket(c *Client) func(context.Context, agentRun) (string, error) {
	return func(ctx context.Context, r agentRun) (string, error) {
		key, err := ActivityKey(ctx, "")
		if err != nil {
			return "", temporal.NewNonRetryableApplicationError(err.Error(), "no-key", err)
		}
		body, _ := json.Marshal(map[string]string{"customer_id": r.Customer, "title": "Daily report"})
		if _, err := c.Do(ctx, Intent{ID: key, Key: key, Method: "POST", Path: "/v1/tickets", Body: body}); err != nil {
			return "", err
		}
		if r.FailAfterEffect && activity.GetInfo(ctx).Attempt == 1 {
			return "", errors.New("the worker dies after the effect")
		}
		return key, nil
	}
}

// Two intended calls are two intents, whatever run of one workflow ID
// makes them, and one intended call is one effect, whatever Temporal runs
// again: every case on a real Temporal server and a real gateway.
func TestActivityKeysTellIntendedCallsApart(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	c := &Client{BaseURL: s.URL, Token: s.Tokens[testenv.TenantA], Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond}
	register := func(r sdkworker.Registry) {
		r.RegisterWorkflowWithOptions(agentWorkflow, workflow.RegisterOptions{Name: "agent"})
		r.RegisterActivityWithOptions(createTicket(c), activity.RegisterOptions{Name: "create_ticket"})
	}
	withKeys := sdkworker.Options{Interceptors: []interceptor.WorkerInterceptor{KeyInterceptor()}}
	s.Server.NewWorkerWithOptions(agentQueue, register, withKeys)
	tc := s.Temporal
	ctx := context.Background()

	start := func(t *testing.T, id string, opts client.StartWorkflowOptions, r agentRun) client.WorkflowRun {
		t.Helper()
		opts.ID, opts.TaskQueue = id, agentQueue
		run, err := tc.ExecuteWorkflow(ctx, opts, "agent", r)
		if err != nil {
			t.Fatal(err)
		}
		return run
	}
	finish := func(t *testing.T, run client.WorkflowRun) {
		t.Helper()
		var keys []string
		if err := run.Get(ctx, &keys); err != nil {
			t.Fatal(err)
		}
	}
	tickets := func(customer string) int {
		return testenv.Count(t, s.Pool, "ticket", "customer_id = $1", customer)
	}
	customer := func() string { return "c-" + uuid.NewString()[:8] }

	cases := []struct {
		name    string
		intents int
		run     func(t *testing.T, who string)
	}{
		{"a workflow ID run twice", 2, func(t *testing.T, who string) {
			id := "daily-report-" + who
			for range 2 {
				finish(t, start(t, id, client.StartWorkflowOptions{WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE}, agentRun{Customer: who, Regular: 1}))
			}
		}},
		{"continue-as-new, twice", 3, func(t *testing.T, who string) {
			finish(t, start(t, "can-"+who, client.StartWorkflowOptions{}, agentRun{Customer: who, Regular: 1, Continues: 2}))
		}},
		{"a workflow retry (the same intended calls)", 1, func(t *testing.T, who string) {
			finish(t, start(t, "retry-"+who, client.StartWorkflowOptions{RetryPolicy: &temporal.RetryPolicy{InitialInterval: 50 * time.Millisecond, MaximumAttempts: 2}},
				agentRun{Customer: who, Regular: 1, FailFirstAttempt: true}))
		}},
		{"one regular and six local activities", 7, func(t *testing.T, who string) {
			finish(t, start(t, "local-"+who, client.StartWorkflowOptions{}, agentRun{Customer: who, Regular: 1, Local: 6}))
		}},
		{"activities run again after their effect (regular and local)", 2, func(t *testing.T, who string) {
			finish(t, start(t, "again-"+who, client.StartWorkflowOptions{}, agentRun{Customer: who, Regular: 1, Local: 1, FailAfterEffect: true}))
		}},
		{"cron, two runs", 2, func(t *testing.T, who string) {
			id := "cron-" + who
			start(t, id, client.StartWorkflowOptions{CronSchedule: "@every 1s"}, agentRun{Customer: who, Regular: 1})
			defer func() { _ = tc.TerminateWorkflow(ctx, id, "", "the test saw two runs") }()
			waitFor(t, 30*time.Second, func() bool { return tickets(who) >= 2 })
		}},
		{"a reset to before the call", 1, func(t *testing.T, who string) {
			id := "reset-" + who
			run := start(t, id, client.StartWorkflowOptions{}, agentRun{Customer: who, Regular: 1, WaitForDone: true})
			waitFor(t, 30*time.Second, func() bool { return tickets(who) == 1 })
			var point int64
			for _, e := range history(t, tc, id, run.GetRunID()) {
				if e.GetWorkflowTaskCompletedEventAttributes() != nil {
					point = e.GetEventId() // the task that scheduled the call
					break
				}
			}
			reset, err := tc.ResetWorkflowExecution(ctx, &workflowservice.ResetWorkflowExecutionRequest{Namespace: s.Server.GetDefaultNamespace(),
				WorkflowExecution: &commonpb.WorkflowExecution{WorkflowId: id, RunId: run.GetRunID()}, Reason: "the test resets",
				WorkflowTaskFinishEventId: point, RequestId: uuid.NewString()})
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.SignalWorkflow(ctx, id, reset.RunId, "done", nil); err != nil {
				t.Fatal(err)
			}
			var keys []string
			if err := tc.GetWorkflow(ctx, id, reset.RunId).Get(ctx, &keys); err != nil || len(keys) != 1 {
				t.Fatalf("the reset run: %v %v", keys, err)
			}
		}},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			who := customer()
			tt.run(t, who)
			if n := tickets(who); n != tt.intents {
				t.Fatalf("%d tickets for %d intended calls", n, tt.intents)
			}
		})
	}

	t.Run("a worker without KeyInterceptor makes no key", func(t *testing.T) {
		queue := agentQueue + "-bare"
		s.Server.NewWorkerWithOptions(queue, register, sdkworker.Options{})
		who := customer()
		run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "bare-" + who, TaskQueue: queue}, "agent", agentRun{Customer: who, Regular: 1})
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		err = run.Get(ctx, &keys)
		var app *temporal.ApplicationError
		if !errors.As(err, &app) || app.Type() != "no-key" || !strings.Contains(err.Error(), "KeyInterceptor") {
			t.Fatalf("without the interceptor: %v, want the activity to refuse, naming KeyInterceptor", err)
		}
		if n := tickets(who); n != 0 {
			t.Fatalf("%d tickets without a key", n)
		}
	})

	// An activity in flight across the upgrade to this release: numbered
	// by its place by a workflow worker of the previous release (tp2), or
	// by nothing, scheduled before the workflow workers got the
	// interceptor (tp1, only with UpgradedAt). Each keeps the key its
	// earlier attempts sent.
	for _, tt := range []struct {
		name       string
		wfOptions  sdkworker.Options
		upgradedAt time.Time
		want       func(id string, runID, activityID string) string
	}{
		{"an activity the previous release numbered keeps its tp2 key", sdkworker.Options{Interceptors: []interceptor.WorkerInterceptor{&previousRelease{}}}, time.Time{},
			func(id, runID, _ string) string {
				return placeActivityKey(id, callID{Run: runID, N: 1}, "create_ticket")
			}},
		{"an activity scheduled before UpgradedAt keeps its tp1 key", sdkworker.Options{}, time.Now().Add(time.Hour),
			func(id, _, activityID string) string { return legacyActivityKey(id, activityID, "create_ticket") }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			wfQueue, toolQueue := agentQueue+"-old-"+uuid.NewString()[:8], agentQueue+"-tools-"+uuid.NewString()[:8]
			s.Server.NewWorkerWithOptions(wfQueue, func(r sdkworker.Registry) {
				r.RegisterWorkflowWithOptions(agentWorkflow, workflow.RegisterOptions{Name: "agent"})
			}, tt.wfOptions)
			s.Server.NewWorkerWithOptions(toolQueue, func(r sdkworker.Registry) {
				r.RegisterActivityWithOptions(createTicket(c), activity.RegisterOptions{Name: "create_ticket"})
			}, sdkworker.Options{Interceptors: []interceptor.WorkerInterceptor{KeyInterceptor(UpgradedAt(tt.upgradedAt))}})
			id := "upgrade-" + customer()
			run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: wfQueue}, "agent", agentRun{Customer: customer(), Regular: 1, ToolQueue: toolQueue})
			if err != nil {
				t.Fatal(err)
			}
			var keys []string
			if err := run.Get(ctx, &keys); err != nil {
				t.Fatal(err)
			}
			var activityID string
			for _, e := range history(t, tc, id, run.GetRunID()) {
				if a := e.GetActivityTaskScheduledEventAttributes(); a != nil {
					activityID = a.GetActivityId()
				}
			}
			if want := tt.want(id, run.GetRunID(), activityID); len(keys) != 1 || keys[0] != want {
				t.Fatalf("keys %v, want %s", keys, want)
			}
		})
	}
}

// previousRelease numbers calls as the previous release's KeyInterceptor
// did: the original run ID and the call's place (tp2).
type previousRelease struct {
	interceptor.WorkerInterceptorBase
}

func (*previousRelease) InterceptWorkflow(ctx workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	return &previousInbound{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}}
}

type previousInbound struct {
	interceptor.WorkflowInboundInterceptorBase
}

func (w *previousInbound) Init(outbound interceptor.WorkflowOutboundInterceptor) error {
	return w.Next.Init(&previousOutbound{WorkflowOutboundInterceptorBase: interceptor.WorkflowOutboundInterceptorBase{Next: outbound}})
}

type previousOutbound struct {
	interceptor.WorkflowOutboundInterceptorBase
	calls int
}

func (o *previousOutbound) ExecuteActivity(ctx workflow.Context, activityType string, args ...any) workflow.Future {
	o.calls++
	interceptor.WorkflowHeader(ctx)[callHeader] = mustPayload(map[string]any{"run": o.Next.GetInfo(ctx).OriginalRunID, "n": o.calls})
	return o.Next.ExecuteActivity(ctx, activityType, args...)
}

func history(t *testing.T, tc client.Client, id, runID string) []*historypb.HistoryEvent {
	t.Helper()
	var events []*historypb.HistoryEvent
	it := tc.GetWorkflowHistory(context.Background(), id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, e)
	}
	return events
}

func waitFor(t *testing.T, within time.Duration, ok func() bool) {
	t.Helper()
	end := time.Now().Add(within)
	for !ok() {
		if time.Now().After(end) {
			t.Fatalf("not within %s", within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
