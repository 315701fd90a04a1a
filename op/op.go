// Package op declares an idempotent operation once: its name, its request
// and the rules on it, the step that writes its effect in the record's
// PostgreSQL transaction, how a key's effect is read back after its record
// was purged, the answer's view and schema, its rejections' texts, its
// reads (GET routes) and its table's migrations. Everything else idemflow
// needs of an operation (its HTTP route, its OpenAPI paths, its MCP tool,
// its workflow and activity, reconcile's recall, audit's guard, the
// metrics' rejection codes) is derived from the declaration.
//
// A team declares its own side effect with Define and runs idemflow's roles
// with it through the idemflow package (examples/refund_request).
package op

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/intent"
	"github.com/idemflow/idemflow/internal/apperr"
	"github.com/idemflow/idemflow/internal/ijson"
	"github.com/jackc/pgx/v5"
	validator "github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// Schema is a JSON Schema (2020-12). A declaration's request schema is
// derived from its request type; Spec.Rules adds the constraints.
type Schema = jsonschema.Schema

// IntentField is a member of the request that makes its intent, and how
// it is normalised (intent.ID, intent.Text, intent.Number, intent.Set,
// intent.Exact).
type IntentField = intent.Field

// Querier is what a pool, a connection and a transaction offer.
type Querier = idem.Querier

// Invalid accumulates field errors for Spec.Normalize: a request that can
// never succeed as sent (400, nothing recorded).
type Invalid = apperr.Invalid

// Rejection is a business rejection of a step: the intent ends FAILED with
// this answer (422 unless Status says otherwise) and the step's writes are
// rolled back. Its Code must be listed in Spec.Rejections.
type Rejection = apperr.RejectedError

// ErrNotFound is what a Lookup may return (wrapped or not) for "no row".
var ErrNotFound = apperr.ErrNotFound

// Answer is an operation's answer: the HTTP status (201 when zero), the
// body (marshaled as JSON; a json.RawMessage is kept as it is, such as an
// answer the row stored) and an optional Location.
type Answer struct {
	Status   int
	Body     any
	Location string
	// ContentType, if set, is the body's media type (an HTTP tool's
	// downstream answer); otherwise it is JSON, or problem+json from 400.
	ContentType string
}

// Read is a GET route of an operation: one resource, read for the
// caller's tenant (a ticket by its ID, an order by its number).
type Read struct {
	// Route is the path, e.g. /v1/widgets/{id}: its {name} segments are
	// the path's values Get receives.
	Route string
	// Summary and Description are shown in OpenAPI.
	Summary, Description string
	// OperationID names the read in OpenAPI (a Link's target); by default
	// it is the operation's name and _read1, _read2, ... in order.
	OperationID string
	// Get returns the resource as JSON, the body of a 200, for tenantID:
	// path(name) is the value of the route's {name}. An error wrapping
	// ErrNotFound (NotFound's) is a 404 with its text: nothing of that
	// name is the tenant's. Any other error is a 503.
	Get func(ctx context.Context, q Querier, tenantID string, path func(name string) string) (json.RawMessage, error)
}

// Link is a call a client can make next from an operation's answer (an
// OpenAPI link, written on each 2xx of its POST but the 202).
type Link struct {
	// Name names the link in the answer's links.
	Name string
	// OperationID is the target's: a declared operation's name (or the
	// operationId its Paths give it), or a read's (Read.OperationID).
	OperationID string
	// Parameters are the target's parameters as OpenAPI runtime
	// expressions: $response.body#/ticket_id, $request.path.order_no.
	Parameters map[string]string
	// Description is shown in OpenAPI.
	Description string
}

// In is what a step receives: the intent's identity and its request, as
// validated and normalized.
type In[R any] struct {
	TenantID   string
	Key        string
	WorkflowID string
	// Fingerprint is the intent's, recomputed from Request and checked.
	Fingerprint string
	Request     R
	// Hint is what Spec.Hint read when the intent was claimed, or nil: a
	// guess, never trusted (see Spec.Hint). It is nil whenever the step
	// runs again (the long way, a retry), so a stale hint costs one
	// failed pipeline, not a loop.
	Hint json.RawMessage
}

// Spec is one operation's declaration. R is its request (the HTTP body, the
// MCP tool's arguments); Row is what its step writes and Lookup reads.
type Spec[R, Row any] struct {
	// Name names the operation: ^[a-z][a-z0-9_]{0,62}$. The route
	// (POST /v1/{name}), the MCP tool, the business type and the
	// workflow-ID scope follow from it.
	Name string
	// A Route's {name} segments are path parameters: each is a string
	// member of R, taken from the path over HTTP (never from the body) and
	// an argument of the MCP tool.
	// Description is shown to models (MCP) and in OpenAPI.
	Description string
	// Rules adds constraints (lengths, enums, bounds, patterns) to the
	// schema derived from R: its properties are R's JSON fields, a field
	// without omitempty is required, and no other member is accepted. The
	// schema is both published and enforced, so each rule is written here
	// once.
	Rules func(s *Schema)
	// Normalize, if set, applies defaults and checks what a schema cannot
	// say (rules across fields). It runs after the schema's check and
	// before the fingerprint, so that two spellings of one intent are one.
	Normalize func(r *R) error
	// Summary is the run's title in the Temporal Web UI.
	Summary func(r R) string
	// Fingerprint, if set, is what the fingerprint covers (by default the
	// normalized request): an operation whose fingerprints were stored in
	// another shape keeps them.
	Fingerprint func(r R) any
	// Intent names the request's members that make one intent (seed 2's
	// whitelisted, normalised fields: a ticket's customer, never its
	// wording), each with its rule (package intent). A caller that says
	// it keys by intent fields (the integrations and MCP wrappers, with
	// Idempotency-Fingerprint: intent) is compared on these alone, so the
	// same key with reworded free text is a replay and other values in
	// them a conflict; any other caller is compared on the whole request.
	// It is published with the tool (OpenAPI, MCP) for the clients, which
	// derive a framework call's key from the same fields. None declared:
	// the whole request makes the intent.
	Intent []IntentField
	// Check, if set, runs before the intent is recorded: an error wrapping
	// ErrNotFound is a 404 with its text (another tenant's resource, or
	// none), nothing recorded; any other error is a 503.
	Check func(ctx context.Context, q Querier, tenantID string, r R) error
	// Hint, if set, is a read the gateway sends in the pipeline that
	// claims a new intent, at no round trip of its own: one row of one
	// column, JSON (NULL for none), which the workflow's input carries to
	// the step as In.Hint. It is for what the step would otherwise have to
	// read before it can write (an order's prices), so that the step can
	// send its writes with the commit (Later) in a single round trip.
	//
	// It is read without a lock, before the step, and anyone who can
	// start a workflow can write an input: the step must treat it as a
	// guess. It writes what follows from it only with a statement, in the
	// same pipeline, that fails in PostgreSQL when the guess no longer
	// holds (a constraint, or a statement that raises). That failure
	// rolls the pipeline back before its commit, and the step runs again
	// the long way with no hint. A step must also work with none: a claim
	// that took more than its first statement carries none.
	Hint func(tenantID string, r R) (sql string, args []any)
	// Step writes the effect within tx, the transaction that holds the
	// intent's record locked and finishes it in the same commit. It runs
	// at most once per key to a commit; a Rejection rolls its writes back.
	// It never ends tx (its Commit and Rollback fail); it may nest
	// savepoints with Begin, and should queue statements that depend on
	// no earlier answer in a pgx.Batch: each round trip is on the
	// intent's critical path. It must not change in.Request (a slice's
	// elements, a map): the request is decoded once per execution, and a
	// step run again the long way gets the same one.
	Step func(ctx context.Context, tx pgx.Tx, in In[R]) (Row, error)
	// Lookup reads the row a key's step wrote, within q (found false, or
	// ErrNotFound, when there is none). It is how a key whose record was
	// purged is still a replay, never a second effect.
	Lookup func(ctx context.Context, q Querier, tenantID, key string) (row Row, found bool, err error)
	// View renders a row as the answer. It must depend on the row alone:
	// the answer rebuilt after a purge is then byte-identical to the first.
	View func(row Row) Answer
	// Table is the step's table. It must hold UNIQUE (tenant_id, idem_key):
	// the constraint the guarantee rests on, which audit checks.
	Table string
	// Rejections maps each business rejection code the step can answer to
	// its description (served at GET /problems/{code}).
	Rejections map[string]string
	// Migrations, if set, is the table's schema: tern migrations
	// (001_name.sql, …) applied by 'migrate' and 'dev' after idemflow's
	// own, with a version table of the operation's own.
	Migrations fs.FS
	// Reads are GET routes the gateway serves beside the operation's
	// POST: the resources its step wrote, read for the caller's tenant.
	Reads []Read
	// Answer, if set, is the JSON Schema of the answer's body (View's,
	// its replays' and the Reads'): the contract (OpenAPI) serves it as
	// the schema component named by its Title, or by the operation's
	// Name. Without it the contract says only "an object". SchemaFor
	// derives one from a Go type.
	Answer *Schema
	// Links are the calls a client can make next from the operation's
	// answer (OpenAPI links, which Schemathesis' stateful phase follows
	// too): to its read, or to another operation on what it wrote.
	Links []Link
	// Paths, if set, are OpenAPI 3.1 path items (a JSON object, path to
	// item) that describe the operation's route and reads in full, but
	// for the request body, which is always the declaration's. Without
	// them the contract derives both from its neutral templates.
	Paths []byte
	// Inspect, if set, is what 'idemflow inspect' shows of a key beyond
	// its row: lines an operator reads (an order's events). It runs for
	// the operation whose business type the key's record or row names.
	Inspect func(ctx context.Context, q Querier, tenantID, key string) ([]string, error)
	// Seed, if set, writes the demo data a new tenant of a dev stack (and
	// of a chaos run) needs to use the operation: a catalog, say. It must
	// be safe to run again.
	Seed func(ctx context.Context, q Querier, tenantID string) error
	// Example, if set, is a request body to try the operation with (the
	// dev stack's banner shows the first one's as a curl command).
	Example string
	// Tasks is how the operation's MCP tool takes MCP tasks
	// (execution.taskSupport): TasksOptional (the default: a client that
	// takes tasks gets one when the answer is not there within the
	// server's wait), TasksRequired (a client must take tasks, and always
	// gets one: for a step that runs long) or TasksForbidden (always
	// answered inline: for a step that is quick).
	Tasks TaskSupport
	// Route, Tool, BizType, Scope, Workflow and Activity override the
	// names derived from Name. Built-in operations keep their historical
	// names this way, so that recorded histories, workflow IDs and stored
	// answers hold.
	Route, Tool, BizType, Scope, Workflow, Activity string
}

// Operation is a declared operation, as the rest of idemflow uses it.
type Operation struct {
	Name        string
	Description string
	// Route is the path of POST; Tool the MCP tool's name; BizType the
	// record's business type; Scope the workflow ID's first segment;
	// Workflow the workflow type; Activity the activity type (the business
	// type unless overridden).
	Route, Tool, BizType, Scope, Workflow, Activity string
	Table                                           string
	Rejections                                      map[string]string
	Migrations                                      fs.FS
	// Reads are the GET routes it serves (Spec.Reads).
	Reads []Read
	// Answer is its answer's schema (Spec.Answer), or nil.
	Answer *Schema
	// Links, Paths, Inspect, Seed and Example are the declaration's (see
	// Spec).
	Links   []Link
	Paths   []byte
	Inspect func(ctx context.Context, q Querier, tenantID, key string) ([]string, error)
	Seed    func(ctx context.Context, q Querier, tenantID string) error
	Example string
	// PathParams are the Route's {name} segments, in order.
	PathParams []string
	// Intent is the declaration's intent fields (Spec.Intent), or none.
	Intent intent.Fields
	// Tasks is how its MCP tool takes tasks (Spec.Tasks; never empty).
	Tasks TaskSupport

	schema    map[string]any
	validator *validator.Schema
	prepare   func(body []byte) (req any, summary string, err error)
	decode    func(raw json.RawMessage) (any, error)
	covered   func(req any) any
	emptyBody bool
	check     func(ctx context.Context, q Querier, tenantID string, req any) error
	hint      func(tenantID string, req any) (string, []any)
	step      func(ctx context.Context, tx pgx.Tx, in Input, req any) (idem.Outcome, error)
	recall    func(ctx context.Context, q Querier, tenantID, key string) (idem.Outcome, bool, error)
}

// Input is an operation's workflow and activity input: the intent and its
// normalized request, as JSON.
type Input struct {
	Intent  idem.Intent     `json:"intent"`
	Request json.RawMessage `json:"request"`
	// Hint is what the operation's Spec.Hint read with the claim, if
	// anything (In.Hint).
	Hint json.RawMessage `json:"hint,omitempty"`
	// beside holds the input's other top-level string members. A run
	// started before its operation was a declaration (an order's
	// transition) carried its path parameters there, beside the request;
	// its activity, run again by a new worker, finds them.
	beside map[string]string
}

// UnmarshalJSON decodes an input, keeping its other string members.
func (in *Input) UnmarshalJSON(b []byte) error {
	var all map[string]json.RawMessage
	if err := json.Unmarshal(b, &all); err != nil {
		return err
	}
	type plain Input
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*in = Input(p)
	for k, v := range all {
		var s string
		if k != "intent" && k != "request" && k != "hint" && json.Unmarshal(v, &s) == nil {
			if in.beside == nil {
				in.beside = map[string]string{}
			}
			in.beside[k] = s
		}
	}
	return nil
}

// request is the input's request, with a path parameter that the input
// carried beside it (see beside) put back where the request lacks it.
func (o *Operation) request(in Input) (any, error) {
	raw := in.Request
	if len(o.PathParams) > 0 && len(in.beside) > 0 {
		var members map[string]json.RawMessage
		if err := json.Unmarshal(raw, &members); err != nil {
			return nil, err
		}
		for _, p := range o.PathParams {
			if v, ok := in.beside[p]; ok && members[p] == nil {
				members[p], _ = json.Marshal(v)
			}
		}
		var err error
		if raw, err = json.Marshal(members); err != nil {
			return nil, err
		}
	}
	return o.decode(raw)
}

var (
	namePattern = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)
	pathParam   = regexp.MustCompile(`\{([a-z_]+)\}`)
)

// MustSub is the directory dir of fsys, for Spec.Migrations: an embedded
// folder of migrations (//go:embed migrations/*.sql) whose files tern
// must find at its root. A dir that is not there panics at start-up.
func MustSub(fsys fs.FS, dir string) fs.FS {
	sub, err := fs.Sub(fsys, dir)
	if err != nil {
		panic(fmt.Sprintf("op.MustSub %q: %v", dir, err))
	}
	return sub
}

// TaskSupport is how an operation's MCP tool takes MCP tasks: the
// tool's execution.taskSupport, in the MCP specification's words.
type TaskSupport string

const (
	TasksOptional  TaskSupport = "optional"
	TasksRequired  TaskSupport = "required"
	TasksForbidden TaskSupport = "forbidden"
)

// Define checks a declaration and returns its operation. A declaration
// that cannot work (a bad name, a missing step, a rule naming no field) is
// a programming error: Define panics, at start-up, before anything runs.
func Define[R, Row any](s Spec[R, Row]) *Operation {
	o, err := define(s)
	if err != nil {
		panic(fmt.Sprintf("op.Define %q: %v", s.Name, err))
	}
	return o
}

func define[R, Row any](s Spec[R, Row]) (*Operation, error) {
	if !namePattern.MatchString(s.Name) {
		return nil, fmt.Errorf("the name must match %s", namePattern)
	}
	if s.Step == nil || s.Lookup == nil || s.View == nil {
		return nil, errors.New("the Step, Lookup and View functions are required")
	}
	if s.Table == "" {
		return nil, errors.New("a Table is required: audit checks its UNIQUE (tenant_id, idem_key)")
	}
	if reflect.TypeFor[R]().Kind() != reflect.Struct {
		return nil, errors.New("the request must be a struct (a JSON object)")
	}
	o := newOperation(s.Name, s.Description, s.Table, s.Rejections, s.Migrations,
		names{s.Route, s.Tool, s.BizType, s.Scope, s.Workflow, s.Activity})
	for _, r := range s.Reads {
		if !strings.HasPrefix(r.Route, "/") || strings.ContainsAny(r.Route, " \t") || r.Get == nil {
			return nil, fmt.Errorf("read %q: a Route (a path, no method) and a Get are required", r.Route)
		}
	}
	o.Reads = slices.Clone(s.Reads)
	o.Answer = s.Answer
	for _, l := range s.Links {
		if l.Name == "" || l.OperationID == "" {
			return nil, fmt.Errorf("link %q: a Name and an OperationID are required", l.Name)
		}
	}
	if len(s.Paths) > 0 && !json.Valid(s.Paths) {
		return nil, errors.New("the Paths are not JSON")
	}
	o.Links, o.Paths = slices.Clone(s.Links), s.Paths
	o.Inspect, o.Seed, o.Example = s.Inspect, s.Seed, s.Example
	switch o.Tasks = cmp.Or(s.Tasks, TasksOptional); o.Tasks {
	case TasksOptional, TasksRequired, TasksForbidden:
	default:
		return nil, fmt.Errorf("the Tasks %q is none of %s, %s and %s", s.Tasks, TasksOptional, TasksRequired, TasksForbidden)
	}
	o.PathParams = RouteParams(o.Route)
	sch, err := jsonschema.For[R](nil)
	if err != nil {
		return nil, err
	}
	if s.Rules != nil {
		if err := applyRules(sch, s.Rules); err != nil {
			return nil, err
		}
	}
	for _, p := range o.PathParams {
		if prop, ok := sch.Properties[p]; !ok || prop.Type != "string" || !slices.Contains(sch.Required, p) {
			return nil, fmt.Errorf("the route's {%s} must be a required string member of the request", p)
		}
	}
	if sch.Description == "" {
		sch.Description = s.Description
	}
	if err := o.setIntent(s.Intent, slices.Collect(maps.Keys(sch.Properties))); err != nil {
		return nil, err
	}
	raw, err := json.Marshal(sch)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(raw, &o.schema); err != nil {
		return nil, err
	}
	if o.validator, err = compile(raw); err != nil {
		return nil, fmt.Errorf("the request schema: %w", err)
	}
	_, bodyRequires := o.BodySchema()["required"]
	o.emptyBody = !bodyRequires
	o.prepare = func(body []byte) (any, string, error) {
		var req R
		if err := o.validate(body, &req); err != nil {
			return nil, "", err
		}
		if s.Normalize != nil {
			if err := s.Normalize(&req); err != nil {
				return nil, "", err
			}
		}
		summary := s.Name
		if s.Summary != nil {
			summary = s.Summary(req)
		}
		return req, summary, nil
	}
	o.decode = func(raw json.RawMessage) (any, error) {
		var req R
		if err := json.Unmarshal(raw, &req); err != nil {
			return nil, err
		}
		return req, nil
	}
	o.covered = func(req any) any { return req }
	if s.Fingerprint != nil {
		o.covered = func(req any) any { return s.Fingerprint(req.(R)) }
	}
	if s.Check != nil {
		o.check = func(ctx context.Context, q Querier, tenantID string, req any) error {
			return s.Check(ctx, q, tenantID, req.(R))
		}
	}
	if s.Hint != nil {
		o.hint = func(tenantID string, req any) (string, []any) { return s.Hint(tenantID, req.(R)) }
	}
	o.step = func(ctx context.Context, tx pgx.Tx, in Input, req any) (idem.Outcome, error) {
		var hint json.RawMessage
		if h, ok := tx.(ExecutionTx); ok && h.Hinted() {
			hint = in.Hint
		}
		row, err := s.Step(ctx, tx, In[R]{TenantID: in.Intent.TenantID, Key: in.Intent.Key,
			WorkflowID: in.Intent.WorkflowID, Fingerprint: in.Intent.Fingerprint, Request: req.(R), Hint: hint})
		if err != nil {
			return idem.Outcome{}, err
		}
		return outcome(s.View(row))
	}
	o.recall = recallBy(s.Lookup, s.View)
	return o, nil
}

// names are an operation's names as declared; an empty one is derived
// from the operation's name (newOperation).
type names struct{ route, tool, bizType, scope, workflow, activity string }

// newOperation is an operation with its names: each one declared, or
// derived from name (the route /v1/{name}; the activity after the biz
// type), for Define and DefineJSON alike.
func newOperation(name, description, table string, rejections map[string]string, migrations fs.FS, n names) *Operation {
	o := &Operation{
		Name: name, Description: description, Table: table, Rejections: rejections, Migrations: migrations,
		Route: cmp.Or(n.route, "/v1/"+name), Tool: cmp.Or(n.tool, name), BizType: cmp.Or(n.bizType, name),
		Scope: cmp.Or(n.scope, name), Workflow: cmp.Or(n.workflow, name),
	}
	o.Activity = cmp.Or(n.activity, o.BizType)
	return o
}

// recallBy makes an operation's recall from its lookup: the stored answer
// of a key's effect, none when the lookup finds nothing (or ErrNotFound).
func recallBy[T any](lookup func(context.Context, Querier, string, string) (T, bool, error), answer func(T) Answer) func(context.Context, Querier, string, string) (idem.Outcome, bool, error) {
	return func(ctx context.Context, q Querier, tenantID, key string) (idem.Outcome, bool, error) {
		found, ok, err := lookup(ctx, q, tenantID, key)
		if errors.Is(err, ErrNotFound) {
			return idem.Outcome{}, false, nil
		}
		if err != nil || !ok {
			return idem.Outcome{}, false, err
		}
		out, err := outcome(answer(found))
		return out, err == nil, err
	}
}

// applyRules runs rules on the derived schema, turning a rule that names a
// property R lacks (a nil schema) into an error rather than a panic deep
// inside the caller's function.
func applyRules(sch *Schema, rules func(*Schema)) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the Rules: %v (does every property they name exist in the request type?)", r)
		}
	}()
	rules(sch)
	return nil
}

func compile(raw []byte) (*validator.Schema, error) {
	doc, err := validator.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	c := validator.NewCompiler()
	c.DefaultDraft(validator.Draft2020)
	c.AssertFormat()
	if err := c.AddResource("request.json", doc); err != nil {
		return nil, err
	}
	return c.Compile("request.json")
}

func outcome(a Answer) (idem.Outcome, error) {
	body, ok := a.Body.(json.RawMessage)
	if !ok {
		var err error
		if body, err = json.Marshal(a.Body); err != nil {
			return idem.Outcome{}, fmt.Errorf("op: marshal the answer: %w", err)
		}
	}
	return idem.Outcome{Status: cmp.Or(a.Status, 201), Body: idem.Answer(body), Location: a.Location, ContentType: a.ContentType}, nil
}

// validate decodes body into req by the rules every agent-sent JSON follows
// (ijson), then holds it to the schema, every failing rule as a field
// error.
//
// The decoder stops at the first member the request does not know; the
// schema (which allows no other members) then names every one, and every
// other rule the body breaks, so that one answer lists them all.
func (o *Operation) validate(body []byte, req any) error {
	decodeErr := ijson.Decode(body, req)
	if decodeErr != nil && !ijson.SchemaCanName(decodeErr) {
		return decodeErr
	}
	inst, err := validator.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return err
	}
	var verr *validator.ValidationError
	if err := o.validator.Validate(inst); errors.As(err, &verr) {
		// One answer names every field the body breaks: the decoder's
		// words for the one it stopped at, the schema's for every other.
		var inv, leaves apperr.Invalid
		named := map[string]bool{}
		var dec *apperr.InvalidError
		if errors.As(decodeErr, &dec) {
			for _, f := range dec.Fields {
				inv.Add(f.Field, "%s", f.Reason)
				named[f.Field] = true
			}
		}
		addLeaves(&leaves, verr)
		var all *apperr.InvalidError
		if errors.As(leaves.Err(), &all) {
			for _, f := range all.Fields {
				if !named[f.Field] {
					inv.Add(f.Field, "%s", f.Reason)
				}
			}
		}
		return inv.Err()
	} else if err != nil {
		return err
	}
	return decodeErr
}

var printer = message.NewPrinter(language.English)

func addLeaves(inv *apperr.Invalid, e *validator.ValidationError) {
	if extra, ok := e.ErrorKind.(*kind.AdditionalProperties); ok {
		// Each member is named as a field of its own, as the decoder
		// names one.
		for _, name := range extra.Properties {
			inv.Add(ijson.FieldOf(append(slices.Clone(e.InstanceLocation), name)), ijson.UnknownMember)
		}
		return
	}
	if missing, ok := e.ErrorKind.(*kind.Required); ok {
		// Each missing member is named as a field of its own, as the
		// other rules name theirs.
		for _, name := range missing.Missing {
			inv.Add(ijson.FieldOf(append(slices.Clone(e.InstanceLocation), name)), "is required")
		}
		return
	}
	if len(e.Causes) == 0 {
		inv.Add(ijson.FieldOf(e.InstanceLocation), "%s", e.ErrorKind.LocalizedString(printer))
		return
	}
	for _, c := range e.Causes {
		addLeaves(inv, c)
	}
}

// RequestSchema is the JSON Schema of the request, path parameters
// included, as an MCP tool takes it (a copy).
func (o *Operation) RequestSchema() map[string]any {
	var out map[string]any
	raw, _ := json.Marshal(o.schema)
	_ = json.Unmarshal(raw, &out)
	return out
}

// BodySchema is the JSON Schema of the HTTP body: the request without its
// path parameters (a copy).
func (o *Operation) BodySchema() map[string]any {
	out := o.RequestSchema()
	props, _ := out["properties"].(map[string]any)
	required, _ := out["required"].([]any)
	for _, p := range o.PathParams {
		delete(props, p)
		required = slices.DeleteFunc(required, func(r any) bool { return r == p })
	}
	out["required"] = required
	if len(required) == 0 {
		delete(out, "required")
	}
	return out
}

// EmptyBodyAllowed: the body has no required member, so an empty one
// means {}. Define decides it once: the gateway asks on every request.
func (o *Operation) EmptyBodyAllowed() bool { return o.emptyBody }

// Prepared is a validated, normalized request, ready to be submitted.
type Prepared struct {
	Fingerprint string
	Summary     string
	req         any
}

// Request is the normalized request as JSON, path parameters included:
// the workflow's input, marshaled only for a start (a replay never needs
// it).
func (p Prepared) Request() (json.RawMessage, error) { return json.Marshal(p.req) }

// Prepare validates and normalizes an agent's body, with the values of
// the route's path parameters, and returns the submission's parts. A
// request that can never succeed is an *apperr.InvalidError; so is a body
// that names a path parameter.
func (o *Operation) Prepare(body []byte, path map[string]string) (Prepared, error) {
	return o.PrepareAs(body, path, ByBody)
}

// FingerprintBy is what a request is compared on under its key.
type FingerprintBy int

const (
	// ByBody compares the whole request, normalized: a plain HTTP
	// caller's contract (the seeds', Stripe's), where a changed body
	// under a key is a conflict.
	ByBody FingerprintBy = iota
	// ByIntent compares the declared intent fields alone (Spec.Intent),
	// for a caller that derives its key from them: free text reworded
	// under the key is a replay. An operation that declares none is
	// compared on its whole request.
	ByIntent
)

// PrepareAs is Prepare, with the fingerprint taken as by says.
func (o *Operation) PrepareAs(body []byte, path map[string]string, by FingerprintBy) (Prepared, error) {
	if len(o.PathParams) > 0 {
		var members map[string]json.RawMessage
		// A field's fault in sound JSON (a U+0000, an inexact number) is
		// named by validate with every other rule the body breaks.
		if err := ijson.Decode(body, &members); err != nil && (!ijson.SchemaCanName(err) || members == nil) {
			return Prepared{}, err
		}
		var inv apperr.Invalid
		for _, p := range o.PathParams {
			if _, sent := members[p]; sent {
				inv.Add(p, "is given by the path, not the body")
			}
			v, _ := json.Marshal(path[p])
			members[p] = v
		}
		if err := inv.Err(); err != nil {
			return Prepared{}, err
		}
		var err error
		if body, err = json.Marshal(members); err != nil {
			return Prepared{}, err
		}
	}
	req, summary, err := o.prepare(body)
	if err != nil {
		return Prepared{}, err
	}
	fingerprint, err := o.fingerprint(req, by == ByIntent)
	if err != nil {
		return Prepared{}, err
	}
	return Prepared{Fingerprint: fingerprint, Summary: summary, req: req}, nil
}

// Check runs the declaration's check of a prepared request, if it has one.
func (o *Operation) Check(ctx context.Context, q Querier, tenantID string, p Prepared) error {
	if o.check == nil {
		return nil
	}
	return o.check(ctx, q, tenantID, p.req)
}

// Hint is the read of the declaration's Spec.Hint for a prepared request,
// for the claim's pipeline (idem.ClaimParams.Hint), or nil.
func (o *Operation) Hint(tenantID string, p Prepared) *idem.Hint {
	if o.hint == nil {
		return nil
	}
	sql, args := o.hint(tenantID, p.req)
	return &idem.Hint{SQL: sql, Args: args}
}

// Decoded is an input with its request decoded, once per execution, for
// both its fingerprint and its step.
type Decoded struct {
	in  Input
	req any
}

// DecodeInput decodes an input's request for the operation.
func (o *Operation) DecodeInput(in Input) (Decoded, error) {
	req, err := o.request(in)
	if err != nil {
		return Decoded{}, err
	}
	return Decoded{in: in, req: req}, nil
}

// Fingerprint recomputes the fingerprint of an input's request: the
// activity trusts the request, never the fingerprint it was handed.
func (o *Operation) Fingerprint(in Input) (string, error) {
	d, err := o.DecodeInput(in)
	if err != nil {
		return "", err
	}
	return o.FingerprintOf(d)
}

// FingerprintOf is Fingerprint of a decoded input, taken the way its
// intent's was (idem.ByIntentFields).
func (o *Operation) FingerprintOf(d Decoded) (string, error) {
	return o.fingerprint(d.req, idem.ByIntentFields(d.in.Intent.Fingerprint))
}

// fingerprint is req's: over its intent fields when byIntent and the
// operation declares them, else over what the declaration covers.
func (o *Operation) fingerprint(req any, byIntent bool) (string, error) {
	if !byIntent || len(o.Intent) == 0 {
		return idem.Fingerprint(o.BizType, o.covered(req))
	}
	c, err := o.IntentOf(req)
	if err != nil {
		return "", err
	}
	return idem.IntentFingerprint(o.BizType, c)
}

// IntentOf is the canonical text of req's intent fields (intent.Fields'
// Canonical): req is a request as Prepare or DecodeInput made it, or its
// JSON.
func (o *Operation) IntentOf(req any) (string, error) {
	raw, ok := req.(json.RawMessage)
	if !ok {
		var err error
		if raw, err = json.Marshal(req); err != nil {
			return "", err
		}
	}
	return o.Intent.Canonical(raw)
}

// setIntent checks and keeps a declaration's intent fields, members of
// the request (its schema's properties).
func (o *Operation) setIntent(fs []IntentField, members []string) error {
	if err := intent.Fields(fs).Validate(members); err != nil {
		return err
	}
	o.Intent = slices.Clone(fs)
	return nil
}

// HasStep reports whether the operation's effect is a step in the
// record's transaction (every Define'd one). One declared with DefineJSON
// has none: its activity is its own (an HTTP tool's call).
func (o *Operation) HasStep() bool { return o.step != nil }

// Run is the step over an input, within tx.
func (o *Operation) Run(ctx context.Context, tx pgx.Tx, in Input) (idem.Outcome, error) {
	d, err := o.DecodeInput(in)
	if err != nil {
		return idem.Outcome{}, err
	}
	return o.RunDecoded(ctx, tx, d)
}

// RunDecoded is Run over a decoded input.
func (o *Operation) RunDecoded(ctx context.Context, tx pgx.Tx, d Decoded) (idem.Outcome, error) {
	if o.step == nil {
		return idem.Outcome{}, fmt.Errorf("op: %s has no step in the transaction", o.Name)
	}
	return o.step(ctx, tx, d.in, d.req)
}

// Recall is idem.Recall for the operation's rows. The row carries no
// fingerprint: the key's idempotency_key row, written in the same
// transaction, does (idem.KeyRecall fills it in).
func (o *Operation) Recall(ctx context.Context, q Querier, tenantID, key string) (idem.Prior, bool, error) {
	out, found, err := o.recall(ctx, q, tenantID, key)
	if err != nil {
		return idem.Prior{}, false, fmt.Errorf("recall %s %s/%s: %w", o.Name, tenantID, key, err)
	}
	if !found {
		return idem.Prior{}, false, nil
	}
	return idem.Prior{BizType: o.BizType, WorkflowID: o.WorkflowID(tenantID, key), Outcome: out}, true, nil
}

// WorkflowID is the workflow ID of the operation's intent under key.
func (o *Operation) WorkflowID(tenantID, key string) string {
	return idem.WorkflowID(o.Scope, tenantID, key)
}

// Guard is the operation's one-row-per-(tenant, key) constraint.
func (o *Operation) Guard() idem.Guard { return idem.Guard{Table: o.Table} }

// Ptr returns a pointer to v, for the schema's optional numbers in Rules:
// s.Properties["title"].MaxLength = op.Ptr(200).
func Ptr[T any](v T) *T { return &v }

// NotFound is an error for Check: what the request names does not exist
// for the tenant (a 404 whose detail is detail; nothing is recorded).
func NotFound(detail string) error { return notFound(detail) }

type notFound string

func (e notFound) Error() string        { return string(e) }
func (e notFound) Is(target error) bool { return target == ErrNotFound }

// SchemaFor derives a JSON Schema from T as a request's is derived (its
// JSON fields; one without omitempty is required; no other member), with
// rules, if set, applied to it: an answer's schema (Spec.Answer). It
// panics on a type that has none, as regexp.MustCompile does on a bad
// pattern: a declaration's types are fixed when it is written.
func SchemaFor[T any](rules func(s *Schema)) *Schema {
	sch, err := jsonschema.For[T](nil)
	if err != nil {
		panic(fmt.Sprintf("op: SchemaFor[%s]: %v", reflect.TypeFor[T](), err))
	}
	if rules != nil {
		rules(sch)
	}
	return sch
}

// Later queues b's statements in the step's transaction, to be sent after
// the step returns, in the pipeline that finishes the intent's record and
// commits: a step whose last writes need no answer from PostgreSQL (an
// INSERT of a row built in Go) saves their round trip, and one that sends
// nothing else (a ticket) is opened, written and committed in a single
// round trip. They run after every statement the step sends itself, so a
// step must not read what it queued. A failure among them fails the
// pipeline before its commit, and the execution then runs the step again
// the long way, each statement sent when the step queues it (so an error
// is seen as the step's own, e.g. a value PostgreSQL cannot store). Their
// results are not read, and b may hold no result callback (a row count
// checked in Go): PostgreSQL has run the pipeline's COMMIT by the time a
// callback could object, so Later refuses such a batch. What a callback
// would guard must fail in PostgreSQL instead: a constraint, or a
// statement that raises. On a transaction that is not an execution's (a
// test's), b is sent at once.
func Later(ctx context.Context, tx pgx.Tx, b *pgx.Batch) error {
	for _, q := range b.QueuedQueries {
		if q.Fn != nil {
			return fmt.Errorf("op.Later: %q has a result callback, which could not stop the commit sent behind it: send it with tx.SendBatch, or let a constraint refuse what it checks", strings.Join(strings.Fields(q.SQL), " "))
		}
	}
	if l, ok := tx.(ExecutionTx); ok {
		return l.Later(ctx, b)
	}
	return tx.SendBatch(ctx, b).Close()
}

// ExecutionTx is what the transaction of an intent's execution offers a
// step beyond pgx.Tx (the activities package's implements it): Later
// queues statements for the pipeline that finishes the record and commits,
// and Hinted says whether the step may use its input's hint (not on the
// long way after a failed pipeline, which the hint may have caused). A
// step is handed a plain pgx.Tx in a test: op.Later then sends at once,
// and In.Hint is nil.
type ExecutionTx interface {
	pgx.Tx
	Later(ctx context.Context, b *pgx.Batch) error
	Hinted() bool
}

// MustSchema parses a JSON Schema written as JSON (an embedded file), for
// Spec.Answer; it panics on one that does not parse.
func MustSchema(raw []byte) *Schema {
	var sch Schema
	if err := json.Unmarshal(raw, &sch); err != nil {
		panic(fmt.Sprintf("op: MustSchema: %v", err))
	}
	return &sch
}

// RouteParams are a route's {name} segments, in order.
func RouteParams(route string) []string {
	var names []string
	for _, m := range pathParam.FindAllStringSubmatch(route, -1) {
		names = append(names, m[1])
	}
	return names
}
