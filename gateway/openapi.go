package gateway

import (
	"net/http"

	"github.com/idemflow/idemflow/apispec"
	"github.com/idemflow/idemflow/registry"
)

// openAPI is the gateway's contract (apispec): every route, header, body
// and problem type. The tests check every request they send and every
// answer they get against it (testenv), so a route or a field that drifts
// from it fails CI.
var openAPI = apispec.Document()

// OpenAPI returns the contract document (a copy).
func OpenAPI() []byte { return apispec.Document() }

// serveOpenAPI serves the contract with a path for each declared
// operation of set, built once.
func (g *Gateway) serveOpenAPI(set *registry.Set) http.HandlerFunc {
	doc := openAPI
	if set != nil && len(set.Operations()) > 0 {
		var err error
		if doc, err = apispec.WithOperations(set.Operations()); err != nil {
			panic(err) // the embedded contract and Define's schemas are checked by the tests
		}
	}
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(doc)
	}
}
