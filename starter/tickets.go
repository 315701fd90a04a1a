package starter

import (
	"fmt"

	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/tickets"
	"github.com/idemflow/idemflow/workflows"
)

// Ticket is how a ticket request becomes a submission.
var Ticket = Kind[*tickets.Request]{
	BizType:    func(*tickets.Request) string { return tickets.BizType },
	WorkflowID: func(tenantID, key string, _ *tickets.Request) string { return tickets.WorkflowID(tenantID, key) },
	Workflow:   workflows.CreateTicket,
	Input: func(it idem.Intent, req *tickets.Request) any {
		return tickets.CreateInput{Intent: it, Request: *req}
	},
	Summary: func(req *tickets.Request) string {
		return fmt.Sprintf("ticket for %s: %s", req.CustomerID, truncate(req.Title, 80))
	},
}

// TicketIntent validates a ticket request and builds its submission.
func TicketIntent(tenantID, key string, req tickets.Request) (Intent, error) {
	return Build(Ticket, tenantID, key, &req)
}

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}
