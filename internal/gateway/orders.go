package gateway

import (
	"net/http"

	"github.com/idemflow/idemflow/internal/problem"
)

// unknownAction answers an order path whose action no declaration serves
// (each action has its own route): a POST is a 404 that names the actions,
// any other method a 405, as on the actions' own paths. Nothing is read
// or recorded.
func (g *Gateway) unknownAction(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		writeProblem(w, problem.New(problem.TypeMethodNotAllowed, http.StatusMethodNotAllowed, r.Method+" is not allowed here; use POST"))
		return
	}
	g.authed(func(w http.ResponseWriter, r *http.Request, _ string) {
		writeNotFound(w, "no order action "+r.PathValue("action")+"; use pay, cancel, refund or fulfill")
	})(w, r)
}
