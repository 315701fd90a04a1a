package starter

import (
	"fmt"

	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/tickets"
	"github.com/idemflow/idemflow/workflows"
)

// TicketIntent validates a ticket request and builds its submission; the
// MCP server uses it too, so both paths apply the same rules and derive the
// same identity.
func TicketIntent(tenantID, key string, req tickets.Request) (Intent, error) {
	if err := req.Normalize(); err != nil {
		return Intent{}, err
	}
	fp, err := req.Fingerprint()
	if err != nil {
		return Intent{}, err
	}
	return newIntent(tenantID, key, tickets.BizType, fp, tickets.WorkflowID(tenantID, key),
		workflows.CreateTicket, func(it idem.Intent) any { return tickets.CreateInput{Intent: it, Request: req} },
		fmt.Sprintf("ticket for %s: %s", req.CustomerID, truncate(req.Title, 80))), nil
}

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}
