package gateway

import (
	"net/http"

	"github.com/idemflow/idemflow/internal/apispec"
	"github.com/idemflow/idemflow/internal/registry"
)

// Contract is the gateway's contract for set (apispec, with each
// operation's path and schema): every route, header, body and problem
// type. The tests check every request they send and every answer they get
// against it (testenv), so a route or a field that drifts from it fails
// CI.
func Contract(set *registry.Set) ([]byte, error) { return apispec.WithOperations(set.Operations()) }

// serveOpenAPI serves the contract with the path of each declared
// operation of set, built once.
func (g *Gateway) serveOpenAPI(set *registry.Set) http.HandlerFunc {
	doc, err := Contract(set)
	if err != nil {
		panic(err) // the embedded contract and Define's schemas are checked by every gateway test
	}
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(doc)
	}
}
