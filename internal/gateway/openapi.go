package gateway

import (
	"net/http"
	"sync"

	"github.com/idemflow/idemflow/internal/apispec"
	"github.com/idemflow/idemflow/internal/registry"
)

// openAPI is the gateway's contract with idemflow's own operations
// (apispec, with each declaration's path and schema): every route, header,
// body and problem type. The tests check every request they send and every
// answer they get against it (testenv), so a route or a field that drifts
// from it fails CI.
var openAPI = sync.OnceValue(func() []byte { return contract(registry.Builtin()) })

// OpenAPI returns the contract document of idemflow's own operations (a
// copy).
func OpenAPI() []byte { return append([]byte(nil), openAPI()...) }

func contract(set *registry.Set) []byte {
	doc, err := apispec.WithOperations(set.Operations())
	if err != nil {
		panic(err) // the embedded contract and Define's schemas are checked by every gateway test
	}
	return doc
}

// serveOpenAPI serves the contract with the path of each declared
// operation of set, built once.
func (g *Gateway) serveOpenAPI(set *registry.Set) http.HandlerFunc {
	doc := contract(set)
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(doc)
	}
}
