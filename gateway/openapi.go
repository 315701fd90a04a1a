package gateway

import (
	"net/http"

	"github.com/idemflow/idemflow/apispec"
)

// openAPI is the gateway's contract (apispec): every route, header, body
// and problem type. The tests check every request they send and every
// answer they get against it (testenv), so a route or a field that drifts
// from it fails CI.
var openAPI = apispec.Document()

// OpenAPI returns the contract document (a copy).
func OpenAPI() []byte { return apispec.Document() }

func (g *Gateway) serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPI)
}
