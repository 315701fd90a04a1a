package gateway

import (
	"net/http"

	"github.com/google/uuid"
)

func (g *Gateway) getTicket(w http.ResponseWriter, r *http.Request, tenantID string) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		writeNotFound(w, "no ticket "+r.PathValue("id"))
		return
	}
	t, err := g.Tickets.Get(r.Context(), tenantID, id)
	g.answerRead(w, r, "no ticket "+id.String(), err, func() { writeBody(w, t.Body()) })
}
