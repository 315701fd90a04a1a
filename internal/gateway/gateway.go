// Package gateway is idemflow's HTTP API: it authenticates agents, reads
// and validates their requests, hands intents to the starter, and writes
// the answers (stored answers byte for byte, errors as problem+json).
package gateway

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/internal/apispec"
	"github.com/idemflow/idemflow/internal/apperr"
	"github.com/idemflow/idemflow/internal/ijson"
	"github.com/idemflow/idemflow/internal/oauth"
	"github.com/idemflow/idemflow/internal/problem"
	"github.com/idemflow/idemflow/internal/registry"
	"github.com/idemflow/idemflow/internal/replication"
	"github.com/idemflow/idemflow/internal/tenant"
	"github.com/idemflow/idemflow/internal/tracing"
	"github.com/idemflow/idemflow/op"
	"github.com/idemflow/idemflow/starter"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
)

// Header names of the idempotency contract.
const (
	HeaderKey      = "Idempotency-Key"
	HeaderReplayed = "Idempotent-Replayed"
	// HeaderFingerprint: intent asks that the request be compared on its
	// operation's intent fields alone (op.ByIntent); the answer says it
	// back, with the fields in HeaderIntentFields.
	HeaderFingerprint  = "Idempotency-Fingerprint"
	FingerprintIntent  = "intent"
	FingerprintBody    = "body"
	HeaderIntentFields = "Idempotency-Intent-Fields"
	// HeaderDiffered, on an intent-keyed replay, names the request's
	// other members whose values differ from the first answer's.
	HeaderDiffered = "Idempotency-Differed"
	// HeaderOrigin is the caller's own name for one call, a UUID sent on
	// each of its transport retries: the call that ran the intent is
	// answered Idempotent-Replayed: false however often it asks.
	HeaderOrigin = "Idempotency-Origin"
)

// Gateway is the HTTP API agents call.
type Gateway struct {
	Starter *starter.Starter
	Tenants *tenant.Authenticator
	// OAuth, when set, also accepts an authorization server's access
	// tokens issued for the gateway (package oauth); APITokensOff then
	// refuses idemflow's own API tokens.
	OAuth        *oauth.Verifier
	APITokensOff bool
	// MCPSecret, when set, is the secret idemflow's MCP server presents
	// to act for the tenant and scopes of an OAuth token it verified
	// itself: the token was issued for the MCP server, and is never
	// passed on (see mcpserver.HTTPOptions.OAuth).
	MCPSecret string
	Records   *idem.Store
	// DB serves the operations' reads (op.Read).
	DB idem.Querier
	// Set is the operations, each served at its route: idemflow's own and
	// the declared ones.
	Set *registry.Set
	// Health reports whether PostgreSQL and Temporal both answer.
	Health  func(ctx context.Context) error
	Metrics *Metrics
	// ServeMetrics puts GET /metrics on the gateway's own routes; turn it
	// off to serve Metrics.Handler on another address.
	ServeMetrics bool
	Logger       *slog.Logger
	// RequestLogLevel is the level of the one line per request (INFO by
	// default); dev on a terminal lowers it to DEBUG, to keep its console
	// for people.
	RequestLogLevel slog.Level
	// Tracing, when on, makes each request a span (a child of the
	// caller's traceparent) that the intent's spans descend from.
	Tracing *tracing.Tracing

	// waiting holds one token per request waiting for its intent: each
	// holds a goroutine and a Temporal long poll. When it is full, a
	// request answers at once (202 or 409) instead of waiting, and the
	// agent polls. Its capacity is MaxWaiting.
	waiting chan struct{}
	// draining: the process is shutting down (Drain).
	draining atomic.Bool
}

// Drain makes the gateway refuse new work while the requests it holds
// finish: /readyz answers 503, so a load balancer stops sending, and any
// other new request answers 503 with Retry-After, so an agent retries
// with the same key (on another replica, or this one restarted).
// /healthz and /metrics keep answering: the process is alive and observed.
func (g *Gateway) Drain() { g.draining.Store(true) }

// DefaultMaxWaiting bounds the requests that wait at once.
const DefaultMaxWaiting = 1024

// New wires a gateway for set's operations over one pool and one Temporal
// client.
func New(db *pgxpool.Pool, tc client.Client, records *idem.Store, set *registry.Set, logger *slog.Logger) *Gateway {
	return &Gateway{
		Set:     set,
		Starter: &starter.Starter{Temporal: tc, Records: records, Logger: logger, Answers: starter.NewAnswerCache(starter.DefaultAnswerCacheSize)},
		Tenants: tenant.NewAuthenticator(tenant.NewStore(db), 10000, tenant.DefaultAuthTTL),
		Records: records,
		DB:      db,
		Health: func(ctx context.Context) error {
			var errs []error
			if err := db.Ping(ctx); err != nil {
				errs = append(errs, fmt.Errorf("postgres: %w", err))
			} else if r, err := replication.Check(ctx, db); err == nil && r.Blocked() != "" {
				// It answers, but cannot commit: every claim would wait
				// with no deadline. Not ready, and said why.
				errs = append(errs, fmt.Errorf("postgres: %s", r.Blocked()))
			}
			if _, err := tc.CheckHealth(ctx, &client.CheckHealthRequest{}); err != nil {
				errs = append(errs, fmt.Errorf("temporal: %w", err))
			}
			return errors.Join(errs...)
		},
		Metrics:      NewMetrics(),
		ServeMetrics: true,
		Logger:       logger,
		waiting:      make(chan struct{}, DefaultMaxWaiting),
	}
}

// SetMaxWaiting sets how many requests may wait for their intent at once.
func (g *Gateway) SetMaxWaiting(n int) {
	g.waiting = make(chan struct{}, max(n, 0))
}

// Handler returns the gateway's routes.
func (g *Gateway) Handler() http.Handler {
	type route struct {
		method, pattern string
		handler         http.HandlerFunc
	}
	mux := http.NewServeMux()
	routes := []route{
		{"GET", "/v1/operations/{id}", g.authed(oauth.NeedRead, g.getOperation)},
		{"POST", "/v1/operations/{id}/cancel", g.authed(oauth.NeedCall, g.cancelOperation)},
		{"GET", "/v1/tenant", g.authed(oauth.NeedNone, g.getTenant)},
		{"GET", "/healthz", g.healthz},
		{"GET", "/readyz", g.readyz},
		{"GET", "/problems/{slug}", g.describeProblem},
		{"GET", "/openapi.json", g.serveOpenAPI(g.Set)},
	}
	for _, o := range g.operations() {
		routes = append(routes, route{"POST", o.Route, g.authed(oauth.CallOf(o.Name), g.serveOperation(o))})
		for _, rd := range o.Reads {
			routes = append(routes, route{"GET", rd.Route, g.authed(oauth.NeedRead, g.serveRead(rd))})
		}
	}
	if g.OAuth != nil {
		names := make([]string, 0, len(g.operations()))
		for _, o := range g.operations() {
			names = append(names, o.Name)
		}
		for _, p := range oauth.MetadataPaths(g.OAuth.Resource()) {
			routes = append(routes, route{"GET", p, g.OAuth.MetadataHandler(names).ServeHTTP})
		}
	}
	if g.Metrics != nil && g.ServeMetrics {
		routes = append(routes, route{"GET", "/metrics", g.Metrics.Handler().ServeHTTP})
	}
	allowed := map[string][]string{}
	for _, rt := range routes {
		mux.HandleFunc(rt.method+" "+rt.pattern, rt.handler)
		allowed[rt.pattern] = append(allowed[rt.pattern], rt.method)
	}
	// A known path with another method is a 405 problem, not the mux's
	// plain-text one: every error is problem+json.
	for pattern, methods := range allowed {
		allow := strings.Join(methods, ", ")
		if slices.Contains(methods, "GET") {
			allow += ", HEAD"
		}
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			writeProblem(w, problem.New(problem.TypeMethodNotAllowed, http.StatusMethodNotAllowed, r.Method+" is not allowed here; use "+allow))
		})
	}
	// Each action of a family has its own route; any other is told
	// which there are.
	for _, f := range g.Set.Families() {
		mux.HandleFunc(f.Pattern, g.unknownAction(f))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeNotFound(w, "no route for "+r.Method+" "+r.URL.Path)
	})
	return g.Tracing.Handler(g.logRequests(mux))
}

func (g *Gateway) operations() []*op.Operation { return g.Set.Operations() }

type tenantHandler func(w http.ResponseWriter, r *http.Request, tenantID string)

// intentRequest is what every create-style endpoint parses before submitting.
type intentRequest struct {
	key  string
	wait time.Duration
	// preferWait is true when the caller sent Prefer: wait=N.
	preferWait bool
}

// readIntent validates the key and reads the body; on failure it has
// already answered. Nothing is recorded before it succeeds.
// An absent body (zero bytes) counts as {} where allowEmpty is set; a
// body of blanks is present and is not JSON, so it is refused as one.
func (g *Gateway) readIntent(w http.ResponseWriter, r *http.Request, into any, allowEmpty bool) (intentRequest, bool) {
	vals := r.Header.Values(HeaderKey)
	if len(vals) > 1 {
		writeProblem(w, problem.New(problem.TypeInvalidKey, http.StatusBadRequest, "send exactly one Idempotency-Key header"))
		return intentRequest{}, false
	}
	key, err := idem.ParseKey(r.Header.Get(HeaderKey))
	if err != nil {
		writeProblem(w, problem.New(problem.TypeInvalidKey, http.StatusBadRequest, err.Error()))
		return intentRequest{}, false
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		// A form or text body is not JSON that happens to parse: refuse
		// it, so that the contract's one media type is the only one.
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			writeProblem(w, problem.New(problem.TypeUnsupportedMedia, http.StatusUnsupportedMediaType,
				"send the body as Content-Type: application/json, not "+strconv.Quote(ct)))
			return intentRequest{}, false
		}
	}
	body, err := readBody(w, r)
	switch {
	case errors.Is(err, errBodyTooLarge):
		writeProblem(w, problem.New(problem.TypeBodyTooLarge, http.StatusRequestEntityTooLarge, err.Error()))
		return intentRequest{}, false
	case err != nil:
		writeProblem(w, problem.New(problem.TypeInvalidRequest, http.StatusBadRequest, err.Error()))
		return intentRequest{}, false
	}
	if allowEmpty && len(body) == 0 {
		body = []byte("{}")
	}
	if raw, ok := into.(*json.RawMessage); ok {
		// A declared operation's body: its Prepare decodes it, once.
		*raw = body
	} else if err := ijson.Decode(body, into); err != nil {
		writeInvalid(w, err)
		return intentRequest{}, false
	}
	wait, prefer := parseWait(r.Header)
	return intentRequest{key: key, wait: wait, preferWait: prefer}, true
}

// serveIntent reads an intent request into req, then builds and submits
// it; build's *apperr.InvalidError is a 400, an apperr.ErrNotFound a 404
// and a starter.ErrUnavailable a 503.
//
// onReplay, if set, adds headers to a replay's answer (its body given).
func (g *Gateway) serveIntent(w http.ResponseWriter, r *http.Request, bizType string, req any, allowEmpty bool, build func(key string) (starter.Intent, error), onReplay func(h http.Header, answer []byte)) {
	ir, ok := g.readIntent(w, r, req, allowEmpty)
	if !ok {
		g.Metrics.count(bizType, LabelInvalid)
		return
	}
	intent, err := build(ir.key)
	var inv *apperr.InvalidError
	switch {
	case errors.As(err, &inv):
		g.Metrics.count(bizType, LabelInvalid)
		writeInvalid(w, err)
		return
	case errors.Is(err, apperr.ErrNotFound):
		// What the request names is not this tenant's: nothing recorded.
		writeNotFound(w, err.Error())
		return
	case errors.Is(err, starter.ErrUnavailable):
		g.unavailable(w, r, err)
		return
	case err != nil:
		g.internal(w, r, err)
		return
	}
	intent.Wait = ir.wait
	g.submit(w, r, intent, ir.preferWait, onReplay)
}

func (g *Gateway) submit(w http.ResponseWriter, r *http.Request, in starter.Intent, preferWait bool, onReplay func(http.Header, []byte)) {
	noteRequest(r.Context(), func(i *requestInfo) { i.workflowID = in.WorkflowID })
	if in.Wait > 0 {
		select {
		case g.waiting <- struct{}{}:
			g.Metrics.waitingAdd(1)
			defer func() { <-g.waiting; g.Metrics.waitingAdd(-1) }()
		default:
			in.Wait = 0
		}
	}
	reply, err := g.Starter.Submit(r.Context(), in)
	outcome := labelOf(reply, err)
	if r.Context().Err() != nil {
		// The caller hung up: nobody reads this answer, and it says
		// nothing about PostgreSQL or Temporal.
		g.Metrics.count(in.BizType, LabelClientGone)
		noteRequest(r.Context(), func(i *requestInfo) { i.outcome = LabelClientGone })
		return
	}
	g.Metrics.count(in.BizType, outcome)
	if err == nil && preferWait {
		w.Header().Set("Preference-Applied", "wait="+strconv.Itoa(int(in.Wait/time.Second)))
	}
	switch outcome {
	case LabelConflict:
		writeProblem(w, problem.New(problem.TypeKeyReused, http.StatusUnprocessableEntity, err.Error()))
	case LabelUnavailable:
		g.unavailable(w, r, err)
	case LabelFailed:
		if !errors.Is(err, starter.ErrExecutionFailed) {
			g.internal(w, r, err)
			return
		}
		p := problem.New(problem.TypeExecutionFailed, http.StatusInternalServerError,
			"the request did not complete; retry with the same key")
		p.OperationID = reply.OperationID.String()
		writeProblem(w, p)
	case LabelExecuted, LabelReplayed:
		w.Header().Set(apispec.HeaderOperationID, reply.OperationID.String())
		if reply.Replayed && onReplay != nil {
			onReplay(w.Header(), reply.Outcome.Body)
		}
		writeOutcome(w, reply.Outcome, reply.Replayed)
	case LabelAccepted:
		loc := "/v1/operations/" + reply.OperationID.String()
		w.Header().Set("Location", loc)
		w.Header().Set(apispec.HeaderOperationID, reply.OperationID.String())
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusAccepted, operationView{
			OperationID: reply.OperationID.String(), Status: "processing",
			BizType: in.BizType, IdempotencyKey: in.Key, WorkflowID: reply.WorkflowID,
		})
	default: // LabelInProgress
		w.Header().Set("Retry-After", "1")
		p := problem.New(problem.TypeInProgress, http.StatusConflict,
			"a request with this Idempotency-Key is still being processed; retry with the same key")
		p.OperationID = reply.OperationID.String()
		writeProblem(w, p)
	}
}

// labelOf classifies a submission once, for both the answer and the
// metrics.
func labelOf(reply starter.Reply, err error) string {
	var reused *idem.KeyReusedError
	switch {
	case errors.As(err, &reused):
		return LabelConflict
	case errors.Is(err, starter.ErrUnavailable):
		return LabelUnavailable
	case err != nil:
		return LabelFailed
	case reply.Done && reply.Replayed:
		return LabelReplayed
	case reply.Done:
		return LabelExecuted
	case reply.Owner:
		return LabelAccepted
	}
	return LabelInProgress
}

// writeOutcome writes a stored answer: the intent's own, whatever its
// status (a downstream's 202 or 4xx too). Every such answer carries
// Idempotent-Replayed, and no answer of idemflow's about the request does
// (its 202 still running, 409 in progress, 4xx refusals, 5xx): that is
// how a client tells the two apart. A replay carries
// Idempotent-Replayed: true and is otherwise byte-identical to the first.
func writeOutcome(w http.ResponseWriter, out idem.Outcome, replayed bool) {
	h := w.Header()
	h.Set("Content-Type", mediaType(out))
	if out.Location != "" {
		h.Set("Location", out.Location)
	}
	h.Set(HeaderReplayed, strconv.FormatBool(replayed))
	w.WriteHeader(out.Status)
	_, _ = w.Write(out.Body)
}

// mediaType is a stored answer's Content-Type.
func mediaType(out idem.Outcome) string {
	switch {
	case out.ContentType != "":
		return out.ContentType
	case out.Status >= 400:
		return problem.ContentType
	}
	return "application/json"
}

type operationView struct {
	OperationID    string     `json:"operation_id"`
	Status         string     `json:"status"`
	BizType        string     `json:"biz_type"`
	IdempotencyKey string     `json:"idempotency_key"`
	WorkflowID     string     `json:"workflow_id"`
	Attempts       int        `json:"attempts,omitempty"`
	CreatedAt      *time.Time `json:"created_at,omitempty"`
	UpdatedAt      *time.Time `json:"updated_at,omitempty"`
	ResultStatus   int        `json:"result_status,omitempty"`
	ResultLocation string     `json:"result_location,omitempty"`
	// ResultContentType, and Result or ResultBase64, are the answer a
	// replay gives: its media type, and its bytes.
	ResultContentType string          `json:"result_content_type,omitempty"`
	Result            json.RawMessage `json:"result,omitempty"`
	// ResultBase64 is set, empty for an empty answer (a 204), whenever
	// Result is not.
	ResultBase64 *string `json:"result_base64,omitempty"`
}

var operationStatus = map[idem.Status]string{
	idem.StatusProcessing: "processing",
	idem.StatusSuccess:    "succeeded",
	idem.StatusFailed:     "failed",
}

func (g *Gateway) getOperation(w http.ResponseWriter, r *http.Request, tenantID string) {
	rec, err := g.readOperation(r, tenantID)
	g.answerRead(w, r, err, func() { writeJSON(w, http.StatusOK, operationOf(rec)) })
}

// readOperation reads the tenant's record that the path's {id} names; an
// ID that is no UUID, or not the tenant's, is not found.
func (g *Gateway) readOperation(r *http.Request, tenantID string) (idem.Record, error) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		return idem.Record{}, op.NotFound("no operation " + r.PathValue("id"))
	}
	rec, err := g.Records.GetByID(r.Context(), tenantID, id)
	if errors.Is(err, apperr.ErrNotFound) {
		err = op.NotFound("no operation " + id.String())
	}
	return rec, err
}

// cancelOperation asks a running intent's workflow to stop, as an
// operator's cancel in the Web UI does (docs/how-it-works.md): the
// workflow settles the record, FAILED when nothing was written and
// SUCCESS when the effect had already committed. An intent that has ended
// is left alone. It is the tenant's own: another's ID is a 404.
func (g *Gateway) cancelOperation(w http.ResponseWriter, r *http.Request, tenantID string) {
	rec, err := g.readOperation(r, tenantID)
	if err != nil || rec.Status != idem.StatusProcessing {
		g.answerRead(w, r, err, func() { writeJSON(w, http.StatusOK, operationOf(rec)) })
		return
	}
	// The latest run of the derived ID is this attempt's: the record is
	// PROCESSING. One that was never started (its gateway died first) is
	// not found; reconcile settles that record.
	err = g.Starter.Temporal.CancelWorkflow(r.Context(), rec.WorkflowID, "")
	var notFound *serviceerror.NotFound
	if err != nil && !errors.As(err, &notFound) {
		g.unavailable(w, r, fmt.Errorf("cancel %s: %w", rec.WorkflowID, err))
		return
	}
	g.Logger.InfoContext(r.Context(), "intent canceled by its tenant", "tenant", tenantID, "workflow_id", rec.WorkflowID, "operation_id", rec.ID)
	writeJSON(w, http.StatusAccepted, operationOf(rec))
}

// serveRead answers an operation's GET: the resource, or a 404 that says
// the tenant has none of that name.
func (g *Gateway) serveRead(rd op.Read) tenantHandler {
	return func(w http.ResponseWriter, r *http.Request, tenantID string) {
		body, err := rd.Get(r.Context(), g.DB, tenantID, r.PathValue)
		g.answerRead(w, r, err, func() { writeBody(w, body) })
	}
}

// answerRead ends a tenant's read: found (write), not found for this
// tenant (a 404 with err's text), or the database failed (503).
func (g *Gateway) answerRead(w http.ResponseWriter, r *http.Request, err error, write func()) {
	switch {
	case errors.Is(err, apperr.ErrNotFound):
		writeNotFound(w, err.Error())
	case err != nil:
		g.unavailable(w, r, err)
	default:
		write()
	}
}

// writeBody writes a resource's stored JSON rendering as a 200.
func writeBody(w http.ResponseWriter, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// operationOf renders a record as GET /v1/operations/{id} does.
func operationOf(rec idem.Record) any {
	v := operationView{
		OperationID: rec.ID.String(), Status: operationStatus[rec.Status], BizType: rec.BizType,
		IdempotencyKey: rec.Key, WorkflowID: rec.WorkflowID, Attempts: rec.Attempts,
		CreatedAt: &rec.CreatedAt, UpdatedAt: &rec.UpdatedAt,
	}
	if rec.Status != idem.StatusProcessing {
		v.ResultStatus, v.ResultLocation = rec.Response.Status, rec.Response.Location
		v.ResultContentType = mediaType(rec.Response)
		if writtenAsIs(rec.Response.Body) {
			v.Result = json.RawMessage(rec.Response.Body)
		} else {
			b64 := base64.StdEncoding.EncodeToString(rec.Response.Body)
			v.ResultBase64 = &b64
		}
	}
	return v
}

// writtenAsIs reports whether body is JSON that writeJSON writes as it is,
// byte for byte (compact, nothing it escapes): then the view's result is
// the answer's bytes. Any other answer (text, a downstream's indented
// JSON) goes in result_base64, so that a poll reads what a replay would.
func writtenAsIs(body []byte) bool {
	if !json.Valid(body) {
		return false
	}
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(json.RawMessage(body)); err != nil {
		return false
	}
	return bytes.Equal(bytes.TrimSuffix(buf.Bytes(), []byte("\n")), body)
}

// getTenant names the caller's tenant: a cheap way for a front end (the MCP
// server) to check a token before it keeps anything for its holder.
func (g *Gateway) getTenant(w http.ResponseWriter, _ *http.Request, tenantID string) {
	writeJSON(w, http.StatusOK, map[string]string{"tenant_id": tenantID})
}

// healthz is liveness: the process serves requests. It calls no
// dependency, so a PostgreSQL outage does not get every replica restarted.
func (g *Gateway) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readyz is readiness: PostgreSQL and Temporal both answer, and
// PostgreSQL can commit (replication.Report.Blocked).
func (g *Gateway) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
	defer cancel()
	if err := g.Health(ctx); err != nil {
		g.unavailable(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (g *Gateway) describeProblem(w http.ResponseWriter, r *http.Request) {
	typ := "/problems/" + r.PathValue("slug")
	desc, ok := problem.Describe(typ)
	if !ok {
		desc, ok = g.Set.Description(r.PathValue("slug"))
	}
	if !ok {
		// A typo must not look like a real problem type.
		writeNotFound(w, "no problem type "+typ)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = fmt.Fprintf(w, "%s\n\n%s\n", typ, desc)
}

func (g *Gateway) unavailable(w http.ResponseWriter, r *http.Request, err error) {
	g.logger().WarnContext(r.Context(), "dependency unavailable", "path", r.URL.Path, "error", err)
	w.Header().Set("Retry-After", "2")
	if errors.Is(err, starter.ErrUnconfirmed) {
		// The claim may have committed: "nothing was executed" could be
		// untrue of the record, so say what is known.
		writeProblem(w, problem.New(problem.TypeUnavailable, http.StatusServiceUnavailable,
			"PostgreSQL did not confirm this intent's record in time (it is not committing): the intent may have been recorded; "+
				"retry with the same key: it runs at most once, and the retry gets its answer"))
		return
	}
	if errors.Is(err, starter.ErrOutcomeUnread) {
		writeProblem(w, problem.New(problem.TypeUnavailable, http.StatusServiceUnavailable,
			"this intent is recorded and may have executed, but PostgreSQL did not answer in time; "+
				"retry with the same key: it runs at most once, and the retry gets its answer"))
		return
	}
	writeProblem(w, problem.New(problem.TypeUnavailable, http.StatusServiceUnavailable,
		"PostgreSQL or Temporal is unavailable; nothing was executed, retry with the same key"))
}

func (g *Gateway) internal(w http.ResponseWriter, r *http.Request, err error) {
	g.logger().ErrorContext(r.Context(), "internal error", "path", r.URL.Path, "error", err)
	writeProblem(w, problem.New(problem.TypeInternal, http.StatusInternalServerError, "internal error; retry with the same key"))
}

func (g *Gateway) logger() *slog.Logger {
	if g.Logger != nil {
		return g.Logger
	}
	return slog.Default()
}

func writeInvalid(w http.ResponseWriter, err error) {
	var inv *apperr.InvalidError
	if !errors.As(err, &inv) {
		writeProblem(w, problem.New(problem.TypeInvalidRequest, http.StatusBadRequest, err.Error()))
		return
	}
	p := problem.New(problem.TypeInvalidRequest, http.StatusBadRequest, inv.Error())
	p.Errors = inv.Fields
	writeProblem(w, p)
}

// writeNotFound answers 404: no such resource for this tenant (another
// tenant's is not found either).
func writeNotFound(w http.ResponseWriter, detail string) {
	writeProblem(w, problem.New(problem.TypeNotFound, http.StatusNotFound, detail))
}

func writeProblem(w http.ResponseWriter, p problem.Problem) {
	w.Header().Set("Content-Type", problem.ContentType)
	w.WriteHeader(p.Status)
	_, _ = w.Write(p.Body())
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

type statusRecorder struct {
	http.ResponseWriter
	status int
	// wrote: an answer was begun (net/http sends 200 for a body written
	// without a status).
	wrote bool
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status, s.wrote = code, true
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	s.wrote = true
	return s.ResponseWriter.Write(b)
}

// StatusClientClosed is what the log and the metrics say of a request
// whose caller hung up before it was answered (nginx's 499): it got no
// status at all, and the 200 a recorder starts with was logged for
// requests nobody answered.
const StatusClientClosed = 499

func (g *Gateway) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		if g.draining.Load() && r.URL.Path != "/healthz" && r.URL.Path != "/metrics" {
			w.Header().Set("Retry-After", "1")
			writeProblem(w, problem.New(problem.TypeUnavailable, http.StatusServiceUnavailable,
				"this gateway is shutting down; nothing was executed, retry with the same key"))
			g.Metrics.observe("draining", r.Method, http.StatusServiceUnavailable, time.Since(start))
			return
		}
		info := &requestInfo{}
		r = r.WithContext(context.WithValue(r.Context(), requestInfoKey{}, info))
		next.ServeHTTP(rec, r)
		took := time.Since(start)
		if !rec.wrote && r.Context().Err() != nil {
			rec.status = StatusClientClosed
		}
		route := r.Pattern
		if route == "" {
			route = "unmatched"
		}
		g.Metrics.observe(route, r.Method, rec.status, took)
		attrs := []slog.Attr{slog.String("method", r.Method), slog.String("path", r.URL.Path),
			slog.Int("status", rec.status), slog.Duration("took", took),
			slog.Bool("replayed", rec.Header().Get(HeaderReplayed) == "true")}
		// An intent's lines carry its tenant, key and workflow ID, so that
		// one grep follows it from gateway to worker; never a token or body.
		if info.tenantID != "" {
			attrs = append(attrs, slog.String("tenant", info.tenantID))
		}
		if key := r.Header.Get("Idempotency-Key"); key != "" && len(key) <= 255 {
			attrs = append(attrs, slog.String("key", key))
		}
		if info.workflowID != "" {
			attrs = append(attrs, slog.String("workflow_id", info.workflowID))
		}
		if info.outcome != "" {
			attrs = append(attrs, slog.String("outcome", info.outcome))
		}
		g.logger().LogAttrs(r.Context(), g.RequestLogLevel, "http", attrs...)
		if span := trace.SpanFromContext(r.Context()); span.IsRecording() {
			// Known once routed: the span is named by its route, and
			// says which intent it was and whether it was a replay.
			span.SetName(route)
			span.SetAttributes(attribute.String("http.route", route), attribute.Bool("idemflow.replayed", rec.Header().Get(HeaderReplayed) == "true"))
			if info.tenantID != "" {
				span.SetAttributes(attribute.String("idemflow.tenant", info.tenantID))
			}
			if info.workflowID != "" {
				span.SetAttributes(attribute.String("idemflow.workflow_id", info.workflowID))
			}
		}
	})
}

// requestInfo collects, while a request is served, what its log line
// names.
type requestInfo struct{ tenantID, workflowID, outcome string }

type requestInfoKey struct{}

func noteRequest(ctx context.Context, f func(*requestInfo)) {
	if info, ok := ctx.Value(requestInfoKey{}).(*requestInfo); ok {
		f(info)
	}
}
