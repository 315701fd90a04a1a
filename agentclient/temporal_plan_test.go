package agentclient

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/idemflow/idemflow/intent"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// A planned agent: a model activity answers with the tool calls to make,
// and the workflow makes them. The test's model answers each of its
// invocations from a script, so that a reset that runs the model again
// gets another plan, as a real model gives.

type toolCall struct {
	// Tool: "lookup" (read-only), "create_ticket" (customer, title) or
	// "open_ticket" (ticketArgs, one JSON object: an activity that may
	// declare intent fields).
	Tool  string
	Title string
	// Customer, if set, is what the model writes for the customer in
	// place of the run's (another customer, or the same one spaced).
	Customer string
}

// ticketArgs is open_ticket's one argument.
type ticketArgs struct {
	CustomerID string `json:"customer_id"`
	Title      string `json:"title"`
}

type planRun struct {
	Customer string
	// Turns: the run continues as new this many times; each turn asks the
	// model again.
	Turns int
	Turn  int
	// WaitForDone waits for the signal "done" after the calls.
	WaitForDone bool
	// FailFirstAttempt fails the workflow's first attempt after its calls.
	FailFirstAttempt bool
	// ToolQueue runs the tools on another task queue.
	ToolQueue string
}

const (
	planQueue   = "agent-plans"
	intentQueue = "agent-plans-by-intent"
)

// plannedAgent returns open_ticket's answers.
func plannedAgent(ctx workflow.Context, r planRun) ([]Result, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 30 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: 50 * time.Millisecond, MaximumAttempts: 3}})
	var plan []toolCall
	if err := workflow.ExecuteActivity(ctx, "model", r.Customer, r.Turn).Get(ctx, &plan); err != nil {
		return nil, err
	}
	tctx := ctx
	if r.ToolQueue != "" {
		tctx = workflow.WithTaskQueue(ctx, r.ToolQueue)
	}
	var answers []Result
	for _, c := range plan {
		if c.Tool == "open_ticket" {
			var res Result
			if err := workflow.ExecuteActivity(tctx, c.Tool, ticketArgs{CustomerID: cmp.Or(c.Customer, r.Customer), Title: c.Title}).Get(ctx, &res); err != nil {
				return nil, err
			}
			answers = append(answers, res)
			continue
		}
		if err := workflow.ExecuteActivity(tctx, c.Tool, r.Customer, c.Title).Get(ctx, nil); err != nil {
			return nil, err
		}
	}
	if r.WaitForDone {
		workflow.GetSignalChannel(ctx, "done").Receive(ctx, nil)
	}
	if r.Turn < r.Turns {
		r.Turn++
		return nil, workflow.NewContinueAsNewError(ctx, plannedAgent, r)
	}
	if r.FailFirstAttempt && workflow.GetInfo(ctx).Attempt == 1 {
		return nil, temporal.NewApplicationError("the first attempt fails after its calls", "test")
	}
	return answers, nil
}

// scriptedModel answers the n-th invocation for (customer, turn) with
// plans[n], and the last plan after that.
type scriptedModel struct {
	mu    sync.Mutex
	plans map[string][][]toolCall // by customer
	asked map[string]int          // by customer and turn
}

func (m *scriptedModel) script(customer string, plans ...[]toolCall) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.plans[customer] = plans
}

func (m *scriptedModel) answer(_ context.Context, customer string, turn int) ([]toolCall, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := customer + "/" + string(rune('0'+turn))
	n := m.asked[k]
	m.asked[k]++
	plans := m.plans[customer]
	return plans[min(n, len(plans)-1)], nil
}

// plannedTicket is the agent's create_ticket: one ticket under
// ActivityKey, its error returned as it comes.
func plannedTicket(c *Client) func(context.Context, string, string) (string, error) {
	return func(ctx context.Context, customer, title string) (string, error) {
		key, err := ActivityKey(ctx, "")
		if err != nil {
			return "", err
		}
		body, _ := json.Marshal(map[string]string{"customer_id": customer, "title": title})
		r, err := c.Do(ctx, Intent{ID: key, Key: key, Method: "POST", Path: "/v1/tickets", Body: body})
		if err != nil {
			return "", err
		}
		return string(r.Body), nil
	}
}

// openTicket is the agent's open_ticket: one ticket under ActivityKey,
// keyed by the call's intent where the workflow's worker declared it
// (IntentFields), and then saying so (ActivityByIntent).
func openTicket(c *Client) func(context.Context, ticketArgs) (Result, error) {
	return func(ctx context.Context, a ticketArgs) (Result, error) {
		key, err := ActivityKey(ctx, "")
		if err != nil {
			return Result{}, err
		}
		body, _ := json.Marshal(a)
		return c.Do(ctx, Intent{ID: key, Key: key, Method: "POST", Path: "/v1/tickets", Body: body, ByIntent: ActivityByIntent(ctx)})
	}
}

// What operators and Temporal do to a planned agent, on a real Temporal
// server and a real gateway: a reset that runs the model again (which
// then plans otherwise), a reset of a continue-as-new chain, a workflow
// retry. A call the lineage already made is never made again under a new
// key; a call it never made is a new intent, never a 422 or a replay.
func TestAKeyNamesTheIntendedCallNotItsPlace(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	c := &Client{BaseURL: s.URL, Token: s.Tokens[testenv.TenantA], Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond}
	model := &scriptedModel{plans: map[string][][]toolCall{}, asked: map[string]int{}}
	register := func(r sdkworker.Registry) {
		r.RegisterWorkflowWithOptions(plannedAgent, workflow.RegisterOptions{Name: "planned"})
		r.RegisterActivityWithOptions(model.answer, activity.RegisterOptions{Name: "model"})
		r.RegisterActivityWithOptions(func(context.Context, string, string) error { return nil }, activity.RegisterOptions{Name: "lookup"})
		r.RegisterActivityWithOptions(plannedTicket(c), activity.RegisterOptions{Name: "create_ticket"})
		r.RegisterActivityWithOptions(openTicket(c), activity.RegisterOptions{Name: "open_ticket"})
	}
	s.Server.NewWorkerWithOptions(planQueue, register, sdkworker.Options{Interceptors: []interceptor.WorkerInterceptor{KeyInterceptor()}})
	// The same agent on a worker that declares open_ticket's intent
	// field, the customer, as the ticket operation does (tp4).
	byIntent := KeyInterceptor(IntentFields("open_ticket", intent.Fields{{Name: "customer_id", Norm: intent.ID}}))
	s.Server.NewWorkerWithOptions(intentQueue, register, sdkworker.Options{Interceptors: []interceptor.WorkerInterceptor{byIntent}})
	tc := s.Temporal
	ctx := context.Background()

	tickets := func(customer, title string) int {
		return testenv.Count(t, s.Pool, "ticket", "customer_id = $1 AND ($2 = '' OR title = $2)", customer, title)
	}
	// resetTo resets the run to the end of the n-th workflow task: 1 is
	// the one that scheduled the model; 2 the one that read its plan.
	resetTo := func(t *testing.T, id, runID string, n int) string {
		t.Helper()
		var point int64
		for _, e := range history(t, tc, id, runID) {
			if e.GetWorkflowTaskCompletedEventAttributes() != nil {
				if n--; n == 0 {
					point = e.GetEventId()
					break
				}
			}
		}
		if point == 0 {
			t.Fatalf("%s: no such workflow task", id)
		}
		reset, err := tc.ResetWorkflowExecution(ctx, &workflowservice.ResetWorkflowExecutionRequest{Namespace: s.Server.GetDefaultNamespace(),
			WorkflowExecution: &commonpb.WorkflowExecution{WorkflowId: id, RunId: runID}, Reason: "the test resets",
			WorkflowTaskFinishEventId: point, RequestId: uuid.NewString()})
		if err != nil {
			t.Fatal(err)
		}
		return reset.RunId
	}
	// runAndReset runs the agent until its calls are made, resets it to
	// the n-th workflow task, and lets the reset run finish.
	runOnAndReset := func(t *testing.T, queue, who string, want int, n int) []Result {
		t.Helper()
		id := "plan-" + who
		run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, "planned", planRun{Customer: who, WaitForDone: true})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, func() bool { return tickets(who, "") == want })
		again := resetTo(t, id, run.GetRunID(), n)
		if err := tc.SignalWorkflow(ctx, id, again, "done", nil); err != nil {
			t.Fatal(err)
		}
		var answers []Result
		if err := tc.GetWorkflow(ctx, id, again).Get(ctx, &answers); err != nil {
			t.Fatalf("the reset run failed: %v", err)
		}
		return answers
	}
	runAndReset := func(t *testing.T, who string, want int, n int) []Result {
		t.Helper()
		return runOnAndReset(t, planQueue, who, want, n)
	}
	printer := toolCall{Tool: "create_ticket", Title: "Printer on fire"}
	lookup := toolCall{Tool: "lookup", Title: "Printer on fire"}
	toner := toolCall{Tool: "create_ticket", Title: "Toner empty"}

	t.Run("a reset runs the model again, which adds a lookup before the same call", func(t *testing.T) {
		who := "c-" + uuid.NewString()[:8]
		model.script(who, []toolCall{printer}, []toolCall{lookup, printer})
		runAndReset(t, who, 1, 1)
		if n := tickets(who, printer.Title); n != 1 {
			t.Fatalf("%d %q tickets for one intended call", n, printer.Title)
		}
	})
	t.Run("a reset runs the model again, which asks for another ticket at the same place", func(t *testing.T) {
		who := "c-" + uuid.NewString()[:8]
		model.script(who, []toolCall{printer}, []toolCall{toner})
		runAndReset(t, who, 1, 1)
		if a, b := tickets(who, printer.Title), tickets(who, toner.Title); a != 1 || b != 1 {
			t.Fatalf("%d %q and %d %q tickets, want one each: the new call is a new intent", a, printer.Title, b, toner.Title)
		}
	})
	t.Run("a reset runs the model again, which plans the same two equal calls", func(t *testing.T) {
		who := "c-" + uuid.NewString()[:8]
		model.script(who, []toolCall{printer, printer})
		runAndReset(t, who, 2, 1)
		if n := tickets(who, printer.Title); n != 2 {
			t.Fatalf("%d tickets for two intended calls", n)
		}
	})
	t.Run("a reset after the model answered", func(t *testing.T) {
		who := "c-" + uuid.NewString()[:8]
		model.script(who, []toolCall{lookup, printer}, []toolCall{toner})
		runAndReset(t, who, 1, 2)
		if n := tickets(who, ""); n != 1 {
			t.Fatalf("%d tickets for one intended call", n)
		}
	})
	t.Run("a reset of a continue-as-new chain replays the turns after it", func(t *testing.T) {
		who := "c-" + uuid.NewString()[:8]
		model.script(who, []toolCall{printer}) // every turn asks for the same ticket
		id := "chain-" + who
		run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: planQueue}, "planned", planRun{Customer: who, Turns: 1})
		if err != nil {
			t.Fatal(err)
		}
		first := run.GetRunID() // Get moves it to the chain's last run
		if err := run.Get(ctx, nil); err != nil {
			t.Fatal(err)
		}
		if n := tickets(who, ""); n != 2 {
			t.Fatalf("%d tickets for the chain's two turns", n)
		}
		again := resetTo(t, id, first, 1)
		if err := tc.GetWorkflow(ctx, id, again).Get(ctx, nil); err != nil {
			t.Fatalf("the reset chain: %v", err)
		}
		if n := tickets(who, ""); n != 2 {
			t.Fatalf("%d tickets after the chain was reset, for two intended calls", n)
		}
	})
	// A reset whose model rewords the free text of its call: on the
	// worker that declares the intent field, the call made again finds
	// the first by its intent (tp4), and its answer says truthfully that
	// it is a replay of what was made, naming what differed.
	printerReworded := toolCall{Tool: "open_ticket", Title: "Printer is smoking, please help"}
	printerOpen := toolCall{Tool: "open_ticket", Title: "Printer on fire"}
	t.Run("a reset whose model rewords the call: one ticket, a replay naming the title", func(t *testing.T) {
		who := "c-" + uuid.NewString()[:8]
		spaced := printerReworded
		spaced.Customer = " " + who + " "
		model.script(who, []toolCall{printerOpen}, []toolCall{spaced})
		answers := runOnAndReset(t, intentQueue, who, 1, 1)
		if n := tickets(who, "") + tickets(spaced.Customer, ""); n != 1 {
			t.Fatalf("%d tickets for one intended call reworded", n)
		}
		var made ticketArgs
		if len(answers) != 1 || !answers[0].Replayed || !slices.Equal(answers[0].Differed, []string{"title"}) ||
			json.Unmarshal(answers[0].Body, &made) != nil || made.Title != printerOpen.Title {
			t.Fatalf("the reworded call's answer: %+v, want a replay of %q naming the title", answers, printerOpen.Title)
		}
	})
	t.Run("without the declaration (tp3) the reworded call is a second ticket", func(t *testing.T) {
		who := "c-" + uuid.NewString()[:8]
		model.script(who, []toolCall{printerOpen}, []toolCall{printerReworded})
		runAndReset(t, who, 1, 1)
		if n := tickets(who, ""); n != 2 {
			t.Fatalf("%d tickets: the control shows what tp4 prevents", n)
		}
	})
	t.Run("a reset whose model names another customer: another intent", func(t *testing.T) {
		who := "c-" + uuid.NewString()[:8]
		other := printerOpen
		other.Customer = who + "-b"
		model.script(who, []toolCall{printerOpen}, []toolCall{other})
		if answers := runOnAndReset(t, intentQueue, who, 1, 1); len(answers) != 1 || answers[0].Replayed {
			t.Fatalf("another customer's call: %+v, want a new ticket", answers)
		}
		if a, b := tickets(who, ""), tickets(who+"-b", ""); a != 1 || b != 1 {
			t.Fatalf("%d and %d tickets, want one for each customer", a, b)
		}
	})
	t.Run("two calls for one customer in a run are two, and a reset that rewords both keeps both", func(t *testing.T) {
		who := "c-" + uuid.NewString()[:8]
		network := toolCall{Tool: "open_ticket", Title: "Network down"}
		model.script(who, []toolCall{printerOpen, network}, []toolCall{printerReworded, {Tool: "open_ticket", Title: "No network"}})
		answers := runOnAndReset(t, intentQueue, who, 2, 1)
		if n := tickets(who, ""); n != 2 {
			t.Fatalf("%d tickets for two intended calls", n)
		}
		if len(answers) != 2 || !answers[0].Replayed || !answers[1].Replayed {
			t.Fatalf("the reset's calls: %+v, want both replayed", answers)
		}
	})
	t.Run("a workflow retry", func(t *testing.T) {
		who := "c-" + uuid.NewString()[:8]
		model.script(who, []toolCall{printer})
		run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "retry-" + who, TaskQueue: planQueue,
			RetryPolicy: &temporal.RetryPolicy{InitialInterval: 50 * time.Millisecond, MaximumAttempts: 2}}, "planned", planRun{Customer: who, FailFirstAttempt: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := run.Get(ctx, nil); err != nil {
			t.Fatal(err)
		}
		if n := tickets(who, ""); n != 1 {
			t.Fatalf("%d tickets for one intended call", n)
		}
	})
}

// A workflow worker without the interceptor (not yet upgraded, or another
// SDK's) numbers no call: the activity's key would be shared by every run
// of the workflow ID, so the activity fails, not retryably, naming the
// fix; with no interceptor anywhere, the same, at once, not a run that
// retries for ever.
func TestACallNobodyNumberedFailsTheRunNamingTheFix(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	c := &Client{BaseURL: s.URL, Token: s.Tokens[testenv.TenantA], Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond}
	model := &scriptedModel{plans: map[string][][]toolCall{}, asked: map[string]int{}}
	workflows := func(r sdkworker.Registry) {
		r.RegisterWorkflowWithOptions(plannedAgent, workflow.RegisterOptions{Name: "planned"})
		r.RegisterActivityWithOptions(model.answer, activity.RegisterOptions{Name: "model"})
	}
	tools := func(r sdkworker.Registry) {
		r.RegisterActivityWithOptions(plannedTicket(c), activity.RegisterOptions{Name: "create_ticket"})
	}
	withKeys := sdkworker.Options{Interceptors: []interceptor.WorkerInterceptor{KeyInterceptor()}}
	tc := s.Temporal
	ctx := context.Background()

	for _, tt := range []struct {
		name         string
		toolsOptions sdkworker.Options
	}{
		{"the workflow's worker has no interceptor, the tools' has", withKeys},
		{"no worker has the interceptor", sdkworker.Options{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			queue, toolQueue := "bare-"+uuid.NewString()[:8], "tools-"+uuid.NewString()[:8]
			s.Server.NewWorkerWithOptions(queue, workflows, sdkworker.Options{})
			s.Server.NewWorkerWithOptions(toolQueue, tools, tt.toolsOptions)
			who := "c-" + uuid.NewString()[:8]
			model.script(who, []toolCall{{Tool: "create_ticket", Title: "Printer on fire"}})
			id := "bare-" + who
			// The workflow ID run twice: two intended calls.
			for range 2 {
				cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				run, err := tc.ExecuteWorkflow(cctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, "planned", planRun{Customer: who, ToolQueue: toolQueue})
				if err != nil {
					cancel()
					t.Fatal(err)
				}
				err = run.Get(cctx, nil)
				cancel()
				var app *temporal.ApplicationError
				if !errors.As(err, &app) || !app.NonRetryable() || !strings.Contains(err.Error(), "KeyInterceptor") {
					t.Fatalf("run: %v, want the run failed at once by a non-retryable error naming KeyInterceptor", err)
				}
			}
			if n := testenv.Count(t, s.Pool, "ticket", "customer_id = $1", who); n != 0 {
				t.Fatalf("%d tickets from calls nobody numbered", n)
			}
		})
	}
}
