// Package mcpserver exposes idemflow as MCP tools. Every tool call goes
// through the HTTP gateway with the Go client, so a model gets exactly the
// guards and answers an HTTP agent gets.
package mcpserver

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/expirable"
	"github.com/idemflow/idemflow/agentclient"
	"github.com/idemflow/idemflow/ijson"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
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
	// CallTimeout bounds one tool call, retries included.
	CallTimeout time.Duration
	HTTP        *http.Client
}

// Result is what a tool returns.
type Result struct {
	HTTPStatus int  `json:"http_status" jsonschema:"the gateway's HTTP status"`
	Replayed   bool `json:"replayed" jsonschema:"true when this answer was stored by an earlier call with the same idempotency_key"`
	// Result is the resource the gateway answered with.
	Result map[string]any `json:"result" jsonschema:"the ticket, order or operation"`
}

// TicketArgs are create_ticket's arguments.
type TicketArgs struct {
	IdempotencyKey string `json:"idempotency_key" jsonschema:"the intent's key; see the tool description"`
	CustomerID     string `json:"customer_id" jsonschema:"the customer the ticket is for"`
	Title          string `json:"title" jsonschema:"1 to 200 characters"`
	Description    string `json:"description,omitempty" jsonschema:"up to 10000 characters"`
	Priority       string `json:"priority,omitempty" jsonschema:"low, normal (default), high or urgent"`
}

// OrderItem is one line of create_order.
type OrderItem struct {
	SKU      string `json:"sku" jsonschema:"product SKU"`
	Quantity int    `json:"quantity" jsonschema:"1 to 1000"`
}

// OrderArgs are create_order's arguments. Prices are never sent: the
// server computes them.
type OrderArgs struct {
	IdempotencyKey string      `json:"idempotency_key" jsonschema:"the intent's key; see the tool description"`
	CustomerID     string      `json:"customer_id" jsonschema:"the customer ordering"`
	Items          []OrderItem `json:"items" jsonschema:"1 to 50 lines, each SKU once"`
	CouponCode     string      `json:"coupon_code,omitempty" jsonschema:"optional coupon"`
}

// PayArgs are pay_order's arguments.
type PayArgs struct {
	IdempotencyKey string `json:"idempotency_key" jsonschema:"the intent's key; see the tool description"`
	OrderNo        string `json:"order_no" jsonschema:"the order to pay, as returned by create_order"`
	PaymentRef     string `json:"payment_ref" jsonschema:"your reference for the payment"`
}

// CancelArgs are cancel_order's arguments.
type CancelArgs struct {
	IdempotencyKey string `json:"idempotency_key" jsonschema:"the intent's key; see the tool description"`
	OrderNo        string `json:"order_no" jsonschema:"the order to cancel"`
	Reason         string `json:"reason,omitempty" jsonschema:"optional note"`
}

// OperationArgs are get_operation's arguments.
type OperationArgs struct {
	OperationID string `json:"operation_id" jsonschema:"the operation ID from a 202 or 409 answer"`
}

// New returns an MCP server with idemflow's tools.
func New(cfg Config) *mcp.Server {
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = 60 * time.Second
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "idemflow", Version: "1.0.0"}, &mcp.ServerOptions{
		Instructions: "idemflow creates support tickets and purchase orders exactly once. Every tool that changes something " +
			"takes an idempotency_key: create it once per intent and reuse it, unchanged, on every retry.",
	})
	t := tools{cfg: cfg}
	mcp.AddTool(s, &mcp.Tool{Name: "create_ticket", Description: "Create a support ticket." + keyRule}, strict(t.createTicket))
	mcp.AddTool(s, &mcp.Tool{Name: "create_order", Description: "Create a purchase order; the server prices it from its catalog." + keyRule}, strict(t.createOrder))
	mcp.AddTool(s, &mcp.Tool{Name: "pay_order", Description: "Pay a CREATED order; the payment is charged at most once." + keyRule}, strict(t.payOrder))
	mcp.AddTool(s, &mcp.Tool{Name: "cancel_order", Description: "Cancel a CREATED order and release its stock." + keyRule}, strict(t.cancelOrder))
	mcp.AddTool(s, &mcp.Tool{Name: "get_operation", Description: "Report an operation's status (processing, succeeded, failed) and, when done, its result. Read-only."}, strict(t.getOperation))
	return s
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
	token := t.cfg.Token
	if req != nil && req.Extra != nil && req.Extra.TokenInfo != nil {
		if tok, ok := req.Extra.TokenInfo.Extra["token"].(string); ok && tok != "" {
			token = tok
		}
	}
	return &agentclient.Client{BaseURL: t.cfg.BaseURL, Token: token, HTTP: t.cfg.HTTP}
}

func (t tools) call(ctx context.Context, req *mcp.CallToolRequest, key, path string, body any) (*mcp.CallToolResult, Result, error) {
	raw, err := json.Marshal(body)
	if err != nil {
		return nil, Result{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, t.cfg.CallTimeout)
	defer cancel()
	res, err := t.client(req).Do(ctx, agentclient.Intent{Key: key, Method: http.MethodPost, Path: path, Body: raw})
	if err != nil {
		return nil, Result{}, explain(key, err)
	}
	return result(res)
}

func result(res agentclient.Result) (*mcp.CallToolResult, Result, error) {
	out := Result{HTTPStatus: res.Status, Replayed: res.Replayed}
	if err := json.Unmarshal(res.Body, &out.Result); err != nil {
		return nil, Result{}, fmt.Errorf("gateway answered %d with a body that is not a JSON object: %w", res.Status, err)
	}
	return nil, out, nil
}

// explain turns an error into words a model can act on.
func explain(key string, err error) error {
	var rej *agentclient.RejectedError
	switch {
	case errors.Is(err, agentclient.ErrKeyReused):
		return fmt.Errorf("CONFLICT: idempotency_key %q was already used with different arguments, so nothing was done. "+
			"If you are retrying, resend the original arguments; if this is a new intent, use a new key", key)
	case errors.As(err, &rej):
		msg := fmt.Sprintf("REJECTED (%s): %s. Nothing was changed", rej.Code, rej.Problem.Detail)
		if rej.CurrentState != "" {
			msg += "; the order is " + rej.CurrentState
		}
		return errors.New(msg)
	case errors.Is(err, agentclient.ErrInvalidRequest):
		return fmt.Errorf("INVALID ARGUMENTS, nothing was recorded; fix them and call again with the same key: %w", err)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("NO ANSWER YET: the request may still complete. Call again with the SAME idempotency_key %q and the same arguments; it cannot run twice: %w", key, err)
	}
	return err
}

func (t tools) createTicket(ctx context.Context, req *mcp.CallToolRequest, in TicketArgs) (*mcp.CallToolResult, Result, error) {
	return t.call(ctx, req, in.IdempotencyKey, "/v1/tickets", map[string]any{
		"customer_id": in.CustomerID, "title": in.Title, "description": in.Description, "priority": in.Priority,
	})
}

func (t tools) createOrder(ctx context.Context, req *mcp.CallToolRequest, in OrderArgs) (*mcp.CallToolResult, Result, error) {
	body := map[string]any{"customer_id": in.CustomerID, "items": in.Items}
	if in.CouponCode != "" {
		body["coupon_code"] = in.CouponCode
	}
	return t.call(ctx, req, in.IdempotencyKey, "/v1/orders", body)
}

func (t tools) payOrder(ctx context.Context, req *mcp.CallToolRequest, in PayArgs) (*mcp.CallToolResult, Result, error) {
	return t.call(ctx, req, in.IdempotencyKey, "/v1/orders/"+url.PathEscape(in.OrderNo)+"/pay", map[string]any{"payment_ref": in.PaymentRef})
}

func (t tools) cancelOrder(ctx context.Context, req *mcp.CallToolRequest, in CancelArgs) (*mcp.CallToolResult, Result, error) {
	body := map[string]any{}
	if in.Reason != "" {
		body["reason"] = in.Reason
	}
	return t.call(ctx, req, in.IdempotencyKey, "/v1/orders/"+url.PathEscape(in.OrderNo)+"/cancel", body)
}

func (t tools) getOperation(ctx context.Context, req *mcp.CallToolRequest, in OperationArgs) (*mcp.CallToolResult, Result, error) {
	ctx, cancel := context.WithTimeout(ctx, t.cfg.CallTimeout)
	defer cancel()
	res, err := t.client(req).Get(ctx, "/v1/operations/"+url.PathEscape(in.OperationID))
	if err != nil {
		return nil, Result{}, err
	}
	return result(res)
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
}

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
	if opts.VerifyTTL <= 0 {
		opts.VerifyTTL = 10 * time.Second
	}
	tn := &tenants{cfg: cfg, servers: map[string]*tenantServer{}}
	h := mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		return tn.get(auth.TokenInfoFromContext(r.Context()).UserID).server
	}, &mcp.StreamableHTTPOptions{SessionTimeout: opts.IdleTimeout})
	limited := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, `{"type":"/problems/too-many-sessions","title":"Service Unavailable","status":503,"detail":"this tenant has %d open MCP sessions; close one or wait for an idle one to expire"}`, n)
			return
		}
		h.ServeHTTP(w, r)
	})
	v := &verifier{cfg: cfg, known: expirable.NewLRU[[32]byte, string](maxKnown, nil, opts.VerifyTTL)}
	return auth.RequireBearerToken(v.verify, nil)(limited)
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

// verifier checks bearer tokens with the gateway and remembers a tenant
// for VerifyTTL (tokens kept only as SHA-256 digests), as the gateway's
// tenant.Authenticator does for its own lookups.
type verifier struct {
	cfg   Config
	known *expirable.LRU[[32]byte, string]
}

// maxKnown bounds how many tokens the verifier remembers.
const maxKnown = 10000

func (v *verifier) verify(ctx context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
	sum := sha256.Sum256([]byte(token))
	tenantID, ok := v.known.Get(sum)
	if !ok {
		var err error
		if tenantID, err = v.ask(ctx, token); err != nil {
			return nil, err
		}
		v.known.Add(sum, tenantID)
	}
	// UserID binds a session to its tenant: the SDK refuses a session's
	// ID presented with another tenant's token. The SDK wants an
	// expiration; the token is checked again on every request anyway.
	return &auth.TokenInfo{UserID: tenantID, Expiration: time.Now().Add(time.Minute), Extra: map[string]any{"token": token}}, nil
}

// ask calls GET /v1/tenant with the token.
func (v *verifier) ask(ctx context.Context, token string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
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
