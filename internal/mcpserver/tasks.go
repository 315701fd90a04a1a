package mcpserver

// MCP Tasks: a tool call answered with a durable handle that the client
// polls. Both revisions current clients speak are served:
//
//   - the Tasks extension (io.modelcontextprotocol/tasks, SEP-2663, MCP
//     2026-07-28): a client declares it in the call's _meta
//     (io.modelcontextprotocol/clientCapabilities); the server answers
//     with the tool's result when it came within TaskWait, else with a
//     task (resultType "task"); tasks/get carries the result inline;
//   - 2025-11-25's experimental tasks: a client that sends params.task
//     always gets a task (CreateTaskResult), reads it with tasks/get and
//     its result with tasks/result.
//
// A task is the intent's operation: its ID is the record's operation ID
// (one per tenant and key, random, so that no one can guess another's),
// and every tasks/* request reads it from the gateway with the caller's
// own token. So any MCP process answers it, after any of them restarts,
// after the session that made the call is gone, and never to another
// tenant: the gateway finds another tenant's ID in none of its records.

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/idemflow/idemflow/agentclient"
	"github.com/idemflow/idemflow/internal/problem"
	"github.com/idemflow/idemflow/op"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const (
	// ExtensionTasks is the Tasks extension's identifier.
	ExtensionTasks = "io.modelcontextprotocol/tasks"
	// metaClientCapabilities is where a 2026-07-28 request declares what
	// its client supports.
	metaClientCapabilities = "io.modelcontextprotocol/clientCapabilities"
	// metaRelatedTask names the task a 2025-11-25 tasks/result belongs to.
	metaRelatedTask = "io.modelcontextprotocol/related-task"
	// metaLegacyTask is where a 2025-11-25 call's params.task is moved
	// on arrival (liftTask): the SDK's CallToolParams has no such member,
	// and would drop it.
	metaLegacyTask = "io.idemflow/task-request"
	// replaySuffix marks a task whose call found the intent's run already
	// made by another call: its result is a replay to it.
	replaySuffix = "~replay"
)

// Task defaults (Config.TaskWait, TaskTTL, TaskPollInterval).
const (
	DefaultTaskWait         = time.Second
	DefaultTaskTTL          = 24 * time.Hour
	DefaultTaskPollInterval = time.Second
)

// taskMode is how a tools/call asked for a task, if it did.
type taskMode int

const (
	noTask     taskMode = iota
	taskLegacy          // 2025-11-25: params.task
	taskExt             // 2026-07-28: the extension, declared in _meta
)

func modeOf(meta mcp.Meta) taskMode {
	if _, ok := meta[metaLegacyTask]; ok {
		return taskLegacy
	}
	if declaresTasks(meta) {
		return taskExt
	}
	return noTask
}

func declaresTasks(meta mcp.Meta) bool {
	caps, _ := meta[metaClientCapabilities].(map[string]any)
	exts, _ := caps["extensions"].(map[string]any)
	_, ok := exts[ExtensionTasks]
	return ok
}

// taskSlot carries, from a tool's handler back to the tasks middleware,
// what a task-mode call came to: its operation, when it has one, or the
// task that names its request, when the gateway gave no answer within the
// wait.
type taskSlot struct {
	mode        taskMode
	operationID string
	requestTask string
	replayed    bool
	pending     bool
}

type slotKey struct{}

// taskID names a call's task: the operation, and whether its answer is a
// replay to this call.
func taskID(operationID string, replayed bool) string {
	if replayed {
		return operationID + replaySuffix
	}
	return operationID
}

func parseTaskID(id string) (operationID string, replayed bool) {
	op, replayed := strings.CutSuffix(id, replaySuffix)
	return op, replayed
}

// TaskSlack is how long past TaskWait a task-mode call may take to be
// answered: the gateway's 202 comes at TaskWait, and is read within it.
const TaskSlack = 500 * time.Millisecond

type submitted struct {
	res     agentclient.Result
	pending *agentclient.Pending
	err     error
}

// submit is a task-mode call's path to the gateway: the answer if it comes
// within TaskWait, else the operation that will hold it, noted in the
// slot. A gateway that gives no answer by TaskWait and TaskSlack (hung,
// partitioned) does not hold the caller: it gets a task that names the
// request itself (requestTaskID), while this process goes on sending the
// call, for up to CallTimeout, and any process that reads the task sends
// it again under its key. Only a call the gateway refused has no task.
func (t tools) submit(ctx context.Context, req *mcp.CallToolRequest, slot *taskSlot, in agentclient.Intent) (*mcp.CallToolResult, Result, error) {
	c := t.client(req)
	c.Wait = t.cfg.TaskWait
	// One call, however it is sent: a request task's reader sends it
	// again as the same call, which is told it ran the intent.
	in.Origin = uuid.NewString()
	// The call goes on past the caller's wait: the caller holds a task,
	// and the intent is sent until the gateway records it.
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.cfg.CallTimeout)
	done := make(chan submitted, 1)
	go func() {
		defer cancel()
		res, pending, err := c.Submit(bg, in)
		done <- submitted{res, pending, err}
	}()
	timer := time.NewTimer(t.cfg.TaskWait + TaskSlack)
	defer timer.Stop()
	requestTask := func() bool {
		id, ok := requestTaskID(tenantOf(req.GetExtra()), in, time.Now())
		if ok {
			slot.requestTask, slot.pending = id, true
		}
		return ok
	}
	var got submitted
	select {
	case got = <-done:
	case <-timer.C:
		if requestTask() {
			return nil, Result{}, nil
		}
		got = <-done // a request too large to name: wait for the gateway
	case <-ctx.Done():
		return nil, Result{}, explain(in.Key, ctx.Err())
	}
	var pe *agentclient.PendingError
	switch {
	case got.pending != nil:
		slot.operationID, slot.replayed, slot.pending = got.pending.OperationID, !got.pending.Owner, true
		return nil, Result{}, nil
	case errors.As(got.err, &pe):
		// The gateway named the call's operation, then gave no final
		// answer: its task.
		slot.operationID, slot.replayed, slot.pending = pe.OperationID, !pe.Owner, true
		return nil, Result{}, nil
	case errors.Is(got.err, context.DeadlineExceeded) && requestTask():
		// Sent until no retry fitted in CallTimeout, with no answer (a
		// partition that cuts every answer ends it before the timer):
		// the outcome is unknown, and the task that names the request
		// finds it, never an error in its place.
		return nil, Result{}, nil
	case got.err != nil:
		return nil, Result{}, explain(in.Key, got.err)
	}
	slot.operationID, slot.replayed = got.res.OperationID, got.res.Replayed
	return result(got.res)
}

// requestTaskPrefix marks a task that names its call's request, not an
// operation: the gateway had given no answer when the caller's wait ended.
const requestTaskPrefix = "req."

// maxRequestTaskID bounds such a task's ID; a larger request waits for the
// gateway as before.
const maxRequestTaskID = 16 << 10

// requestTask is what a request task's ID carries: enough to send the call
// again under its key, the tenant it belongs to, and when it was made.
type requestTask struct {
	Tenant   string          `json:"t"`
	Key      string          `json:"k"`
	Path     string          `json:"p"`
	Body     json.RawMessage `json:"b"`
	ByIntent bool            `json:"i,omitempty"`
	Origin   string          `json:"o,omitempty"`
	Created  int64           `json:"c"` // Unix milliseconds
}

func requestTaskID(tenant string, in agentclient.Intent, now time.Time) (string, bool) {
	b, err := json.Marshal(requestTask{Tenant: tenant, Key: in.Key, Path: in.Path, Body: in.Body, ByIntent: in.ByIntent, Origin: in.Origin, Created: now.UnixMilli()})
	if err != nil {
		return "", false
	}
	id := requestTaskPrefix + base64.RawURLEncoding.EncodeToString(b)
	return id, len(id) <= maxRequestTaskID
}

func parseRequestTask(id string) (requestTask, bool) {
	enc, ok := strings.CutPrefix(id, requestTaskPrefix)
	if !ok {
		return requestTask{}, false
	}
	var rt requestTask
	b, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil || json.Unmarshal(b, &rt) != nil || rt.Key == "" || rt.Path == "" {
		return requestTask{}, false
	}
	return rt, true
}

// unansweredTask is request task id, made at created, while the gateway
// has not answered its call.
func (t tools) unansweredTask(id string, created time.Time) task {
	return task{ID: id, Status: "working", CreatedAt: created, UpdatedAt: created, TTL: t.cfg.TaskTTL, PollInterval: t.cfg.TaskPollInterval,
		Message: "idemflow's gateway has not answered yet; the call is sent again under its key, and its effect happens at most once"}
}

// tenantOf is the caller's tenant over HTTP (the verified token's); over
// stdio every request is the configured token's, and the tenant is "".
func tenantOf(extra *mcp.RequestExtra) string {
	if extra == nil || extra.TokenInfo == nil {
		return ""
	}
	return extra.TokenInfo.UserID
}

// readRequestTask sends a request task's call again under its key, within
// TaskWait: the gateway's record then answers it as any task (an
// operation's), and a gateway that still gives no answer leaves it
// working. Another tenant's task is not found: its call is never sent.
func (t tools) readRequestTask(ctx context.Context, extra *mcp.RequestExtra, id string, rt requestTask) (task, error) {
	if rt.Tenant != tenantOf(extra) {
		return task{}, invalidParams("Failed to retrieve task: Task not found")
	}
	created := time.UnixMilli(rt.Created)
	if time.Since(created) > t.cfg.TaskTTL {
		return task{}, invalidParams("Failed to retrieve task: Task has expired")
	}
	c := t.clientFor(extra)
	sctx, cancel := context.WithTimeout(ctx, t.cfg.TaskWait)
	defer cancel()
	res, pending, err := c.Submit(sctx, agentclient.Intent{Key: rt.Key, Method: http.MethodPost, Path: rt.Path, Body: rt.Body, ByIntent: rt.ByIntent, Origin: rt.Origin})
	switch {
	case pending != nil:
		tk, err := t.readTask(ctx, extra, taskID(pending.OperationID, !pending.Owner))
		tk.ID = id
		return tk, err
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		return t.unansweredTask(id, created), nil
	}
	tk := task{ID: id, Status: "completed", CreatedAt: created, UpdatedAt: time.Now(), TTL: t.cfg.TaskTTL, PollInterval: t.cfg.TaskPollInterval, operationID: res.OperationID}
	if err != nil {
		tk.Result, err = toolResult(nil, Result{}, explain(rt.Key, err))
	} else {
		tk.Result, err = toolResult(result(res))
	}
	return tk, err
}

// Task is a task's state as both revisions carry it; marshal writes the
// revision's own member names.
type task struct {
	ID           string
	Status       string // working, completed or cancelled
	Message      string
	CreatedAt    time.Time
	UpdatedAt    time.Time
	TTL          time.Duration
	PollInterval time.Duration
	// Result is the tool's result, when completed.
	Result *mcp.CallToolResult
	// operationID is the intent's operation, once the gateway named it.
	operationID string
}

// wire is the task's JSON members in a revision's names: the
// extension's (ttlMs, pollIntervalMs, the result inline), or 2025-11-25's
// (ttl, pollInterval; the result comes from tasks/result).
func (tk task) wire(mode taskMode) map[string]any {
	m := map[string]any{
		"taskId": tk.ID, "status": tk.Status,
		"createdAt": tk.CreatedAt.UTC().Format(time.RFC3339Nano), "lastUpdatedAt": tk.UpdatedAt.UTC().Format(time.RFC3339Nano),
	}
	if tk.Message != "" {
		m["statusMessage"] = tk.Message
	}
	if mode == taskExt {
		m["ttlMs"], m["pollIntervalMs"] = tk.TTL.Milliseconds(), tk.PollInterval.Milliseconds()
		if tk.Status == "completed" && tk.Result != nil {
			// The result the call would have returned under 2026-07-28,
			// whose every result names its type.
			if r, err := asMap(tk.Result, nil); err == nil {
				r["resultType"] = "complete"
				m["result"] = r
			} else {
				m["result"] = tk.Result
			}
		}
	} else {
		m["ttl"], m["pollInterval"] = tk.TTL.Milliseconds(), tk.PollInterval.Milliseconds()
	}
	return m
}

// rawResult is a result the SDK has no type for (a task, a capability it
// does not know), written as given.
type rawResult struct {
	mcp.ResultBase
	raw json.RawMessage
}

func (r *rawResult) MarshalJSON() ([]byte, error) { return r.raw, nil }

func raw(v any) (*rawResult, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return &rawResult{raw: b}, nil
}

// taskParams are the tasks/* methods' params. TaskID is read as any JSON
// value, so that one of another type gets an error in the protocol's words
// (serveTask), not the decoder's.
type taskParams struct {
	mcp.ParamsBase
	TaskID json.RawMessage `json:"taskId,omitempty"`
}

// taskMethods are the methods named tasks/*, served or refused here.
var taskMethods = []string{"tasks/get", "tasks/result", "tasks/cancel", "tasks/update", "tasks/list"}

// codeMissingCapability is 2026-07-28's MissingRequiredClientCapabilityError
// (SEP-2575): the request needs a capability the client did not declare.
const codeMissingCapability = -32021

// requiresTasks is that error's data, as the revision's schema requires
// it: the client capabilities the request needs.
const requiresTasks = `{"requiredCapabilities":{"extensions":{"` + ExtensionTasks + `":{}}}}`

// refuseTaskMethod is the error a tasks/* request gets before its task is
// read, if any: under 2026-07-28 the extension's methods need the
// extension declared, tasks/result no longer exists (tasks/get carries
// the result) and tasks/update has nothing to update (idemflow's tasks
// never wait for input); 2025-11-25 has neither tasks/update nor, here,
// tasks/list (a task is read by its ID).
func refuseTaskMethod(method string, modern, declared bool) *jsonrpc.Error {
	switch {
	case method == "tasks/list":
		return &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "Method not found: tasks/list is not served; read a task by its taskId (tasks/get)"}
	case modern && method == "tasks/result":
		return &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "Method not found: tasks/result was removed in 2026-07-28; tasks/get carries a completed task's result"}
	case modern && !declared:
		return &jsonrpc.Error{Code: codeMissingCapability, Message: "Missing required client capability: " + method +
			" needs the Tasks extension (" + ExtensionTasks + ") declared in _meta " + metaClientCapabilities, Data: json.RawMessage(requiresTasks)}
	case method == "tasks/update" && !modern:
		return &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "Method not found: tasks/update is the Tasks extension's (2026-07-28)"}
	case method == "tasks/update":
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "idemflow's tasks never wait for input: there is nothing to update"}
	}
	return nil
}

// invalidParams is the JSON-RPC error both revisions give for an unknown
// or expired task.
func invalidParams(msg string) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: msg}
}

// addTasks serves tasks on s: the methods, the capability each revision
// reads, each side-effecting tool's taskSupport, and the tools/call path.
func addTasks(s *mcp.Server, t tools) {
	for _, m := range taskMethods {
		// The handlers only declare the methods, so that the SDK decodes
		// their params; the middleware answers them, since it alone sees
		// the request's bearer token.
		if err := mcp.AddReceivingCustomMethod(s, m, func(context.Context, *mcp.ServerSession, *taskParams) (*rawResult, error) {
			return nil, errors.New("mcpserver: a tasks method reached its placeholder")
		}); err != nil {
			panic(err)
		}
	}
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			switch method {
			case "initialize":
				return withLegacyCapability(next(ctx, method, req))
			case "tools/list":
				return forRevision(req)(t.withTaskSupport(next(ctx, method, req)))
			case "tools/call":
				return forRevision(req)(t.callAsTask(ctx, next, method, req))
			}
			if slices.Contains(taskMethods, method) {
				return forRevision(req)(t.serveTask(ctx, method, req))
			}
			return next(ctx, method, req)
		}
	})
}

// forRevision completes a result this package wrote as raw JSON for the
// revision of the request it answers. A 2026-07-28 request (one that
// names the version in its _meta) gets resultType "complete" where the
// result has none: that revision's servers MUST send it, and its clients
// refuse a result without it. The SDK adds it to its own result types,
// but a raw result is opaque to it.
func forRevision(req mcp.Request) func(mcp.Result, error) (mcp.Result, error) {
	return func(res mcp.Result, err error) (mcp.Result, error) {
		rr, ok := res.(*rawResult)
		if err != nil || !ok || !newRevision(req) {
			return res, err
		}
		m, err := asMap(rr, nil)
		if err != nil {
			return nil, err
		}
		if _, ok := m["resultType"]; ok {
			return res, nil
		}
		m["resultType"] = "complete"
		return raw(m)
	}
}

// modernRevision is MCP 2026-07-28, the first sessionless revision, whose
// requests name it in their _meta (and over HTTP in a header).
const modernRevision = "2026-07-28"

// newRevision reports whether req follows MCP 2026-07-28 or later.
func newRevision(req mcp.Request) bool {
	p := req.GetParams()
	if v := reflect.ValueOf(p); !v.IsValid() || v.Kind() == reflect.Pointer && v.IsNil() {
		return false // a request without params
	}
	v, _ := p.GetMeta()[mcp.MetaKeyProtocolVersion].(string)
	return v >= modernRevision
}

// callAsTask runs a tools/call; one that asked for a task and has no
// final answer yet is answered with one.
func (t tools) callAsTask(ctx context.Context, next mcp.MethodHandler, method string, req mcp.Request) (mcp.Result, error) {
	call, ok := req.(*mcp.CallToolRequest)
	if !ok || call.Params == nil {
		return next(ctx, method, req)
	}
	mode := modeOf(call.Params.Meta)
	support := t.taskSupport(call.Params.Name)
	switch {
	case mode == noTask && support == op.TasksRequired && newRevision(req):
		return nil, onlyAsATask(call.Params.Name)
	case mode == noTask && support == op.TasksRequired:
		// 2025-11-25: a required tool called without a task.
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "tool " + call.Params.Name + " must be called as a task (its taskSupport is required)"}
	case support == op.TasksForbidden:
		delete(call.Params.Meta, metaLegacyTask)
		return next(ctx, method, req) // answered inline, as its taskSupport says
	case mode == noTask:
		return next(ctx, method, req)
	}
	delete(call.Params.Meta, metaLegacyTask)
	slot := &taskSlot{mode: mode}
	res, err := next(context.WithValue(ctx, slotKey{}, slot), method, req)
	if err != nil {
		return nil, err
	}
	if mode == taskExt && !slot.pending && (support != op.TasksRequired || slot.operationID == "") {
		return res, nil // the answer came within the wait: no task (but for a tool that always makes one)
	}
	var tk task
	switch {
	case slot.requestTask != "":
		rt, _ := parseRequestTask(slot.requestTask)
		tk = t.unansweredTask(slot.requestTask, time.UnixMilli(rt.Created))
	case slot.operationID == "":
		// Only 2025-11-25 comes here (the extension's pending call has
		// its operation). It wants a task for every such call, and there is
		// none: nothing was recorded (refused arguments, a reused key, or
		// a request too large to name in a task whose gateway was out of
		// reach for the whole CallTimeout). The tool's words, as an error.
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "no task was created: " + text(res)}
	default:
		if tk, err = t.readTask(ctx, call.GetExtra(), taskID(slot.operationID, slot.replayed)); err != nil {
			return nil, err
		}
	}
	w := tk.wire(mode)
	if mode == taskExt {
		w["resultType"] = "task"
		delete(w, "result")
		return raw(w)
	}
	return raw(map[string]any{"task": w})
}

func text(res mcp.Result) string {
	r, ok := res.(*mcp.CallToolResult)
	if !ok {
		return ""
	}
	var parts []string
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, " ")
}

// serveTask answers tasks/get, tasks/result and tasks/cancel.
func (t tools) serveTask(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
	p, ok := req.GetParams().(*taskParams)
	if !ok {
		p = &taskParams{}
	}
	if e := refuseTaskMethod(method, newRevision(req), declaresTasks(p.Meta)); e != nil {
		return nil, e
	}
	var id string
	if err := json.Unmarshal(p.TaskID, &id); err != nil || id == "" {
		return nil, invalidParams("taskId is required, as a string")
	}
	mode := taskLegacy
	if declaresTasks(p.Meta) {
		mode = taskExt
	}
	extra := req.GetExtra()
	switch method {
	case "tasks/cancel":
		return t.cancelTask(ctx, extra, id, mode)
	case "tasks/result":
		// 2025-11-25: block until the task ends, then give its result.
		for {
			tk, err := t.readTask(ctx, extra, id)
			if err != nil {
				return nil, err
			}
			if tk.Status != "working" {
				if tk.Result == nil {
					return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the task was " + tk.Status + ": " + tk.Message}
				}
				out := *tk.Result
				out.Meta = mcp.Meta{metaRelatedTask: map[string]any{"taskId": tk.ID}}
				return &out, nil
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(t.cfg.TaskPollInterval):
			}
		}
	}
	tk, err := t.readTask(ctx, extra, id)
	if err != nil {
		return nil, err
	}
	w := tk.wire(mode)
	if mode == taskExt {
		w["resultType"] = "complete"
	}
	return raw(w)
}

// readTask reads a task's operation with the caller's token: working
// while the record is PROCESSING, else completed with exactly the result
// the synchronous call would have given.
func (t tools) readTask(ctx context.Context, extra *mcp.RequestExtra, id string) (task, error) {
	if rt, ok := parseRequestTask(id); ok {
		return t.readRequestTask(ctx, extra, id, rt)
	}
	opID, _ := parseTaskID(id)
	op, err := t.clientFor(extra).ReadOperation(ctx, opID)
	if errors.Is(err, agentclient.ErrNotFound) {
		return task{}, invalidParams("Failed to retrieve task: Task not found")
	}
	if err != nil {
		return task{}, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "could not read the task: " + err.Error()}
	}
	return t.taskOf(id, op)
}

// taskOf is task id's state, from its operation.
func (t tools) taskOf(id string, op agentclient.Operation) (task, error) {
	opID, replayed := parseTaskID(id)
	tk := task{ID: id, Status: "working", CreatedAt: op.CreatedAt, UpdatedAt: op.UpdatedAt, TTL: t.cfg.TaskTTL, PollInterval: t.cfg.TaskPollInterval,
		Message: "the call is running; its effect happens at most once", operationID: opID}
	if time.Since(op.CreatedAt) > t.cfg.TaskTTL {
		return task{}, invalidParams("Failed to retrieve task: Task has expired")
	}
	if !op.Done {
		return tk, nil
	}
	tk.Status, tk.Message = "completed", ""
	var pe *agentclient.ProblemError
	if errors.As(op.Err, &pe) && pe.Problem.Type == "/problems/canceled-by-operator" {
		tk.Status, tk.Message = "cancelled", "the call was cancelled before it took effect: nothing was done"
		return tk, nil
	}
	var err error
	if op.Err != nil {
		tk.Result, err = toolResult(nil, Result{}, explain(op.IdempotencyKey, op.Err))
	} else {
		r := op.Result
		r.Replayed = replayed
		tk.Result, err = toolResult(result(r))
	}
	return tk, err
}

// cancelTask does what an operator's cancel does: the run stops, and
// settles as FAILED (nothing done) or, when its effect had already
// committed, SUCCESS. A task that has ended is not changed; 2025-11-25
// says so with an error, the extension with its empty acknowledgement
// (the task's next tasks/get shows what happened).
func (t tools) cancelTask(ctx context.Context, extra *mcp.RequestExtra, id string, mode taskMode) (mcp.Result, error) {
	tk, err := t.readTask(ctx, extra, id)
	if err != nil {
		return nil, err
	}
	if tk.Status != "working" {
		if mode == taskLegacy {
			return nil, invalidParams("Cannot cancel task: already in terminal status " + tk.Status + describeEnd(tk))
		}
		return raw(map[string]any{"resultType": "complete"})
	}
	if tk.operationID == "" {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "could not cancel the task: idemflow's gateway has not answered yet; cancel again"}
	}
	if err := t.clientFor(extra).CancelOperation(ctx, tk.operationID); err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "could not cancel the task: " + err.Error()}
	}
	if mode == taskExt {
		return raw(map[string]any{"resultType": "complete"})
	}
	// 2025-11-25 answers with the task: it settles as the run does.
	tk, err = t.readTask(ctx, extra, id)
	if err != nil {
		return nil, err
	}
	return raw(tk.wire(mode))
}

func describeEnd(tk task) string {
	if tk.Status == "completed" && tk.Result != nil && !tk.Result.IsError {
		return ": the call had already taken effect"
	}
	return ""
}

// withLegacyCapability adds 2025-11-25's tasks capability to initialize's
// result: the SDK's ServerCapabilities has no member for it.
func withLegacyCapability(res mcp.Result, err error) (mcp.Result, error) {
	m, err := asMap(res, err)
	if err != nil {
		return res, err
	}
	caps, _ := m["capabilities"].(map[string]any)
	if caps == nil {
		caps = map[string]any{}
		m["capabilities"] = caps
	}
	caps["tasks"] = map[string]any{"cancel": map[string]any{}, "requests": map[string]any{"tools": map[string]any{"call": map[string]any{}}}}
	return raw(m)
}

// asMap is a result's JSON members, its numbers kept as written.
func asMap(res mcp.Result, err error) (map[string]any, error) {
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(res)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		return nil, err
	}
	return m, nil
}

// withTaskSupport marks each side-effecting tool's taskSupport as its
// operation declares it (op.Spec.Tasks): a 2025-11-25 client asks for a
// task only for a tool that takes them. A tool without one (forbidden,
// get_operation) takes none.
func (t tools) withTaskSupport(res mcp.Result, err error) (mcp.Result, error) {
	m, err := asMap(res, err)
	if err != nil {
		return res, err
	}
	list, _ := m["tools"].([]any)
	for _, tl := range list {
		tool, ok := tl.(map[string]any)
		if !ok {
			continue
		}
		name, _ := tool["name"].(string)
		if support := t.taskSupport(name); support != op.TasksForbidden {
			tool["execution"] = map[string]any{"taskSupport": string(support)}
		}
	}
	return raw(m)
}

// taskSupport is how tool name takes tasks: its operation's declaration;
// a tool of no operation (get_operation) takes none.
func (t tools) taskSupport(name string) op.TaskSupport {
	return taskSupportIn(t.cfg.Operations, name)
}

func taskSupportIn(ops []*op.Operation, name string) op.TaskSupport {
	for _, o := range ops {
		if o.Tool == name {
			return cmp.Or(o.Tasks, op.TasksOptional)
		}
	}
	return op.TasksForbidden
}

// liftTask moves a 2025-11-25 tools/call's params.task into its _meta
// (metaLegacyTask), where the tools/call path finds it.
func liftTask(msg jsonrpc.Message) jsonrpc.Message {
	req, ok := msg.(*jsonrpc.Request)
	if !ok || req.Method != "tools/call" || len(req.Params) == 0 {
		return msg
	}
	var params map[string]json.RawMessage
	if json.Unmarshal(req.Params, &params) != nil {
		return msg
	}
	tk, ok := params["task"]
	if !ok {
		return msg
	}
	var meta map[string]json.RawMessage
	if m, ok := params["_meta"]; ok && json.Unmarshal(m, &meta) != nil {
		return msg
	}
	if meta == nil {
		meta = map[string]json.RawMessage{}
	}
	meta[metaLegacyTask] = tk
	delete(params, "task")
	b, err := json.Marshal(meta)
	if err != nil {
		return msg
	}
	params["_meta"] = b
	if b, err = json.Marshal(params); err != nil {
		return msg
	}
	out := *req
	out.Params = b
	return &out
}

// WithTasks wraps a transport (stdio) so that 2025-11-25 task requests
// reach the server (liftTask).
func WithTasks(t mcp.Transport) mcp.Transport { return taskTransport{t} }

type taskTransport struct{ mcp.Transport }

func (t taskTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return taskConn{c}, nil
}

type taskConn struct{ mcp.Connection }

func (c taskConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if err != nil {
		return msg, err
	}
	return liftTask(msg), nil
}

// maxBody bounds an MCP message read to lift its task.
const maxBody = 1 << 20

// liftTaskHTTP is liftTask for a streamable HTTP POST's body, to a
// server of ops.
func liftTaskHTTP(next http.Handler, ops []*op.Operation) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Body == nil {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			deny(w, http.StatusRequestEntityTooLarge, problem.TypeBodyTooLarge, "an MCP message is at most 1 MiB")
			return
		}
		if r.Header.Get("Mcp-Protocol-Version") >= modernRevision {
			if resp, ok := refusedOverHTTP(r.Header, body, ops); ok {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusBadRequest)
				_, _ = w.Write(resp)
				return
			}
		}
		body = liftTaskBody(body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		next.ServeHTTP(w, r)
	})
}

// refusedOverHTTP is the JSON-RPC error response, answered with HTTP
// 400, that a 2026-07-28 request gets before the SDK reads it, if body is
// one that gets one:
//   - a tasks/* request whose Mcp-Name header names another task than its
//     params (-32020 HeaderMismatch, SEP-2243; the SDK checks the header
//     for the methods it knows, and a request without it is taken as its
//     params say);
//   - a tasks/* request, or a call of a tool that runs only as a task,
//     from a client that did not declare the extension (-32021, SEP-2575:
//     over HTTP, a 400).
func refusedOverHTTP(h http.Header, body []byte, ops []*op.Operation) ([]byte, bool) {
	if !bytes.Contains(body, []byte(`"tasks/`)) && !bytes.Contains(body, []byte(`"tools/call"`)) {
		return nil, false
	}
	msg, err := jsonrpc.DecodeMessage(body)
	req, ok := msg.(*jsonrpc.Request)
	if err != nil || !ok || !req.IsCall() {
		return nil, false
	}
	var p struct {
		Name   string   `json:"name"`
		TaskID any      `json:"taskId"`
		Meta   mcp.Meta `json:"_meta"`
	}
	_ = json.Unmarshal(req.Params, &p)
	var e *jsonrpc.Error
	switch {
	case slices.Contains(taskMethods, req.Method):
		if name := h.Get("Mcp-Name"); name != "" && p.TaskID != name {
			e = &jsonrpc.Error{Code: mcp.CodeHeaderMismatch, Message: "header mismatch: the Mcp-Name header does not name the request's taskId"}
		} else if e = refuseTaskMethod(req.Method, true, declaresTasks(p.Meta)); e != nil && e.Code != codeMissingCapability {
			e = nil // refused as any request is, by the SDK's path
		}
	case req.Method == "tools/call" && taskSupportIn(ops, p.Name) == op.TasksRequired && !declaresTasks(p.Meta):
		e = onlyAsATask(p.Name)
	}
	if e == nil {
		return nil, false
	}
	out, err := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: req.ID, Error: e})
	return out, err == nil
}

// onlyAsATask is 2026-07-28's error for a call of a tool whose
// taskSupport is required from a client without the extension.
func onlyAsATask(tool string) *jsonrpc.Error {
	return &jsonrpc.Error{Code: codeMissingCapability, Message: "tool " + tool + " runs only as a task: declare the " + ExtensionTasks + " extension",
		Data: json.RawMessage(requiresTasks)}
}

// liftTaskBody is liftTask for a message's bytes; a body it leaves as it
// is comes back unchanged. Only one that names a task is decoded here:
// every other is decoded once, by the SDK.
func liftTaskBody(body []byte) []byte {
	if !bytes.Contains(body, []byte(`"task"`)) {
		return body
	}
	msg, err := jsonrpc.DecodeMessage(body)
	if err != nil {
		return body
	}
	lifted := liftTask(msg)
	if lifted == msg {
		return body
	}
	b, err := jsonrpc.EncodeMessage(lifted)
	if err != nil {
		return body
	}
	return b
}
