// Command refund_request is idemflow with one more operation, declared by a
// team in its own code: a refund request, written to the team's own table.
// Every role runs with it (serve, worker, gateway, migrate, dev, mcp, audit,
// inspect), so a request to POST /v1/refund_request, or a call of the MCP
// tool refund_request, is exactly-once as a ticket is.
//
// It is a module of its own, as a team's is (go.mod replaces idemflow
// with the checkout); from this directory:
//
//	go run . dev
package main

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/idemflow/idemflow"
	"github.com/idemflow/idemflow/intent"
	"github.com/idemflow/idemflow/op"
	"github.com/jackc/pgx/v5"
)

// Request is what an agent sends.
type Request struct {
	PaymentID   string `json:"payment_id" jsonschema:"the captured payment to refund part of"`
	AmountCents int64  `json:"amount_cents" jsonschema:"how much to refund, in cents"`
	Reason      string `json:"reason,omitempty" jsonschema:"why, for the finance team"`
}

// RefundRequest is a row of the refund_request table.
type RefundRequest struct {
	ID          uuid.UUID
	TenantID    string
	Key         string
	PaymentID   string
	AmountCents int64
	Reason      string
	Status      string
	CreatedAt   time.Time
}

// View is the answer's body.
type View struct {
	RefundRequestID string `json:"refund_request_id"`
	PaymentID       string `json:"payment_id"`
	AmountCents     int64  `json:"amount_cents"`
	Reason          string `json:"reason"`
	Status          string `json:"status"`
	CreatedAt       string `json:"created_at"`
}

// maxRefundedCents bounds what one payment's refund requests may add up to.
const maxRefundedCents = 1_000_000

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Operation is the declaration: everything idemflow needs to know of it.
var Operation = op.Define(op.Spec[Request, RefundRequest]{
	Name:        "refund_request",
	Description: "Ask finance to refund part of a captured payment; the request is recorded at most once.",
	Rules: func(s *op.Schema) {
		s.Properties["payment_id"].MinLength = op.Ptr(1)
		s.Properties["payment_id"].MaxLength = op.Ptr(64)
		s.Properties["payment_id"].Pattern = `^[A-Za-z0-9_-]+$`
		s.Properties["amount_cents"].Minimum = op.Ptr(1.0)
		s.Properties["amount_cents"].Maximum = op.Ptr(float64(maxRefundedCents))
		s.Properties["reason"].MaxLength = op.Ptr(500)
	},
	// One refund request is this payment's, for this amount: the reason is
	// a note a model words anew on a regenerate, so it makes no intent.
	Intent:  []op.IntentField{{Name: "payment_id", Norm: intent.ID}, {Name: "amount_cents", Norm: intent.Number}},
	Summary: func(r Request) string { return fmt.Sprintf("refund %d cents of %s", r.AmountCents, r.PaymentID) },
	Step:    insert,
	Lookup:  lookup,
	View:    view,
	Table:   "refund_request",
	Rejections: map[string]string{
		"refund-limit-exceeded": "The refund requests of this payment would add up to more than the limit; nothing was recorded. " +
			"A retry with the same key may run again, once the limit allows it.",
	},
	Migrations: op.MustSub(migrationFiles, "migrations"),
	// GET /v1/refund_request/{refund_request_id}: what a key wrote, read
	// again by its ID (from the answer), for the caller's tenant only.
	Reads: []op.Read{{Route: "/v1/refund_request/{refund_request_id}", Summary: "Read a refund request", Get: get}},
	// The answer's schema, in the served contract: View's fields.
	Answer: op.SchemaFor[View](func(s *op.Schema) {
		s.Title = "RefundRequest"
		s.Properties["refund_request_id"].Format = "uuid"
		s.Properties["created_at"].Format = "date-time"
	}),
})

func main() { idemflow.Main(Operation) }

// insert writes the refund request, in the transaction that finishes the
// intent's record: it commits with it, or not at all.
func insert(ctx context.Context, tx pgx.Tx, in op.In[Request]) (RefundRequest, error) {
	var refunded int64
	if err := tx.QueryRow(ctx, `SELECT coalesce(sum(amount_cents), 0) FROM refund_request WHERE tenant_id = $1 AND payment_id = $2`,
		in.TenantID, in.Request.PaymentID).Scan(&refunded); err != nil {
		return RefundRequest{}, err
	}
	if refunded+in.Request.AmountCents > maxRefundedCents {
		return RefundRequest{}, &op.Rejection{Code: "refund-limit-exceeded",
			Reason: fmt.Sprintf("payment %s has %d cents requested already; %d more exceeds %d", in.Request.PaymentID, refunded, in.Request.AmountCents, maxRefundedCents)}
	}
	r := RefundRequest{ID: uuid.New(), TenantID: in.TenantID, Key: in.Key, PaymentID: in.Request.PaymentID,
		AmountCents: in.Request.AmountCents, Reason: in.Request.Reason, Status: "requested",
		// PostgreSQL keeps microseconds: the answer rebuilt from the row
		// after a purge is then the same bytes.
		CreatedAt: time.Now().UTC().Truncate(time.Microsecond)}
	// The row is built here: its INSERT needs no answer, so it goes with
	// the commit (op.Later), one round trip fewer.
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO refund_request (id, tenant_id, idem_key, payment_id, amount_cents, reason, status, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, r.ID, r.TenantID, r.Key, r.PaymentID, r.AmountCents, r.Reason, r.Status, r.CreatedAt)
	return r, op.Later(ctx, tx, b)
}

// lookup reads the refund request a key wrote.
func lookup(ctx context.Context, q op.Querier, tenantID, key string) (RefundRequest, bool, error) {
	return scan(q.QueryRow(ctx, `SELECT `+columns+` FROM refund_request WHERE tenant_id = $1 AND idem_key = $2`, tenantID, key))
}

// get reads a refund request of tenantID by its ID: another tenant's is
// not found.
func get(ctx context.Context, q op.Querier, tenantID string, path func(string) string) (json.RawMessage, error) {
	id, err := uuid.Parse(path("refund_request_id"))
	if err != nil {
		return nil, op.NotFound("no refund request " + path("refund_request_id"))
	}
	r, found, err := scan(q.QueryRow(ctx, `SELECT `+columns+` FROM refund_request WHERE tenant_id = $1 AND id = $2`, tenantID, id))
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, op.NotFound("no refund request " + id.String())
	}
	return json.Marshal(view(r).Body)
}

const columns = `id, tenant_id, idem_key, payment_id, amount_cents, reason, status, created_at`

func scan(row pgx.Row) (RefundRequest, bool, error) {
	var r RefundRequest
	err := row.Scan(&r.ID, &r.TenantID, &r.Key, &r.PaymentID, &r.AmountCents, &r.Reason, &r.Status, &r.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, false, nil
	}
	return r, err == nil, err
}

func view(r RefundRequest) op.Answer {
	return op.Answer{Status: 201, Body: View{RefundRequestID: r.ID.String(), PaymentID: r.PaymentID, AmountCents: r.AmountCents,
		Reason: r.Reason, Status: r.Status, CreatedAt: r.CreatedAt.UTC().Format(time.RFC3339Nano)}}
}
