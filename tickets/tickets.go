// Package tickets is the support-ticket domain: the request an agent sends,
// its validation, the ticket table and the ticket's JSON representation.
package tickets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/idemflow/idemflow/apperr"
	"github.com/idemflow/idemflow/idem"
	"github.com/jackc/pgx/v5"
)

// Limits of a ticket request.
const (
	maxTitle       = 200
	maxDescription = 10000
	maxCustomerID  = 128
)

// Priorities a ticket may have.
var Priorities = []string{"low", "normal", "high", "urgent"}

// Normalize applies defaults and validates. The defaults are applied before
// fingerprinting, so an omitted priority and "normal" are the same intent.
func (r *Request) Normalize() error {
	if r.Priority == "" {
		r.Priority = "normal"
	}
	var v apperr.Invalid
	switch n := utf8.RuneCountInString(r.CustomerID); {
	case n == 0:
		v.Add("customer_id", "is required")
	case n > maxCustomerID:
		v.Add("customer_id", "is %d characters long, at most %d are allowed", n, maxCustomerID)
	}
	switch n := utf8.RuneCountInString(r.Title); {
	case n == 0:
		v.Add("title", "is required")
	case n > maxTitle:
		v.Add("title", "is %d characters long, at most %d are allowed", n, maxTitle)
	}
	if n := utf8.RuneCountInString(r.Description); n > maxDescription {
		v.Add("description", "is %d characters long, at most %d are allowed", n, maxDescription)
	}
	if !validPriority(r.Priority) {
		v.Add("priority", "must be one of low, normal, high, urgent; got %q", r.Priority)
	}
	for _, f := range []struct{ name, val string }{{"customer_id", r.CustomerID}, {"title", r.Title}, {"description", r.Description}} {
		if !utf8.ValidString(f.val) {
			v.Add(f.name, "is not valid UTF-8")
		}
	}
	return v.Err()
}

func validPriority(p string) bool {
	for _, q := range Priorities {
		if p == q {
			return true
		}
	}
	return false
}

// Fingerprint is the request's idempotency fingerprint; call after Normalize.
func (r Request) Fingerprint() (string, error) {
	return idem.Fingerprint(BizType, r)
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
	b, err := json.Marshal(View{
		TicketID:       t.ID.String(),
		Status:         t.Status,
		CustomerID:     t.CustomerID,
		Title:          t.Title,
		Description:    t.Description,
		Priority:       t.Priority,
		CreatedAt:      t.CreatedAt.UTC().Format(time.RFC3339Nano),
		IdempotencyKey: t.IdempotencyKey,
		WorkflowID:     t.WorkflowID,
	})
	if err != nil {
		panic(fmt.Sprintf("tickets: marshal view: %v", err)) // only strings: cannot fail
	}
	return b
}

// Location is the ticket's URL path.
func (t Ticket) Location() string { return "/v1/tickets/" + t.ID.String() }

// Outcome is the stored answer for a created ticket.
func (t Ticket) Outcome() idem.Outcome {
	return idem.Outcome{Status: 201, Body: t.Body(), Location: t.Location()}
}

// Store owns the ticket table.
type Store struct {
	db idem.Querier
}

// NewStore returns a Store over db.
func NewStore(db idem.Querier) *Store { return &Store{db: db} }

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

// Get returns a ticket of tenantID; another tenant's ticket is not found.
func (s *Store) Get(ctx context.Context, tenantID string, id uuid.UUID) (Ticket, error) {
	return scan(s.db.QueryRow(ctx, `SELECT `+columns+` FROM ticket WHERE id = $1 AND tenant_id = $2`, id, tenantID))
}

// GetByKey returns the ticket created under (tenantID, key), within q.
func GetByKey(ctx context.Context, q idem.Querier, tenantID, key string) (Ticket, error) {
	return scan(q.QueryRow(ctx, `SELECT `+columns+` FROM ticket WHERE tenant_id = $1 AND idem_key = $2`, tenantID, key))
}

// Insert writes a new ticket within q. created_at is cut to microseconds,
// PostgreSQL's precision, so the stored row renders exactly like the body
// returned now.
func Insert(ctx context.Context, q idem.Querier, t Ticket) (Ticket, error) {
	t.CreatedAt = t.CreatedAt.UTC().Truncate(time.Microsecond)
	if t.Status == "" {
		t.Status = StatusOpen
	}
	_, err := q.Exec(ctx, `INSERT INTO ticket (`+columns+`) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11)`,
		t.ID, t.TenantID, t.IdempotencyKey, t.Fingerprint, t.WorkflowID, t.CustomerID,
		t.Title, t.Description, t.Priority, t.Status, t.CreatedAt)
	if err != nil {
		return Ticket{}, fmt.Errorf("insert ticket %s/%s: %w", t.TenantID, t.IdempotencyKey, err)
	}
	return t, nil
}

// New builds the row for a create intent. The ID and time are made here, in
// an activity, never in workflow code.
func New(in CreateInput) Ticket {
	return Ticket{
		ID:             uuid.New(),
		TenantID:       in.Intent.TenantID,
		IdempotencyKey: in.Intent.Key,
		Fingerprint:    in.Intent.Fingerprint,
		WorkflowID:     in.Intent.WorkflowID,
		CustomerID:     in.Request.CustomerID,
		Title:          in.Request.Title,
		Description:    in.Request.Description,
		Priority:       in.Request.Priority,
		Status:         StatusOpen,
		CreatedAt:      time.Now(),
	}
}

// Guard is the ticket table's one-ticket-per-key constraint.
var Guard = idem.Guard{Table: "ticket"}

// Recall is idem.Recall for the ticket table: the ticket written under
// (tenantID, key), as the record it came from would say.
func Recall(ctx context.Context, q idem.Querier, tenantID, key string) (idem.Prior, bool, error) {
	t, err := GetByKey(ctx, q, tenantID, key)
	if errors.Is(err, apperr.ErrNotFound) {
		return idem.Prior{}, false, nil
	}
	if err != nil {
		return idem.Prior{}, false, fmt.Errorf("recall ticket %s/%s: %w", tenantID, key, err)
	}
	return idem.Prior{BizType: BizType, Fingerprint: t.Fingerprint, WorkflowID: t.WorkflowID, Outcome: t.Outcome()}, true, nil
}
