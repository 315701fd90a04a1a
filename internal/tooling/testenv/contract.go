package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/idemflow/idemflow/internal/gateway"
	"github.com/idemflow/idemflow/internal/registry"
)

// routers holds a router per OpenAPI document, loaded once per test
// binary: the built-in contract, and the contract with a stack's declared
// operations (apispec.WithOperations). A document never changes while the
// tests run.
var contractRouters sync.Map // string(document) -> func() (routers.Router, error)

func contractRouter(document []byte) (routers.Router, error) {
	load, _ := contractRouters.LoadOrStore(string(document), sync.OnceValues(func() (routers.Router, error) {
		doc, err := LoadContractFrom(document)
		if err != nil {
			return nil, err
		}
		doc.Servers = nil // match any host: tests run on random ports
		return gorillamux.NewRouter(doc)
	}))
	return load.(func() (routers.Router, error))()
}

// builtinDocument is the contract of a gateway that serves the built-ins
// alone, built once per test binary (the gateway builds it once too):
// CheckContract checks every exchange against it.
var builtinDocument = sync.OnceValues(func() ([]byte, error) {
	set, err := registry.New()
	if err != nil {
		return nil, err
	}
	return gateway.Contract(set)
})

// LoadContract loads and validates the gateway's OpenAPI document.
func LoadContract() (*openapi3.T, error) {
	doc, err := builtinDocument()
	if err != nil {
		return nil, err
	}
	return LoadContractFrom(doc)
}

// builtinContract is builtinDocument, or the test's failure.
func builtinContract(t testing.TB) []byte {
	t.Helper()
	doc, err := builtinDocument()
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// LoadContractFrom loads and validates an OpenAPI document.
func LoadContractFrom(document []byte) (*openapi3.T, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(document)
	if err != nil {
		return nil, fmt.Errorf("load the OpenAPI document: %w", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("the OpenAPI document is not valid: %w", err)
	}
	return doc, nil
}

// CheckContract checks one exchange with the gateway against its OpenAPI
// document, both ways: the answer must be one the document describes (its
// status, headers and body), and a request the gateway accepted (2xx) must
// be one the document allows. A request the document refuses may still be
// sent, by tests of bad input; its answer is checked all the same.
func CheckContract(t testing.TB, method, url string, header http.Header, body []byte, resp Response) {
	t.Helper()
	CheckContractOf(t, builtinContract(t), method, url, header, body, resp)
}

// CheckContractOf is CheckContract against document: the contract a
// gateway with declared operations serves.
func CheckContractOf(t testing.TB, document []byte, method, url string, header http.Header, body []byte, resp Response) {
	t.Helper()
	router, err := contractRouter(document)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = header.Clone()
	route, params, err := router.FindRoute(req)
	if errors.Is(err, routers.ErrMethodNotAllowed) {
		// A known path with another method: its answer must be the 405
		// the path's documented operations describe.
		for _, m := range []string{http.MethodGet, http.MethodPost} {
			other := req.Clone(context.Background())
			other.Method = m
			if route, params, err = router.FindRoute(other); err == nil {
				if resp.Status != http.StatusMethodNotAllowed {
					t.Errorf("contract: %s %s is not documented, yet answered %d", method, req.URL.Path, resp.Status)
				}
				req = other
				break
			}
		}
	}
	if err != nil {
		if resp.Status < 300 {
			t.Errorf("contract: %s %s answered %d but is not in the OpenAPI document: %v", method, req.URL.Path, resp.Status, err)
		}
		return
	}
	if !checkMediaType(t, route, req, body, resp) {
		return
	}
	ctx := context.Background()
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
	if err := openapi3filter.ValidateRequest(ctx, in); err != nil && resp.Status < 300 {
		t.Errorf("contract: the gateway accepted (%d) a request the OpenAPI document refuses: %s %s: %v", resp.Status, method, req.URL.Path, err)
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.Status, Header: resp.Header,
		Body: io.NopCloser(bytes.NewReader(resp.Body)), Options: &openapi3filter.Options{IncludeResponseStatus: true}}
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		t.Errorf("contract: the answer to %s %s does not match the OpenAPI document: %v\n%s", method, req.URL.Path, err, resp.Body)
	}
}

// checkMediaType holds the gateway to the request media types the document
// declares: a body in another type must be refused with 415, and one in a
// declared type must not be. A request without Content-Type is read as
// JSON, as the document says, so it is validated as application/json. It
// reports whether the rest of the exchange is worth validating.
func checkMediaType(t testing.TB, route *routers.Route, req *http.Request, body []byte, resp Response) bool {
	t.Helper()
	rb := route.Operation.RequestBody
	if rb == nil || rb.Value == nil || len(body) == 0 {
		return true
	}
	ct := req.Header.Get("Content-Type")
	if ct == "" {
		req.Header.Set("Content-Type", "application/json")
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	declared := err == nil && rb.Value.Content.Get(mt) != nil
	switch {
	case !declared && resp.Status != http.StatusUnsupportedMediaType &&
		resp.Status != http.StatusUnauthorized && resp.Status != http.StatusNotFound:
		// A caller or a resource that does not exist is refused before
		// the body is looked at; anything else must be the 415.
		t.Errorf("contract: %s %s sent Content-Type %q, which the document does not declare, and answered %d, not 415", req.Method, req.URL.Path, ct, resp.Status)
		return false
	case declared && resp.Status == http.StatusUnsupportedMediaType:
		t.Errorf("contract: %s %s sent a declared Content-Type %q and was refused with 415", req.Method, req.URL.Path, ct)
		return false
	}
	return true
}
