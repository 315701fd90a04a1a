package gateway

import (
	"net/http"

	"github.com/google/uuid"
	"github.com/idemflow/idemflow/starter"
	"github.com/idemflow/idemflow/tickets"
)

func (g *Gateway) createTicket(w http.ResponseWriter, r *http.Request, tenantID string) {
	var req tickets.Request
	g.serveIntent(w, r, tickets.BizType, &req, false, func(key string) (starter.Intent, error) { return starter.TicketIntent(tenantID, key, req) })
}

func (g *Gateway) getTicket(w http.ResponseWriter, r *http.Request, tenantID string) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		writeNotFound(w, "no ticket "+r.PathValue("id"))
		return
	}
	t, err := g.Tickets.Get(r.Context(), tenantID, id)
	g.answerRead(w, r, "no ticket "+id.String(), err, func() { writeBody(w, t.Body()) })
}
