// Package mcpserver exposes idemflow as MCP tools. Every tool call goes
// through the HTTP gateway with the Go client, so a model gets exactly the
// guards and answers an HTTP agent gets.
package mcpserver

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/hashicorp/golang-lru/v2/expirable"
	"github.com/idemflow/idemflow/agentclient"
	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/internal/apispec"
	"github.com/idemflow/idemflow/internal/ijson"
	"github.com/idemflow/idemflow/internal/oauth"
	"github.com/idemflow/idemflow/internal/problem"
	"github.com/idemflow/idemflow/op"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/propagation"
)

// keyRule is repeated in every side-effecting tool's description: a model
// reads descriptions, and the key is the part it must get right.
const keyRule = " idempotency_key: make it ONCE for this intent (e.g. a UUID) before the first call, " +
	"and send the SAME key with the SAME arguments on every retry (after a timeout, an error or a restart): " +
	"the first result is then returned again, marked replayed, and the action happens at most once. " +
	"Use a NEW key only for a NEW intent. Reusing a key with different arguments is refused (conflict)."

// Config says where the gateway is.
type Config struct {
	BaseURL string
	// Token is used when a request carries none (stdio).
	Token string
	// CallTimeout bounds one tool call, retries included (default 60 s):
	// past it the model reads NO ANSWER YET, which says to call again
	// under the same key (`idemflow mcp --call-wait`).
	CallTimeout time.Duration
	HTTP        *http.Client
	// TaskWait is how long a call whose client takes tasks waits for
	// its answer before it is answered with a task (DefaultTaskWait;
	// whole seconds, the gateway's Prefer: wait).
	TaskWait time.Duration
	// TaskTTL is how long a task can be read, from its intent's first
	// call (DefaultTaskTTL; within the records' retention, which keeps
	// the answer).
	TaskTTL time.Duration
	// TaskPollInterval is the pollIntervalMs a task states
	// (DefaultTaskPollInterval).
	TaskPollInterval time.Duration
	// Operations are the operations the gateway serves, each a tool of
	// its own: idemflow's built-ins and the declared ones (a process's
	// list of operations, as the gateway has it).
	Operations []*op.Operation
}

// Result is what a tool returns.
type Result struct {
	HTTPStatus int  `json:"http_status" jsonschema:"the gateway's HTTP status"`
	Replayed   bool `json:"replayed" jsonschema:"true when this answer was stored by an earlier call with the same idempotency_key"`
	// Result is the resource the gateway answered with.
	Result map[string]any `json:"result" jsonschema:"the answer: the ticket, the order, a declared operation's result, or the operation"`
	// Differed is the gateway's Idempotency-Differed on a replay of a
	// call keyed by its intent fields.
	Differed []string `json:"differed,omitempty" jsonschema:"on a replay of a call keyed by its intent fields: the arguments this call sent that differ from the first answer, which holds what was made"`
	// Note tells the model, beside Differed, that its new wording was not
	// saved (the clients' tool answers say the same).
	Note string `json:"note,omitempty" jsonschema:"beside differed: the result is what was made then"`
}

// differedNote is Result.Note's text, the clients' DIFFERED_NOTE.
const differedNote = "this intent was already done: the result is what was made then, not the arguments of this call"

// OperationArgs are get_operation's arguments (every other tool's are a
// declaration's request, decoded as JSON members).
type OperationArgs struct {
	OperationID string `json:"operation_id" jsonschema:"the operation ID from a 202 or 409 answer"`
}

// New returns an MCP server with idemflow's tools.
func New(cfg Config) *mcp.Server {
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = 60 * time.Second
	}
	cfg.TaskWait = max(cmp.Or(cfg.TaskWait, DefaultTaskWait), time.Second)
	cfg.TaskTTL = cmp.Or(cfg.TaskTTL, DefaultTaskTTL)
	cfg.TaskPollInterval = cmp.Or(cfg.TaskPollInterval, DefaultTaskPollInterval)
	// prompts/list is served (with no prompts), and a server that serves
	// it declares it (SEP-2575's discover result).
	caps := &mcp.ServerCapabilities{Extensions: map[string]any{ExtensionTasks: map[string]any{}}, Prompts: &mcp.PromptCapabilities{}}
	s := mcp.NewServer(&mcp.Implementation{Name: "idemflow", Version: "1.0.0"}, &mcp.ServerOptions{Instructions: instructions(cfg.Operations), Capabilities: caps})
	t := tools{cfg: cfg}
	addTasks(s, t)
	for _, o := range cfg.Operations {
		addTool(s, &mcp.Tool{Name: o.Tool, Description: o.Description + keyRule, InputSchema: operationSchema(o),
			Meta: mcp.Meta{MetaIntent: intentOf(o)}}, t.operation(o))
	}
	addTool(s, &mcp.Tool{Name: "get_operation", Description: "Report an operation's status (processing, succeeded, failed) and, when done, its result. Read-only.",
		InputSchema: schemaOf[OperationArgs]()}, t.getOperation)
	return s
}

// addTool adds a tool whose arguments strict alone decodes, and the
// gateway validates, naming every field that breaks a rule, as it does for
// HTTP. The SDK's own validation (mcp.AddTool's) reads every number as a
// double, so it would judge 9007199254740992 where 9007199254740993 was
// sent, and words its errors for no model.
func addTool[In any](s *mcp.Server, tool *mcp.Tool, h mcp.ToolHandlerFor[In, Result]) {
	tool.OutputSchema = schemaOf[Result]()
	h = strict(h)
	s.AddTool(tool, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var zero In
		return toolResult(h(ctx, req, zero))
	})
}

// toolResult is what a tool's call answers: err's words as an error
// result, or out, as structured content and as its JSON text, on res
// (a new result when nil). A task's result is the same (readTask).
func toolResult(res *mcp.CallToolResult, out Result, err error) (*mcp.CallToolResult, error) {
	if err != nil {
		failed := cmp.Or(res, &mcp.CallToolResult{})
		failed.SetError(err)
		return failed, nil
	}
	if res == nil {
		res = &mcp.CallToolResult{}
	}
	raw, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("marshal the result: %w", err)
	}
	res.StructuredContent = json.RawMessage(raw)
	res.Content = []mcp.Content{&mcp.TextContent{Text: string(raw)}}
	return res, nil
}

func schemaOf[T any]() *jsonschema.Schema {
	schema, err := jsonschema.For[T](nil)
	if err != nil {
		panic(fmt.Errorf("mcpserver: the schema of %T: %w", *new(T), err))
	}
	return schema
}

// operationSchema is a declared operation's input schema: its request's
// (its path parameters included), beside idempotency_key.
func operationSchema(o *op.Operation) *jsonschema.Schema {
	body := o.RequestSchema()
	props, _ := body["properties"].(map[string]any)
	if props == nil {
		props = map[string]any{}
	}
	required, _ := body["required"].([]any)
	props["idempotency_key"] = apispec.KeySchema("the intent's key; see the tool description")
	body["properties"], body["required"] = props, append([]any{"idempotency_key"}, required...)
	raw, err := json.Marshal(body)
	if err != nil {
		panic(err)
	}
	var schema jsonschema.Schema
	if err := json.Unmarshal(raw, &schema); err != nil {
		panic(fmt.Errorf("mcpserver: the %s schema: %w", o.Name, err))
	}
	return &schema
}

// strict decodes a tool's arguments again, from the raw JSON the client
// sent, by the rules HTTP bodies follow (ijson): the SDK's decoding lets
// the last of two members with one name win, so "title" sent twice would
// be a different intent on MCP than on HTTP.
func strict[In any](h mcp.ToolHandlerFor[In, Result]) mcp.ToolHandlerFor[In, Result] {
	return func(ctx context.Context, req *mcp.CallToolRequest, _ In) (*mcp.CallToolResult, Result, error) {
		var in In
		if err := ijson.Decode(req.Params.Arguments, &in); err != nil {
			return nil, Result{}, fmt.Errorf("INVALID ARGUMENTS, nothing was recorded; fix them and call again with the same key: %w", err)
		}
		return h(ctx, req, in)
	}
}

type tools struct{ cfg Config }

func (t tools) client(req *mcp.CallToolRequest) *agentclient.Client {
	if req == nil {
		return t.clientFor(nil)
	}
	return t.clientFor(req.Extra)
}

// clientFor is a gateway client with the request's own bearer token (over
// HTTP), or the configured one (stdio).
func (t tools) clientFor(extra *mcp.RequestExtra) *agentclient.Client {
	token := t.cfg.Token
	if extra != nil && extra.TokenInfo != nil {
		if a, ok := extra.TokenInfo.Extra["acting"].(acting); ok {
			return &agentclient.Client{BaseURL: t.cfg.BaseURL, Token: a.secret, HTTP: a.client(t.cfg.HTTP)}
		}
		if tok, ok := extra.TokenInfo.Extra["token"].(string); ok && tok != "" {
			token = tok
		}
	}
	return &agentclient.Client{BaseURL: t.cfg.BaseURL, Token: token, HTTP: t.cfg.HTTP}
}

func (t tools) call(ctx context.Context, req *mcp.CallToolRequest, key, path string, body any, byIntent bool) (*mcp.CallToolResult, Result, error) {
	raw, err := json.Marshal(body)
	if err != nil {
		return nil, Result{}, err
	}
	ctx, cancel := context.WithTimeout(withTraceOf(ctx, req), t.callWait(req))
	defer cancel()
	in := agentclient.Intent{Key: key, Method: http.MethodPost, Path: path, Body: raw, ByIntent: byIntent}
	if slot, ok := ctx.Value(slotKey{}).(*taskSlot); ok {
		return t.submit(ctx, req, slot, in)
	}
	res, err := t.client(req).Do(ctx, in)
	var pe *agentclient.PendingError
	if errors.As(err, &pe) {
		// NO ANSWER YET, and the task that will hold the answer: a client
		// that cannot ask for a task up front (an SDK without a task
		// client) waits on this one instead of handing the model the
		// words (tasks/get, tasks/result).
		handle := &mcp.CallToolResult{Meta: mcp.Meta{metaRelatedTask: map[string]any{"taskId": taskID(pe.OperationID, !pe.Owner)}}}
		return handle, Result{}, explain(key, err)
	}
	if err != nil {
		return nil, Result{}, explain(key, err)
	}
	return result(res)
}

// MetaWait is the _meta member in which a client bounds how long a call
// waits for its final answer before it is answered NO ANSWER YET with
// the task that will hold it (milliseconds, at most CallTimeout): a
// durable client waits on the task, with its own deadline, rather than on
// one long request its transport may cut.
const MetaWait = "io.idemflow/wait-ms"

// callWait is how long a synchronous call waits: CallTimeout, or less
// where the client asked (MetaWait).
func (t tools) callWait(req *mcp.CallToolRequest) time.Duration {
	if req == nil || req.Params == nil {
		return t.cfg.CallTimeout
	}
	ms, ok := req.Params.Meta[MetaWait].(float64)
	if !ok || ms <= 0 {
		return t.cfg.CallTimeout
	}
	return min(t.cfg.CallTimeout, time.Duration(ms*float64(time.Millisecond)))
}

func result(res agentclient.Result) (*mcp.CallToolResult, Result, error) {
	out := Result{HTTPStatus: res.Status, Replayed: res.Replayed, Differed: res.Differed}
	if len(res.Differed) > 0 {
		out.Note = differedNote
	}
	if err := json.Unmarshal(res.Body, &out.Result); err != nil {
		// An HTTP tool's downstream may answer with any body: the model
		// gets it under "body", as JSON when it is JSON, else as text.
		var v any = string(res.Body)
		if json.Valid(res.Body) {
			v = json.RawMessage(res.Body)
		}
		out.Result = map[string]any{"body": v}
	}
	return nil, out, nil
}

// explain turns an error into words a model can act on. None invites the
// model to make the call again as a new one (a new key, a new intent): a
// model that reads that calls again, the duplicate idemflow prevents; it
// is told to stop and tell the user instead (clients/testdata/modeltexts.json,
// TestNoTextAfterARefusalOrAPendingAnswerInvitesANewCall).
func explain(key string, err error) error {
	var rej *agentclient.RejectedError
	switch {
	case errors.Is(err, agentclient.ErrKeyReused):
		return fmt.Errorf("CONFLICT: idempotency_key %q was already used with different arguments, so nothing was done for this call. "+
			"If you were retrying, the first call under this key is the one that counts: send its original arguments to read its answer. "+
			"Do not make this call again under another key on your own: tell the user", key)
	case errors.As(err, &rej) && rej.Code == agentclient.CodeDownstreamRejected:
		// The service's own refusal, in its own words. The record keeps
		// the key's arguments (others under it are a conflict) but is not
		// final: the same arguments under it go to the service again,
		// which may answer otherwise (a limit raised since).
		return fmt.Errorf("REJECTED by the service (HTTP %d): %s. Nothing was changed there. idempotency_key %q stays bound to these arguments: "+
			"calling again with it and the same arguments sends them to the service again, and it may answer differently. "+
			"Do not send other arguments under another key on your own: tell the user what the service said", rej.Status, clipText(rej.Body), key)
	case errors.As(err, &rej):
		msg := fmt.Sprintf("REJECTED (%s): %s. Nothing was changed", rej.Code, rej.Problem.Detail)
		if rej.CurrentState != "" {
			msg += "; the order is " + rej.CurrentState
		}
		return errors.New(msg)
	case errors.Is(err, agentclient.ErrOutcomeUnknown):
		return fmt.Errorf("OUTCOME UNKNOWN: the call may or may not have taken effect, and it will never be sent again under idempotency_key %q. "+
			"Do not make it again under another key: tell the user, who can check with the service: %w", key, err)
	case errors.Is(err, agentclient.ErrInvalidRequest):
		return fmt.Errorf("INVALID ARGUMENTS, nothing was recorded; fix them and call again with the same key: %w", err)
	case errors.Is(err, agentclient.ErrUnfinished):
		// The stored problem's detail says what is known of the effect
		// (nothing written, or a downstream call of unknown outcome that
		// a retry looks up); its type path means nothing to a model.
		var pe *agentclient.ProblemError
		detail := ""
		if errors.As(err, &pe) && pe.Problem.Detail != "" {
			detail = " (" + pe.Problem.Detail + ")"
		}
		return fmt.Errorf("NOT DONE: the call ended without a final answer%s. Call again with the SAME idempotency_key %q and the same arguments: "+
			"that runs it again, and it cannot take effect twice", detail, key)
	case errors.Is(err, context.DeadlineExceeded):
		// The words alone: what Go said of the wait ("context deadline
		// exceeded") reads to a model as a failure to work around.
		return wordsFor(err, fmt.Sprintf("NO ANSWER YET: the request may still complete. Call again with the SAME idempotency_key %q and the same arguments; it cannot run twice", key))
	}
	return err
}

// modelWords is an error whose text is written for a model, wrapping
// the error it explains for callers that test for it.
type modelWords struct {
	text string
	err  error
}

func wordsFor(err error, text string) error { return &modelWords{text: text, err: err} }
func (e *modelWords) Error() string         { return e.text }
func (e *modelWords) Unwrap() error         { return e.err }

// clipText is a downstream's answer, as a model reads it: at most 2 KiB.
func clipText(b []byte) string {
	const most = 2 << 10
	if len(b) > most {
		return strings.ToValidUTF8(string(b[:most]), "") + "…"
	}
	return string(b)
}

// operation is a declared operation's handler: its path parameters go
// into the route, and the arguments but those and the key are the body of
// its POST.
func (t tools) operation(o *op.Operation) mcp.ToolHandlerFor[map[string]json.RawMessage, Result] {
	return func(ctx context.Context, req *mcp.CallToolRequest, in map[string]json.RawMessage) (*mcp.CallToolResult, Result, error) {
		key, path := "", o.Route
		for _, name := range append([]string{"idempotency_key"}, o.PathParams...) {
			var v string
			if err := json.Unmarshal(in[name], &v); err != nil || v == "" {
				return nil, Result{}, fmt.Errorf("INVALID ARGUMENTS, nothing was recorded: %s must be a non-empty string", name)
			}
			if name == "idempotency_key" {
				key = v
			} else {
				path = strings.ReplaceAll(path, "{"+name+"}", url.PathEscape(v))
			}
			delete(in, name)
		}
		if k, ok := req.Params.Meta[MetaKey].(string); ok {
			// The client's own durable key, derived from its call's ID,
			// wins over the one the model wrote: a model asked again
			// after a crash writes a new key, the client's call ID does
			// not change.
			parsed, err := idem.ParseKey(k)
			if err != nil {
				return nil, Result{}, fmt.Errorf("INVALID _meta %s, nothing was recorded: %w", MetaKey, err)
			}
			key = parsed
		}
		byIntent, _ := req.Params.Meta[MetaFingerprint].(string)
		return t.call(ctx, req, key, path, in, byIntent == "intent")
	}
}

// withTraceOf returns ctx with the trace context an MCP client sent in
// the call's _meta (traceparent, tracestate: the OpenTelemetry convention
// for MCP), so that the gateway request the call makes (agentclient
// sends its traceparent) joins the agent's trace.
func withTraceOf(ctx context.Context, req *mcp.CallToolRequest) context.Context {
	if req == nil || req.Params == nil {
		return ctx
	}
	carrier := propagation.MapCarrier{}
	for _, k := range []string{"traceparent", "tracestate"} {
		if v, ok := req.Params.Meta[k].(string); ok {
			carrier[k] = v
		}
	}
	if len(carrier) == 0 {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, carrier)
}

// MetaIntent is the tool's _meta member that publishes its operation's
// intent fields ([{"name", "norm"}], op.Spec.Intent; none: the whole
// request), from which a wrapper derives a call's key.
const MetaIntent = "io.idemflow/intent"

// MetaFingerprint is the call's _meta member with which a wrapper that
// derived its key (MetaKey) from the intent fields says so ("intent"):
// the gateway then compares the call on them alone, so reworded free
// text is a replay (op.ByIntent).
const MetaFingerprint = "io.idemflow/fingerprint"

// intentOf is MetaIntent's value for o.
func intentOf(o *op.Operation) []any {
	out := []any{}
	for _, f := range o.Intent {
		out = append(out, map[string]any{"name": f.Name, "norm": string(f.Norm)})
	}
	return out
}

// MetaKey is the _meta member in which an MCP client that has a durable
// identity of its tool calls (a checkpointed framework) sends a key
// derived from it, in place of the model-written idempotency_key.
const MetaKey = "io.idemflow/idempotency-key"

func (t tools) getOperation(ctx context.Context, req *mcp.CallToolRequest, in OperationArgs) (*mcp.CallToolResult, Result, error) {
	ctx, cancel := context.WithTimeout(ctx, t.cfg.CallTimeout)
	defer cancel()
	res, err := t.client(req).Get(ctx, "/v1/operations/"+url.PathEscape(in.OperationID))
	if err != nil {
		return nil, Result{}, err
	}
	out, r, err := result(res)
	if b64, ok := r.Result["result_base64"].(string); ok {
		// A model reads text, not base64: an answer that is text (a
		// downstream's) is given as it is.
		if b, err := base64.StdEncoding.DecodeString(b64); err == nil && utf8.Valid(b) {
			delete(r.Result, "result_base64")
			r.Result["result"] = string(b)
		}
	}
	return out, r, err
}

// HTTPOptions bound what MCP over HTTP keeps in memory.
type HTTPOptions struct {
	// MaxSessionsPerTenant bounds one tenant's open sessions, so that no
	// tenant can exhaust the server for the others; an initialize beyond
	// it is a 503 until one ends. Default 64.
	MaxSessionsPerTenant int
	// IdleTimeout closes a session that has sent nothing for this long.
	// Default 10 minutes.
	IdleTimeout time.Duration
	// VerifyTTL is how long a verified token is trusted without asking the
	// gateway again: a revoked token stops opening sessions and making
	// calls within it (every tool call is checked by the gateway anyway).
	// Default 10 seconds.
	VerifyTTL time.Duration
	// VerifyGrace is how long a token the gateway verified stays good
	// while the gateway cannot answer (a partition, a restart): past
	// VerifyTTL it is asked again, for at most VerifyTimeout, and only a
	// question that gets no answer within that falls back on the last
	// one. A token the gateway refuses is refused at once. Default 5
	// minutes; a negative grace turns it off.
	VerifyGrace time.Duration
	// VerifyTimeout bounds one verification with the gateway, so that
	// a gateway that hangs holds no request longer. Default 2 seconds.
	VerifyTimeout time.Duration
	// OAuth, when set, also accepts an authorization server's access
	// tokens issued for this MCP server (its resource URI), verified here
	// and never passed on: the gateway is called with GatewaySecret (its
	// MCPSecret) and the tenant and scopes the token granted.
	// APITokensOff then refuses idemflow's own API tokens.
	OAuth         *oauth.Verifier
	GatewaySecret string
	APITokensOff  bool
}

// Verification defaults (HTTPOptions).
const (
	DefaultVerifyTTL     = 10 * time.Second
	DefaultVerifyGrace   = 5 * time.Minute
	DefaultVerifyTimeout = 2 * time.Second
)

// HealthPath answers 200 without a token while the MCP server over HTTP
// takes requests. Every other path serves MCP.
const HealthPath = "/healthz"

// HTTPHandler serves the tools over MCP streamable HTTP. A bearer token is
// verified with the gateway (GET /v1/tenant) before any session opens, and
// each tool call passes it on to the gateway, which decides the tenant.
// Each tenant gets its own server, so that its sessions are counted apart.
func HTTPHandler(cfg Config, opts HTTPOptions) http.Handler {
	if opts.MaxSessionsPerTenant <= 0 {
		opts.MaxSessionsPerTenant = 64
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = 10 * time.Minute
	}
	opts.VerifyTTL = cmp.Or(max(opts.VerifyTTL, 0), DefaultVerifyTTL)
	opts.VerifyTimeout = cmp.Or(max(opts.VerifyTimeout, 0), DefaultVerifyTimeout)
	opts.VerifyGrace = cmp.Or(opts.VerifyGrace, DefaultVerifyGrace)
	tn := &tenants{cfg: cfg, servers: map[string]*tenantServer{}}
	server := func(r *http.Request) *mcp.Server {
		return tn.get(auth.TokenInfoFromContext(r.Context()).UserID).server
	}
	h := liftTaskHTTP(mcp.NewStreamableHTTPHandler(server, &mcp.StreamableHTTPOptions{SessionTimeout: opts.IdleTimeout}), cfg.Operations)
	// MCP 2026-07-28 has no sessions (SEP-2567): each request names its
	// revision, and the SDK's stateful handler refuses it ("Unsupported
	// protocol version"), so such a request goes to a stateless one. It
	// opens no session to count.
	modern := liftTaskHTTP(mcp.NewStreamableHTTPHandler(server, &mcp.StreamableHTTPOptions{Stateless: true}), cfg.Operations)
	limited := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Mcp-Protocol-Version") >= modernRevision {
			modern.ServeHTTP(w, r)
			return
		}
		if r.Method != http.MethodPost || r.Header.Get("Mcp-Session-Id") != "" {
			h.ServeHTTP(w, r)
			return
		}
		// A new session: count and open it under the tenant's lock, so
		// that concurrent initializes cannot overshoot the bound.
		ts := tn.get(auth.TokenInfoFromContext(r.Context()).UserID)
		ts.mu.Lock()
		defer ts.mu.Unlock()
		n := 0
		for range ts.server.Sessions() {
			n++
		}
		if n >= opts.MaxSessionsPerTenant {
			w.Header().Set("Retry-After", "30")
			deny(w, http.StatusServiceUnavailable, problem.TypeTooManySessions,
				fmt.Sprintf("this tenant has %d open MCP sessions; close one or wait for an idle one to expire", n))
			return
		}
		h.ServeHTTP(w, r)
	})
	v := &verifier{cfg: cfg, ttl: opts.VerifyTTL, grace: opts.VerifyGrace, timeout: opts.VerifyTimeout,
		known: expirable.NewLRU[[32]byte, verified](maxKnown, nil, max(opts.VerifyTTL, opts.VerifyGrace))}
	authed := auth.RequireBearerToken(preVerified(v.verify), nil)(limited)
	var metadata http.Handler
	var metadataPaths []string
	if opts.OAuth != nil {
		names := make([]string, len(cfg.Operations))
		for i, o := range cfg.Operations {
			names[i] = o.Name
		}
		metadata, metadataPaths = opts.OAuth.MetadataHandler(names), oauth.MetadataPaths(opts.OAuth.Resource())
	}
	// The SDK answers a refused token in plain text; the token is checked
	// here first so that the refusal is the same problem+json the gateway
	// sends. The SDK's own check then finds it in the verifier's cache.
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Liveness for a process manager (Kubernetes' probes): the server
		// takes requests. No token, and nothing of the gateway's: a
		// gateway that cannot answer is a pending answer to a call, not a
		// reason to restart this process.
		if r.URL.Path == HealthPath && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = io.WriteString(w, "ok\n")
			return
		}
		if slices.Contains(metadataPaths, r.URL.Path) {
			metadata.ServeHTTP(w, r)
			return
		}
		fields := strings.Fields(r.Header.Get("Authorization"))
		if len(fields) != 2 || !strings.EqualFold(fields[0], "Bearer") {
			w.Header().Set("WWW-Authenticate", opts.OAuth.Challenge("", "", ""))
			deny(w, http.StatusUnauthorized, problem.TypeUnauthorized, "send Authorization: Bearer <token>: an idemflow API token, or an access token of the authorization server the resource metadata names")
			return
		}
		// A JWT is the authorization server's; any other token is asked
		// of the gateway as an API token, then (an opaque access token)
		// introspected.
		gate := func() {
			if r, ok := oauthGate(w, r, opts, cfg, fields[1]); ok {
				authed.ServeHTTP(w, r)
			}
		}
		if opts.OAuth != nil && (oauth.IsJWT(fields[1]) || opts.APITokensOff) {
			gate()
			return
		}
		if _, err := v.verify(r.Context(), fields[1], r); err != nil {
			if errors.Is(err, auth.ErrInvalidToken) && opts.OAuth.Introspects() {
				gate()
				return
			}
			if errors.Is(err, auth.ErrInvalidToken) {
				w.Header().Set("WWW-Authenticate", opts.OAuth.Challenge("invalid_token", "", ""))
				deny(w, http.StatusUnauthorized, problem.TypeUnauthorized, "the bearer token is unknown or revoked")
			} else {
				w.Header().Set("Retry-After", "2")
				deny(w, http.StatusServiceUnavailable, problem.TypeUnavailable, "the gateway could not verify the token; retry")
			}
			return
		}
		authed.ServeHTTP(w, r)
	})
}

func deny(w http.ResponseWriter, status int, typ, detail string) {
	if status == http.StatusUnauthorized && w.Header().Get("WWW-Authenticate") == "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="idemflow"`)
	}
	w.Header().Set("Content-Type", problem.ContentType)
	w.WriteHeader(status)
	_, _ = w.Write(problem.New(typ, status, detail).Body())
}

type tenants struct {
	cfg     Config
	mu      sync.Mutex
	servers map[string]*tenantServer
}

type tenantServer struct {
	mu     sync.Mutex // held while a session is counted and opened
	server *mcp.Server
}

func (t *tenants) get(tenantID string) *tenantServer {
	t.mu.Lock()
	defer t.mu.Unlock()
	ts, ok := t.servers[tenantID]
	if !ok {
		ts = &tenantServer{server: New(t.cfg)}
		t.servers[tenantID] = ts
	}
	return ts
}

// verifier checks bearer tokens with the gateway and trusts its answer
// for VerifyTTL (tokens kept only as SHA-256 digests), as the gateway's
// tenant.Authenticator does for its own lookups, and for VerifyGrace as
// the answer to fall back on when the gateway gives none.
type verifier struct {
	cfg        Config
	ttl, grace time.Duration // a grace of 0 or less: none
	timeout    time.Duration
	known      *expirable.LRU[[32]byte, verified] // for the longer of the two
}

// verified is the gateway's last answer about a token.
type verified struct {
	tenantID string
	at       time.Time
}

// maxKnown bounds how many tokens the verifier remembers.
const maxKnown = 10000

func (v *verifier) verify(ctx context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
	sum := sha256.Sum256([]byte(token))
	last, ok := v.known.Get(sum)
	tenantID := last.tenantID
	if !ok || time.Since(last.at) >= v.ttl {
		asked, err := v.ask(ctx, token)
		switch {
		case err == nil:
			tenantID = asked
			v.known.Add(sum, verified{tenantID: asked, at: time.Now()})
		case errors.Is(err, auth.ErrInvalidToken):
			v.known.Remove(sum)
			return nil, err
		case !ok || time.Since(last.at) >= v.grace:
			// No answer, and none within the grace: the caller's 503, a
			// pending answer, never a refusal.
			return nil, err
		default:
			slog.WarnContext(ctx, "mcp: the gateway did not answer a token's verification; the tenant it last verified stands, within the grace", "tenant", tenantID, "err", err)
		}
	}
	// UserID binds a session to its tenant: the SDK refuses a session's
	// ID presented with another tenant's token. The SDK wants an
	// expiration; the token is checked again on every request anyway.
	return &auth.TokenInfo{UserID: tenantID, Expiration: time.Now().Add(time.Minute), Extra: map[string]any{"token": token}}, nil
}

// ask calls GET /v1/tenant with the token.
func (v *verifier) ask(ctx context.Context, token string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, v.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(v.cfg.BaseURL, "/")+"/v1/tenant", nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	hc := v.cfg.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", fmt.Errorf("verify token with the gateway: %w", err)
	}
	defer resp.Body.Close()
	var body struct {
		TenantID string `json:"tenant_id"`
	}
	switch {
	case resp.StatusCode == http.StatusUnauthorized:
		return "", auth.ErrInvalidToken
	case resp.StatusCode != http.StatusOK:
		return "", fmt.Errorf("verify token with the gateway: HTTP %d", resp.StatusCode)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4096)).Decode(&body); err != nil || body.TenantID == "" {
		return "", fmt.Errorf("verify token with the gateway: unreadable answer: %v", err)
	}
	return body.TenantID, nil
}

// instructions tell a client what the server's tools do, from their
// declarations: the tools it lists are the operations it was given.
func instructions(ops []*op.Operation) string {
	names := make([]string, len(ops))
	for i, o := range ops {
		names[i] = o.Tool
	}
	return "idemflow runs each of these tools exactly once per intent: " + strings.Join(names, ", ") + ". Every one of them " +
		"takes an idempotency_key: create it once per intent and reuse it, unchanged, on every retry. get_operation only reads."
}
