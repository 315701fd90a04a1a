package gateway

import (
	"net/http"
	"strings"

	"github.com/idemflow/idemflow/internal/oauth"
	"github.com/idemflow/idemflow/internal/problem"
	"github.com/idemflow/idemflow/internal/registry"
)

// unknownAction answers a path under a family's parent whose action no
// declaration serves (each action has its own route): a POST is a 404
// that names the actions, any other method a 405, as on the actions' own
// paths. Nothing is read or recorded.
func (g *Gateway) unknownAction(f registry.Family) http.HandlerFunc {
	wildcard := f.Pattern[strings.LastIndex(f.Pattern, "{")+1 : len(f.Pattern)-1]
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", "POST")
			writeProblem(w, problem.New(problem.TypeMethodNotAllowed, http.StatusMethodNotAllowed, r.Method+" is not allowed here; use POST"))
			return
		}
		g.authed(oauth.NeedNone, func(w http.ResponseWriter, r *http.Request, _ string) {
			writeNotFound(w, "no action "+r.PathValue(wildcard)+" under "+f.Parent+"; use "+strings.Join(f.Actions, ", "))
		})(w, r)
	}
}
