package agentclient

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"
	"time"

	"github.com/gowebpki/jcs"
	"github.com/idemflow/idemflow/intent"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// A Temporal activity's key names the intended call, not its place in the
// run, so that what operators and Temporal run again finds the call it
// already made, and a call nobody made before is new (the rule is written
// once, in clients/testdata/keys.json, and Python's idemflow.temporal
// follows it):
//
//   - the lineage: the run that a workflow retry and a reset keep (the
//     chain's first run; for a cron firing, the firing's own run);
//   - the turn: how many times the lineage continued as new before this
//     run, carried across continue-as-new in the lineageHeader, so that a
//     reset of an earlier turn finds the later turns' calls again;
//   - the tool and the call's arguments (a digest of their canonical JSON),
//     and how many calls of the same activity with the same arguments the
//     run made before this one;
//   - or, for an activity the worker declared intent fields for
//     (IntentFields, tp4), the call's intent in place of its arguments:
//     the declared fields of its one argument, normalised (package
//     intent), so that a reset whose model rewrites only free text finds
//     the first call's key and its answer (ActivityByIntent).
//
// A reset that runs the model again therefore keeps the key of every call
// the model asks for again, wherever in the run it comes (a lookup added
// before it moves nothing), and gives a call with other arguments a key
// of its own (never a 422, never another call's replay).
const (
	activityScheme = "tp3"
	// tp4 is tp3 with the call's intent (IntentFields) in place of its
	// arguments: a scheme of its own, so that no tp3 key in flight is
	// ever read as an intent's.
	intentActivityScheme = "tp4"
	// tp2 numbered a call by its place among the run's calls (the original
	// run ID and a count): kept for an activity that a workflow worker of
	// the previous release scheduled, so that its retries keep its key.
	placeActivityScheme = "tp2"
	// tp1 (workflow ID, activity ID, tool) told neither runs nor calls
	// apart: made only for an activity scheduled before UpgradedAt.
	legacyActivityScheme = "tp1"
)

// The headers KeyInterceptor writes, named in the Python client too, so
// that a workflow in one language may call an activity in the other:
// callHeader on each activity it schedules (a callID), lineageHeader on
// the run it continues as new into (a lineage).
const (
	callHeader    = "idemflow-call"
	lineageHeader = "idemflow-lineage"
)

// callID names one activity call, as JSON in callHeader.
type callID struct {
	Lineage string `json:"lineage,omitempty"`
	Turn    int    `json:"turn"`
	Args    string `json:"args,omitempty"`
	// Intent: Args is the digest of the call's intent, not of its
	// arguments (tp4).
	Intent bool `json:"intent,omitempty"`
	// N: the call's occurrence among the run's calls of the same activity
	// with the same arguments (or intent), from 1 (tp2: its place among
	// all calls).
	N int `json:"n"`
	// Run: tp2's original run ID, in a header of the previous release.
	Run string `json:"run,omitempty"`
}

// lineage is what a run's calls share with every run that makes them
// again, as JSON in lineageHeader. By is the run that continued as new,
// so that a run can tell a header written for it from one that Temporal
// copied from an earlier start (a cron firing, a retry).
type lineage struct {
	ID   string `json:"lineage"`
	Turn int    `json:"turn"`
	By   string `json:"by"`
}

// lineageOf is the lineage of the run that info describes, whose start
// carried header. It reads only the run's start, so every replay, reset
// and worker computes the same.
func lineageOf(info *workflow.Info, header map[string]*commonpb.Payload) lineage {
	var carried lineage
	has := header[lineageHeader] != nil && converter.GetDefaultDataConverter().FromPayload(header[lineageHeader], &carried) == nil && carried.ID != ""
	switch {
	case has && info.Attempt == 1 && carried.By == info.ContinuedExecutionRunID:
		// Continued as new by its predecessor: the next turn.
		return lineage{ID: carried.ID, Turn: carried.Turn}
	case has && info.Attempt > 1 && info.CronSchedule == "":
		// A retry of a continued run: Temporal copies the failed run's
		// start, so its header is the turn's own.
		return lineage{ID: carried.ID, Turn: carried.Turn}
	case info.CronSchedule == "" && (info.ContinuedExecutionRunID == "" || info.Attempt > 1):
		// The chain's first run, or its retry: the first run ID, which
		// a reset and a retry keep and a reused workflow ID does not.
		return lineage{ID: info.FirstRunID}
	default:
		// A cron firing (which shares the first run ID with every other
		// firing), or a run continued by a worker without the
		// interceptor: its own original run, which a reset keeps.
		return lineage{ID: info.OriginalRunID}
	}
}

// argsDigest names a call's arguments: each payload's encoding and its
// data, JSON in its RFC 8785 form (so that a model that writes the same
// arguments in another order asks for the same call), anything else as
// base64.
func argsDigest(payloads *commonpb.Payloads) string {
	var parts []string
	for _, p := range payloads.GetPayloads() {
		enc := string(p.GetMetadata()[converter.MetadataEncoding])
		data := base64.StdEncoding.EncodeToString(p.GetData())
		if enc == converter.MetadataEncodingJSON {
			if c, err := jcs.Transform(p.GetData()); err == nil {
				data = string(c)
			}
		}
		parts = append(parts, enc, data)
	}
	return DeriveKey("args", parts...)
}

// intentDigest names a call by its intent: the declared fields of its one
// argument, a JSON object, normalised. Any other arguments have no intent
// fields to read, which is the workflow's mistake, not the model's.
//
// The workflow calls it: its text is RFC 8785, so the same arguments give
// the same bytes however the maps it passes through are iterated.
//
//workflowcheck:ignore
func intentDigest(fields intent.Fields, payloads *commonpb.Payloads) (string, error) {
	ps := payloads.GetPayloads()
	if len(ps) != 1 || string(ps[0].GetMetadata()[converter.MetadataEncoding]) != converter.MetadataEncodingJSON {
		return "", fmt.Errorf("intent fields name members of an activity's one argument, a JSON object; this call has %d arguments", len(ps))
	}
	canonical, err := fields.Canonical(ps[0].GetData())
	if err != nil {
		return "", err
	}
	return DeriveKey("intent", canonical), nil
}

// ActivityKey is the key of the running Temporal activity's call of tool
// (default: the activity's type). Every attempt of the call sends it (a
// worker killed after the effect, a timeout), and so does the call made
// again by a reset (to any point, with a model that answers otherwise), a
// workflow retry, or a reset of a continue-as-new chain. Two intended
// calls never share it: another call in the run (other arguments, or the
// same ones once more), another turn of a continue-as-new chain, another
// cron firing or run of a reused workflow ID is another key.
//
// scope, if given, is added to the parts (empty ones are left out): a
// name the caller wants the key to carry; it is not needed to tell calls
// apart.
//
// The call is read from a header that KeyInterceptor writes when the
// workflow schedules the activity: register it on every worker of the
// workflows and of the activities. A call that no interceptor numbered
// (the workflow's worker lacks it, or no worker has it) gets no key: the
// error is a non-retryable ApplicationError wrapping ErrNoDurableIdentity
// that names the fix, so the run fails at once instead of retrying for
// ever. An activity that a workflow worker of the previous release
// numbered keeps its tp2 key; see UpgradedAt for one that no interceptor
// numbered because it was scheduled before the upgrade.
func ActivityKey(ctx context.Context, tool string, scope ...string) (key string, err error) {
	defer func() {
		// activity.GetInfo panics outside an activity.
		if recover() != nil {
			key, err = "", noIdentity("ActivityKey was called outside a Temporal activity")
		}
	}()
	info := activity.GetInfo(ctx)
	if info.WorkflowExecution.ID == "" {
		return "", noIdentity("activity " + info.ActivityType.Name + " was not scheduled by a workflow")
	}
	if tool == "" {
		tool = info.ActivityType.Name
	}
	got, ok := ctx.Value(interceptedKey{}).(intercepted)
	switch {
	case !ok:
		return "", noIdentity("register agentclient.KeyInterceptor() on this worker (worker.Options.Interceptors), and on the workflow's, so that the key can tell the workflow's calls apart")
	case got.call.Lineage != "":
		return activityKey(info.WorkflowExecution.ID, got.call, tool, scope...), nil
	case got.call.Run != "":
		activity.GetLogger(ctx).Warn("idemflow: this activity was numbered by the place of its call (tp2), by a workflow worker of an earlier release: it keeps that key; upgrade the workflow's worker", "WorkflowID", info.WorkflowExecution.ID, "ActivityID", info.ActivityID)
		return placeActivityKey(info.WorkflowExecution.ID, got.call, tool, scope...), nil
	case !got.upgradedAt.IsZero() && info.ScheduledTime.Before(got.upgradedAt):
		activity.GetLogger(ctx).Warn("idemflow: this activity was scheduled before the workflow's worker had agentclient.KeyInterceptor (UpgradedAt): it keeps the tp1 key its earlier attempts sent", "WorkflowID", info.WorkflowExecution.ID, "ActivityID", info.ActivityID)
		return legacyActivityKey(info.WorkflowExecution.ID, info.ActivityID, tool, scope...), nil
	default:
		return "", noIdentity("the workflow's worker scheduled this call without agentclient.KeyInterceptor, so nothing tells it from another run's call: register agentclient.KeyInterceptor() on the workflow's worker too (worker.Options.Interceptors)")
	}
}

// noIdentity fails the activity for good: no attempt can find an
// identity the first one did not have.
func noIdentity(why string) error {
	return temporal.NewNonRetryableApplicationError("idemflow: no key: "+why, "NoDurableIdentity", ErrNoDurableIdentity)
}

// nonEmpty drops empty scopes: a scope left empty names nothing, and the
// Python and TypeScript clients leave it out of the parts too.
func nonEmpty(scope []string) []string {
	var out []string
	for _, s := range scope {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// activityKey is a call's tp3 key, or its tp4 key when the call is named
// by its intent.
func activityKey(workflowID string, call callID, tool string, scope ...string) string {
	scheme := activityScheme
	if call.Intent {
		scheme = intentActivityScheme
	}
	return DeriveKey(scheme, append([]string{workflowID, call.Lineage, strconv.Itoa(call.Turn), tool, call.Args, strconv.Itoa(call.N)}, nonEmpty(scope)...)...)
}

// ActivityByIntent reports whether the running activity's key names its
// intent (IntentFields) rather than its whole arguments. Its request must
// then say so (Intent.ByIntent), so that the gateway compares the intent
// fields alone and answers a reworded call made again with the first
// call's answer, naming what differed (Result.Differed).
func ActivityByIntent(ctx context.Context) bool {
	got, ok := ctx.Value(interceptedKey{}).(intercepted)
	return ok && got.call.Lineage != "" && got.call.Intent
}

func placeActivityKey(workflowID string, call callID, tool string, scope ...string) string {
	return DeriveKey(placeActivityScheme, append([]string{workflowID, call.Run, strconv.Itoa(call.N), tool}, nonEmpty(scope)...)...)
}

func legacyActivityKey(workflowID, activityID, tool string, scope ...string) string {
	return DeriveKey(legacyActivityScheme, append([]string{workflowID, activityID, tool}, nonEmpty(scope)...)...)
}

// KeyOption sets up KeyInterceptor.
type KeyOption func(*keyOptions)

type keyOptions struct {
	upgradedAt time.Time
	intents    map[string]intent.Fields // by activity type
}

// IntentFields declares the fields of activityType's one argument (a JSON
// object) that make its intent, as the operation it calls declares them
// (its tool's _meta["io.idemflow/intent"], the contract's
// x-idemflow-intent): its calls are keyed by those fields, normalised
// (tp4), in place of their whole arguments. Give it to the workflow's
// worker, where calls are named. A call whose argument is not one JSON
// object fails the workflow task, visibly, until the code is fixed.
//
// Declare it before the first call is scheduled, or after every run that
// may be reset to before a call has closed: a reset that re-runs a call
// first named by its arguments names it by its intent, another key.
func IntentFields(activityType string, fields intent.Fields) KeyOption {
	return func(o *keyOptions) {
		if o.intents == nil {
			o.intents = map[string]intent.Fields{}
		}
		o.intents[activityType] = fields
	}
}

// UpgradedAt is the explicit path for activities in flight across the
// upgrade to KeyInterceptor: an activity that no interceptor numbered and
// that its workflow scheduled before t keeps the tp1 key (workflow ID,
// activity ID, tool) its earlier attempts sent; one scheduled at t or
// later fails as any unnumbered call does. Set t to when the last
// workflow worker got the interceptor, and drop the option once the
// activities scheduled before it have ended: tp1 cannot tell one run of
// a workflow ID from another.
func UpgradedAt(t time.Time) KeyOption {
	return func(o *keyOptions) { o.upgradedAt = t }
}

// KeyInterceptor is what ActivityKey needs from the worker: on the
// workflow's side, it names each activity and local activity the
// workflow schedules (its lineage, turn, arguments and occurrence) in the
// call's header, and the next turn's lineage in a continue-as-new's; on
// the activity's side, it hands the call's name to ActivityKey. Register
// it on every worker of the workflows and activities that derive keys:
//
//	worker.New(c, queue, worker.Options{Interceptors: []interceptor.WorkerInterceptor{agentclient.KeyInterceptor()}})
//
// It reads only the run's start and the workflow's own calls, in the
// order the workflow's code makes them, so the workflow stays
// deterministic and adds no event to its history.
func KeyInterceptor(opts ...KeyOption) interceptor.WorkerInterceptor {
	k := &keyInterceptor{}
	for _, o := range opts {
		o(&k.opts)
	}
	return k
}

type interceptedKey struct{}

// intercepted is what the activity's side hands ActivityKey.
type intercepted struct {
	call       callID
	upgradedAt time.Time
}

type keyInterceptor struct {
	interceptor.WorkerInterceptorBase
	opts keyOptions
}

func (k *keyInterceptor) InterceptActivity(ctx context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	return &keyActivityInbound{ActivityInboundInterceptorBase: interceptor.ActivityInboundInterceptorBase{Next: next}, opts: k.opts}
}

func (k *keyInterceptor) InterceptWorkflow(ctx workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	return &keyWorkflowInbound{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}, intents: k.opts.intents}
}

type keyActivityInbound struct {
	interceptor.ActivityInboundInterceptorBase
	opts keyOptions
}

// ExecuteActivity hands the callID in the header on as a context value.
// A zero callID: no interceptor numbered the call.
func (a *keyActivityInbound) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	var call callID
	if p := interceptor.Header(ctx)[callHeader]; p != nil {
		if err := converter.GetDefaultDataConverter().FromPayload(p, &call); err != nil {
			return nil, noIdentity(fmt.Sprintf("the header %s: %v", callHeader, err))
		}
	}
	return a.Next.ExecuteActivity(context.WithValue(ctx, interceptedKey{}, intercepted{call: call, upgradedAt: a.opts.upgradedAt}), in)
}

type keyWorkflowInbound struct {
	interceptor.WorkflowInboundInterceptorBase
	intents map[string]intent.Fields
	out     *keyWorkflowOutbound
}

func (w *keyWorkflowInbound) Init(outbound interceptor.WorkflowOutboundInterceptor) error {
	w.out = &keyWorkflowOutbound{WorkflowOutboundInterceptorBase: interceptor.WorkflowOutboundInterceptorBase{Next: outbound}, intents: w.intents, seen: map[string]int{}}
	return w.Next.Init(w.out)
}

// ExecuteWorkflow reads the run's lineage from its start, before the
// workflow's code schedules anything.
func (w *keyWorkflowInbound) ExecuteWorkflow(ctx workflow.Context, in *interceptor.ExecuteWorkflowInput) (any, error) {
	line := lineageOf(workflow.GetInfo(ctx), interceptor.WorkflowHeader(ctx))
	w.out.line = &line
	return w.Next.ExecuteWorkflow(ctx, in)
}

// keyWorkflowOutbound is one run's: the worker makes one for each
// workflow it runs or replays, so the occurrences count from zero each
// time.
type keyWorkflowOutbound struct {
	interceptor.WorkflowOutboundInterceptorBase
	line    *lineage
	intents map[string]intent.Fields
	seen    map[string]int // by activity type and arguments (or intent)
}

func (o *keyWorkflowOutbound) ExecuteActivity(ctx workflow.Context, activityType string, args ...any) workflow.Future {
	o.stamp(ctx, activityType, args)
	return o.Next.ExecuteActivity(ctx, activityType, args...)
}

func (o *keyWorkflowOutbound) ExecuteLocalActivity(ctx workflow.Context, activityType string, args ...any) workflow.Future {
	o.stamp(ctx, activityType, args)
	return o.Next.ExecuteLocalActivity(ctx, activityType, args...)
}

// NewContinueAsNewError hands the next run its turn of the lineage.
func (o *keyWorkflowOutbound) NewContinueAsNewError(ctx workflow.Context, wfn any, args ...any) error {
	if h := interceptor.WorkflowHeader(ctx); h != nil && o.line != nil {
		h[lineageHeader] = mustPayload(lineage{ID: o.line.ID, Turn: o.line.Turn + 1, By: o.Next.GetInfo(ctx).WorkflowExecution.RunID})
	}
	return o.Next.NewContinueAsNewError(ctx, wfn, args...)
}

// stamp panics where the workflow task should fail, visibly, rather than
// schedule a call whose key could be another's: arguments the default
// data converter cannot encode, or a call before the run started.
func (o *keyWorkflowOutbound) stamp(ctx workflow.Context, activityType string, args []any) {
	if o.line == nil {
		panic("idemflow: an activity was scheduled before the workflow's run started, so its lineage is unknown")
	}
	payloads, err := converter.GetDefaultDataConverter().ToPayloads(args...)
	if err != nil {
		panic(fmt.Sprintf("idemflow: the arguments of activity %s cannot name its call: %v", activityType, err))
	}
	digest, byIntent := argsDigest(payloads), false
	if fields, ok := o.intents[activityType]; ok {
		if digest, err = intentDigest(fields, payloads); err != nil {
			panic(fmt.Sprintf("idemflow: the intent of activity %s: %v", activityType, err))
		}
		byIntent = true
	}
	o.seen[activityType+"\x00"+digest]++
	call := callID{Lineage: o.line.ID, Turn: o.line.Turn, Args: digest, Intent: byIntent, N: o.seen[activityType+"\x00"+digest]}
	if h := interceptor.WorkflowHeader(ctx); h != nil {
		h[callHeader] = mustPayload(call)
	}
}

func mustPayload(v any) *commonpb.Payload {
	p, err := converter.GetDefaultDataConverter().ToPayload(v)
	if err != nil {
		// A struct of strings and ints always encodes as JSON.
		panic(fmt.Sprintf("idemflow: a key header: %v", err))
	}
	return p
}
