package gateway

import (
	_ "embed"
	"net/http"
)

// openAPI is the gateway's contract, OpenAPI 3.1: every route, header,
// body and problem type. The tests check every request they send and every
// answer they get against it (testenv), so a route or a field that drifts
// from it fails CI.
//
//go:embed openapi.json
var openAPI []byte

// OpenAPI returns the contract document (a copy).
func OpenAPI() []byte { return append([]byte(nil), openAPI...) }

func (g *Gateway) serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPI)
}
