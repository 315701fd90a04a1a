package agentclient

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/workflow"
)

// DeriveKey is the one derivation of a key from a durable identity, shared
// with the TypeScript and Python clients through clients/testdata/keys.json:
// the parts (a framework's thread and call IDs, a workflow's and activity's
// IDs, the tool's name) hashed, so that the same parts give the same key in
// any process and language, and any other parts another key. 47 characters
// for a four-letter scheme, within idemflow's rules.
func DeriveKey(scheme string, parts ...string) string {
	h := sha256.New()
	for _, p := range append([]string{scheme}, parts...) {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return scheme + "_" + base64.RawURLEncoding.EncodeToString(h.Sum(nil))[:42]
}

// ErrNoDurableIdentity: a key was asked for outside a durable call (not in
// a Temporal activity that a workflow scheduled), or on a worker that
// cannot tell the workflow's runs apart (KeyInterceptor not registered). A
// random key would protect nothing across a retry, and a key shared by two
// runs would answer the second run's call as a replay, so none is made.
var ErrNoDurableIdentity = errors.New("no durable identity to derive a key from")

// The header in which KeyInterceptor hands an activity its call's place
// in the workflow (a callID, as JSON). Named in the Python client too
// (idemflow.temporal), so that a workflow in one language may call an
// activity in the other.
const callHeader = "idemflow-call"

// callID names one activity call of a workflow across everything that
// runs it again: Run is the original run ID, which a new run of the same
// workflow ID changes (a reused ID, cron, continue-as-new, a workflow
// retry) and a reset keeps; N counts the run's activity calls, local and
// regular alike, in the order the workflow's code makes them, so a replay
// and a reset count them the same. The activity ID is no such name: the
// Go SDK numbers local and regular activities apart, and numbers a
// regular one from its event ID, which a reset shifts.
type callID struct {
	Run string `json:"run"`
	N   int    `json:"n"`
}

// The key schemes of a Temporal activity: tp2, from the callID; tp1
// (workflow ID, activity ID, tool), which told neither runs nor kinds of
// activity apart, is kept for an activity scheduled before its workflow's
// worker had KeyInterceptor (one in flight across the upgrade), so that
// its retries keep the key its first attempt sent.
const (
	activityScheme       = "tp2"
	legacyActivityScheme = "tp1"
)

// ActivityKey is the key of the running Temporal activity's call of tool
// (default: the activity's type). Every attempt of one activity sends it
// (a worker killed after the effect, a timeout), and so does the call a
// reset makes again, so they are one effect. Two intended calls never share
// it: another run of the workflow ID, or another call in the run (local or
// regular), is another key.
//
// scope, if given, is added to the parts: a name the caller wants the key
// to carry (the model's tool-call ID, say); it is not needed to tell calls
// apart.
//
// The call is read from a header that KeyInterceptor sets when the
// workflow schedules the activity: register it on every worker that runs
// the workflows and the activities (worker.Options.Interceptors). On a
// worker without it, ActivityKey returns ErrNoDurableIdentity. An
// activity that a worker without it scheduled (before the upgrade) gets
// the tp1 key its earlier attempts sent, and a warning in the log.
func ActivityKey(ctx context.Context, tool string, scope ...string) (key string, err error) {
	defer func() {
		// activity.GetInfo panics outside an activity.
		if recover() != nil {
			key, err = "", ErrNoDurableIdentity
		}
	}()
	info := activity.GetInfo(ctx)
	if info.WorkflowExecution.ID == "" {
		return "", ErrNoDurableIdentity
	}
	if tool == "" {
		tool = info.ActivityType.Name
	}
	call, ok := ctx.Value(interceptedKey{}).(callID)
	if !ok {
		return "", fmt.Errorf("%w: register agentclient.KeyInterceptor() on the worker (worker.Options.Interceptors), so that the key can tell the workflow's calls apart", ErrNoDurableIdentity)
	}
	if call.Run == "" {
		// Scheduled by a workflow worker without the interceptor: an
		// activity in flight across the upgrade keeps its first key.
		activity.GetLogger(ctx).Warn("idemflow: this activity was scheduled by a workflow worker without agentclient.KeyInterceptor, so its key (tp1) cannot tell the workflow's runs apart", "WorkflowID", info.WorkflowExecution.ID, "ActivityID", info.ActivityID)
		return legacyActivityKey(info.WorkflowExecution.ID, info.ActivityID, tool, scope...), nil
	}
	return activityKey(info.WorkflowExecution.ID, call, tool, scope...), nil
}

func activityKey(workflowID string, call callID, tool string, scope ...string) string {
	return DeriveKey(activityScheme, append([]string{workflowID, call.Run, strconv.Itoa(call.N), tool}, scope...)...)
}

func legacyActivityKey(workflowID, activityID, tool string, scope ...string) string {
	return DeriveKey(legacyActivityScheme, append([]string{workflowID, activityID, tool}, scope...)...)
}

// KeyInterceptor is what ActivityKey needs from the worker: on the
// workflow's side, it numbers the activities and local activities the
// workflow schedules and writes each one's callID into its header; on the
// activity's side, it hands the callID to ActivityKey (the SDK takes
// headers off the activity's context). Register it on every worker of the
// workflows and activities that derive keys:
//
//	worker.New(c, queue, worker.Options{Interceptors: []interceptor.WorkerInterceptor{agentclient.KeyInterceptor()}})
//
// It reads only workflow.GetInfo and counts in the order the workflow's
// code runs, so the workflow stays deterministic.
func KeyInterceptor() interceptor.WorkerInterceptor { return &keyInterceptor{} }

type interceptedKey struct{}

type keyInterceptor struct {
	interceptor.WorkerInterceptorBase
}

func (*keyInterceptor) InterceptActivity(ctx context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	return &keyActivityInbound{ActivityInboundInterceptorBase: interceptor.ActivityInboundInterceptorBase{Next: next}}
}

func (*keyInterceptor) InterceptWorkflow(ctx workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	return &keyWorkflowInbound{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}}
}

type keyActivityInbound struct {
	interceptor.ActivityInboundInterceptorBase
}

// ExecuteActivity hands the callID in the header on as a context value.
// A zero callID: the workflow's worker has no interceptor.
func (a *keyActivityInbound) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	var call callID
	if p := interceptor.Header(ctx)[callHeader]; p != nil {
		if err := converter.GetDefaultDataConverter().FromPayload(p, &call); err != nil {
			return nil, fmt.Errorf("%w: the header %s: %w", ErrNoDurableIdentity, callHeader, err)
		}
	}
	return a.Next.ExecuteActivity(context.WithValue(ctx, interceptedKey{}, call), in)
}

type keyWorkflowInbound struct {
	interceptor.WorkflowInboundInterceptorBase
}

func (w *keyWorkflowInbound) Init(outbound interceptor.WorkflowOutboundInterceptor) error {
	return w.Next.Init(&keyWorkflowOutbound{WorkflowOutboundInterceptorBase: interceptor.WorkflowOutboundInterceptorBase{Next: outbound}})
}

// keyWorkflowOutbound is one run's: the worker makes one for each
// workflow it runs or replays, so calls counts from zero each time.
type keyWorkflowOutbound struct {
	interceptor.WorkflowOutboundInterceptorBase
	calls int
}

func (o *keyWorkflowOutbound) ExecuteActivity(ctx workflow.Context, activityType string, args ...any) workflow.Future {
	o.stamp(ctx)
	return o.Next.ExecuteActivity(ctx, activityType, args...)
}

func (o *keyWorkflowOutbound) ExecuteLocalActivity(ctx workflow.Context, activityType string, args ...any) workflow.Future {
	o.stamp(ctx)
	return o.Next.ExecuteLocalActivity(ctx, activityType, args...)
}

func (o *keyWorkflowOutbound) stamp(ctx workflow.Context) {
	o.calls++
	p, err := converter.GetDefaultDataConverter().ToPayload(callID{Run: o.Next.GetInfo(ctx).OriginalRunID, N: o.calls})
	if err != nil {
		// A struct of a string and an int always encodes as JSON; a panic
		// fails the workflow task, visibly, rather than an unkeyed call.
		panic(fmt.Sprintf("idemflow: the activity's %s header: %v", callHeader, err))
	}
	if h := interceptor.WorkflowHeader(ctx); h != nil {
		h[callHeader] = p
	}
}
