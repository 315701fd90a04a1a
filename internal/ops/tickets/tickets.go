// Package tickets is the support-ticket domain: the request an agent sends,
// its validation, the ticket table and the ticket's JSON representation.
package tickets

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/intent"
	"github.com/idemflow/idemflow/internal/apperr"
	"github.com/idemflow/idemflow/op"
	"github.com/jackc/pgx/v5"
)

// Create is the declaration of ticket creation: POST /v1/tickets, the MCP
// tool create_ticket, workflow and activity CreateTicket (the names it had
// before declarations, so that recorded histories and workflow IDs hold).
var Create = op.Define(op.Spec[Request, Ticket]{
	Name:        "create_ticket",
	Description: "Create a support ticket.",
	Route:       "/v1/tickets",
	BizType:     BizType,
	Scope:       Scope,
	Workflow:    "CreateTicket",
	Activity:    "CreateTicket",
	Rules: func(s *op.Schema) {
		s.Properties["customer_id"].MinLength, s.Properties["customer_id"].MaxLength = op.Ptr(1), op.Ptr(128)
		s.Properties["title"].MinLength, s.Properties["title"].MaxLength = op.Ptr(1), op.Ptr(200)
		s.Properties["description"].MaxLength = op.Ptr(10000)
		s.Properties["priority"].Enum = []any{"low", "normal", "high", "urgent"}
		s.Properties["priority"].Default = json.RawMessage(`"normal"`)
		s.Examples = []any{map[string]any{"customer_id": "c-1", "title": "Printer on fire", "priority": "high"}}
	},
	Normalize: (*Request).Normalize,
	// One ticket is the customer's: its title, description and priority
	// are what a model rewords on a regenerate. Two tickets for one
	// customer in one turn stay two by the occurrence the clients count.
	Intent: []op.IntentField{{Name: "customer_id", Norm: intent.ID}},
	Summary: func(r Request) string {
		return fmt.Sprintf("ticket for %s: %s", r.CustomerID, truncate(r.Title, 80))
	},
	// The row is built in Go, so its INSERT needs no answer: it rides in
	// the pipeline that opens the transaction, finishes the record and
	// commits (op.Later), one round trip for a new ticket.
	Step: func(ctx context.Context, tx pgx.Tx, in op.In[Request]) (Ticket, error) {
		b := &pgx.Batch{}
		t := queueInsert(b, New(in))
		return t, op.Later(ctx, tx, b)
	},
	Lookup: func(ctx context.Context, q op.Querier, tenantID, key string) (Ticket, bool, error) {
		t, err := GetByKey(ctx, q, tenantID, key)
		return t, err == nil, err
	},
	View:   Ticket.answer,
	Table:  "ticket",
	Reads:  []op.Read{{Route: "/v1/tickets/{id}", Get: read, OperationID: "getTicket"}},
	Answer: op.MustSchema(answerSchema),
	Paths:  contract,
	Links: []op.Link{{Name: "getTicket", OperationID: "getTicket",
		Parameters: map[string]string{"id": "$response.body#/ticket_id"}}},
	Example:    `{"customer_id":"c-1","title":"Printer on fire","priority":"high"}`,
	Migrations: op.MustSub(migrationFiles, "migrations"),
})

// migrationFiles are the ticket table's schema, in the tickets' own chain.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// contract is the ticket's paths in the contract, with their answers'
// statuses and texts.
//
//go:embed openapi.json
var contract []byte

// answerSchema is the ticket's JSON Schema: the body of a 201, its
// replays and GET /v1/tickets/{id} (View).
//
//go:embed ticket.schema.json
var answerSchema []byte

// Normalize applies the default priority before the fingerprint, so that
// an omitted priority and "normal" are the same intent. Every other rule is
// the declaration's schema.
func (r *Request) Normalize() error {
	if r.Priority == "" {
		r.Priority = "normal"
	}
	return nil
}

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}

// Ticket is a row of the ticket table.
type Ticket struct {
	ID             uuid.UUID
	TenantID       string
	IdempotencyKey string
	Fingerprint    string
	WorkflowID     string
	CustomerID     string
	Title          string
	Description    string
	Priority       string
	Status         string
	CreatedAt      time.Time
}

// Body renders t. It depends on the row alone, so a snapshot rebuilt from
// the row (by reconcile) is byte-identical to the one stored at creation.
func (t Ticket) Body() []byte {
	b, err := json.Marshal(t.view())
	if err != nil {
		panic(fmt.Sprintf("tickets: marshal view: %v", err)) // only strings: cannot fail
	}
	return b
}

// answer is the stored answer of a created ticket.
func (t Ticket) answer() op.Answer {
	return op.Answer{Status: 201, Body: t.view(), Location: t.Location()}
}

func (t Ticket) view() View {
	return View{
		TicketID:       t.ID.String(),
		Status:         t.Status,
		CustomerID:     t.CustomerID,
		Title:          t.Title,
		Description:    t.Description,
		Priority:       t.Priority,
		CreatedAt:      t.CreatedAt.UTC().Format(time.RFC3339Nano),
		IdempotencyKey: t.IdempotencyKey,
		WorkflowID:     t.WorkflowID,
	}
}

// Location is the ticket's URL path.
func (t Ticket) Location() string { return "/v1/tickets/" + t.ID.String() }

const columns = `id, tenant_id, idem_key, fingerprint, workflow_id, customer_id,
	title, description, priority, status, created_at`

func scan(row pgx.Row) (Ticket, error) {
	var t Ticket
	err := row.Scan(&t.ID, &t.TenantID, &t.IdempotencyKey, &t.Fingerprint, &t.WorkflowID,
		&t.CustomerID, &t.Title, &t.Description, &t.Priority, &t.Status, &t.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Ticket{}, apperr.ErrNotFound
	}
	return t, err
}

// Get returns a ticket of tenantID, within q; another tenant's ticket is
// not found.
func Get(ctx context.Context, q idem.Querier, tenantID string, id uuid.UUID) (Ticket, error) {
	return scan(q.QueryRow(ctx, `SELECT `+columns+` FROM ticket WHERE id = $1 AND tenant_id = $2`, id, tenantID))
}

// read is GET /v1/tickets/{id}: a ticket of the caller's tenant.
func read(ctx context.Context, q op.Querier, tenantID string, path func(string) string) (json.RawMessage, error) {
	id, err := uuid.Parse(path("id"))
	if err != nil {
		return nil, op.NotFound("no ticket " + path("id"))
	}
	t, err := Get(ctx, q, tenantID, id)
	if errors.Is(err, apperr.ErrNotFound) {
		return nil, op.NotFound("no ticket " + id.String())
	}
	if err != nil {
		return nil, err
	}
	return t.Body(), nil
}

// GetByKey returns the ticket created under (tenantID, key), within q.
func GetByKey(ctx context.Context, q idem.Querier, tenantID, key string) (Ticket, error) {
	return scan(q.QueryRow(ctx, `SELECT `+columns+` FROM ticket WHERE tenant_id = $1 AND idem_key = $2`, tenantID, key))
}

// Insert writes a new ticket within q. created_at is cut to microseconds,
// PostgreSQL's precision, so the stored row renders exactly like the body
// returned now.
func Insert(ctx context.Context, q idem.Querier, t Ticket) (Ticket, error) {
	t = stored(t)
	if _, err := q.Exec(ctx, insertSQL, t.insertArgs()...); err != nil {
		return Ticket{}, fmt.Errorf("insert ticket %s/%s: %w", t.TenantID, t.IdempotencyKey, err)
	}
	return t, nil
}

// queueInsert queues t's INSERT on b and returns the row as it is stored.
func queueInsert(b *pgx.Batch, t Ticket) Ticket {
	t = stored(t)
	b.Queue(insertSQL, t.insertArgs()...)
	return t
}

// stored is t as the table keeps it: created_at cut to microseconds, the
// status set.
func stored(t Ticket) Ticket {
	t.CreatedAt = t.CreatedAt.UTC().Truncate(time.Microsecond)
	if t.Status == "" {
		t.Status = StatusOpen
	}
	return t
}

const insertSQL = `INSERT INTO ticket (` + columns + `) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11)`

func (t Ticket) insertArgs() []any {
	return []any{t.ID, t.TenantID, t.IdempotencyKey, t.Fingerprint, t.WorkflowID, t.CustomerID,
		t.Title, t.Description, t.Priority, t.Status, t.CreatedAt}
}

// New builds the row for a create intent. The ID and time are made here, in
// an activity, never in workflow code.
func New(in op.In[Request]) Ticket {
	return Ticket{
		ID:             uuid.New(),
		TenantID:       in.TenantID,
		IdempotencyKey: in.Key,
		Fingerprint:    in.Fingerprint,
		WorkflowID:     in.WorkflowID,
		CustomerID:     in.Request.CustomerID,
		Title:          in.Request.Title,
		Description:    in.Request.Description,
		Priority:       in.Request.Priority,
		Status:         StatusOpen,
		CreatedAt:      time.Now(),
	}
}
