package tickets

// The ticket domain's contract with the rest of idemflow: what names its
// intents, how its workflows are identified, what they take and answer.

import "github.com/idemflow/idemflow/idem"

const (
	// BizType names the operation in idempotency records and fingerprints.
	BizType = "ticket.create"
	// Scope is the first segment of a ticket intent's workflow ID.
	Scope = "ticket"
)

// StatusOpen is a new ticket's status.
const StatusOpen = "open"

// WorkflowID is the workflow ID of a ticket intent (idem.WorkflowID derives
// it; the scope is the ticket's).
func WorkflowID(tenantID, key string) string { return idem.WorkflowID(Scope, tenantID, key) }

// Request is the body of POST /v1/tickets.
type Request struct {
	CustomerID  string `json:"customer_id"`
	Title       string `json:"title"`
	Description string `json:"description,omitempty"`
	Priority    string `json:"priority,omitempty"`
}

// View is the JSON representation of a ticket, the body of 201 replies,
// replays and GET /v1/tickets/{id}.
type View struct {
	TicketID       string `json:"ticket_id"`
	Status         string `json:"status"`
	CustomerID     string `json:"customer_id"`
	Title          string `json:"title"`
	Description    string `json:"description"`
	Priority       string `json:"priority"`
	CreatedAt      string `json:"created_at"`
	IdempotencyKey string `json:"idempotency_key"`
	WorkflowID     string `json:"workflow_id"`
}
