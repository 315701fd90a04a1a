package gateway_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/idemflow/idemflow/internal/apispec"
	"github.com/idemflow/idemflow/internal/registry"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
	"github.com/idemflow/idemflow/op"
	"github.com/jackc/pgx/v5"
)

type widgetRequest struct {
	WidgetID string `json:"widget_id"`
}

// keyedTable is the migration of a test operation's table: only its key,
// under the unique constraint every role requires before it serves the
// operation. IF NOT EXISTS: several test operations may share a table.
func keyedTable(name string) fstest.MapFS {
	return fstest.MapFS{"001_" + name + ".sql": {Data: []byte(`CREATE TABLE IF NOT EXISTS ` + name +
		` (tenant_id text NOT NULL, idem_key text NOT NULL, UNIQUE (tenant_id, idem_key));`)}}
}

// widgetOp declares a team's operation at route, with what a built-in
// carries: its links, a read, a seed and an example.
func widgetOp(name, route string, spec func(*op.Spec[widgetRequest, struct{}])) *op.Operation {
	s := op.Spec[widgetRequest, struct{}]{
		Name:  name,
		Route: route,
		Step:  func(context.Context, pgx.Tx, op.In[widgetRequest]) (struct{}, error) { return struct{}{}, nil },
		Lookup: func(context.Context, op.Querier, string, string) (struct{}, bool, error) {
			return struct{}{}, false, nil
		},
		View:       func(struct{}) op.Answer { return op.Answer{Body: map[string]string{"widget_id": "w-1"}} },
		Table:      "widget",
		Migrations: keyedTable("widget"),
	}
	if spec != nil {
		spec(&s)
	}
	return op.Define(s)
}

// A team's declaration carries what the built-ins' do, and gets what they
// get: its links on its answer, its read named for them, its demo data on
// every new tenant, and a 404 that lists its family's actions. The
// contract's paths for it come from neutral templates, which name no
// built-in's rules.
func TestADeclarationCarriesItsLinksSeedAndFamilyAsABuiltInDoes(t *testing.T) {
	var mu sync.Mutex
	var seeded []string
	create := widgetOp("create_widget", "/v1/widgets", func(s *op.Spec[widgetRequest, struct{}]) {
		s.Reads = []op.Read{{Route: "/v1/widgets/{widget_id}", OperationID: "getWidget",
			Get: func(context.Context, op.Querier, string, func(string) string) (json.RawMessage, error) {
				return nil, op.ErrNotFound
			}}}
		s.Links = []op.Link{
			{Name: "getWidget", OperationID: "getWidget", Parameters: map[string]string{"widget_id": "$response.body#/widget_id"}},
			{Name: "archiveWidget", OperationID: "archive_widget", Parameters: map[string]string{"widget_id": "$response.body#/widget_id"}},
		}
		s.Seed = func(_ context.Context, _ op.Querier, tenantID string) error {
			mu.Lock()
			defer mu.Unlock()
			seeded = append(seeded, tenantID)
			return nil
		}
	})
	archive := widgetOp("archive_widget", "/v1/widgets/{widget_id}/archive", nil)
	restore := widgetOp("restore_widget", "/v1/widgets/{widget_id}/restore", nil)
	s := testenv.NewStack(t, testenv.Options{Operations: []*op.Operation{create, archive, restore}, NoWorker: true})

	var doc struct {
		Paths map[string]map[string]struct {
			OperationID string `json:"operationId"`
			Responses   map[string]struct {
				Description string                     `json:"description"`
				Links       map[string]json.RawMessage `json:"links"`
			} `json:"responses"`
		} `json:"paths"`
		Templates json.RawMessage `json:"x-templates"`
	}
	if err := json.Unmarshal(s.Contract, &doc); err != nil {
		t.Fatal(err)
	}
	post := doc.Paths["/v1/widgets"]["post"]
	if l := post.Responses["201"].Links; l["getWidget"] == nil || l["archiveWidget"] == nil || l["getOperation"] == nil {
		t.Errorf("the 201 of POST /v1/widgets has links %v, want getWidget, archiveWidget and getOperation", keys(l))
	}
	if id := doc.Paths["/v1/widgets/{widget_id}"]["get"].OperationID; id != "getWidget" {
		t.Errorf("the read's operationId is %q, want the declared getWidget", id)
	}
	for code, r := range post.Responses {
		for _, builtin := range []string{"order", "ticket", "out-of-stock", "invalid-transition"} {
			if strings.Contains(r.Description, builtin) {
				t.Errorf("the derived %s of POST /v1/widgets names a built-in's %q: %s", code, builtin, r.Description)
			}
		}
	}
	if _, ok := post.Responses["404"]; ok {
		t.Error("the derived POST /v1/widgets answers 404, which only an operation with a Check can")
	}
	if doc.Templates != nil {
		t.Error("the served contract carries the templates it was derived from")
	}
	mu.Lock()
	if !slices.Contains(seeded, testenv.TenantA) || !slices.Contains(seeded, testenv.TenantB) {
		t.Errorf("the declaration's seed ran for %v, want both of the stack's tenants", seeded)
	}
	mu.Unlock()

	// An action no declaration serves is told its family's actions, for
	// the team's and the built-ins' alike; another method is a 405.
	for _, c := range []struct{ path, want string }{
		{"/v1/widgets/w-1/explode", "no action explode under /v1/widgets/{widget_id}; use archive, restore"},
		{"/v1/orders/ORD-1/teleport", "no action teleport under /v1/orders/{order_no}; use pay, cancel, refund, fulfill"},
	} {
		r := s.Do(testenv.Request{Path: c.path, Token: s.Tokens[testenv.TenantA], Key: "k-1", Body: `{}`})
		if r.Status != 404 || !strings.Contains(string(r.Body), c.want) {
			t.Errorf("POST %s: %d %s, want 404 with %q", c.path, r.Status, r.Body, c.want)
		}
		if r := s.Do(testenv.Request{Method: "GET", Path: c.path, Token: s.Tokens[testenv.TenantA]}); r.Status != 405 || r.Header.Get("Allow") != "POST" {
			t.Errorf("GET %s: %d Allow %q, want 405 Allow POST", c.path, r.Status, r.Header.Get("Allow"))
		}
	}
}

// A link to an operation the contract does not have, and a path two
// declarations both write, are refused when the contract is built: a
// client would otherwise follow a link to nowhere.
func TestADeclarationsLinkToNowhereOrSecondPathIsRefused(t *testing.T) {
	lost := widgetOp("lost_widget", "", func(s *op.Spec[widgetRequest, struct{}]) {
		s.Links = []op.Link{{Name: "nowhere", OperationID: "getNothing"}}
	})
	if _, err := apispec.WithOperations(append(registry.Builtins(), lost)); err == nil || !strings.Contains(err.Error(), "getNothing") {
		t.Errorf("a link to getNothing: %v, want an error naming it", err)
	}
	twice := widgetOp("twice_widget", "", func(s *op.Spec[widgetRequest, struct{}]) {
		s.Paths = []byte(`{"/v1/tickets": {"post": {"responses": {}}}}`)
	})
	if _, err := apispec.WithOperations(append(registry.Builtins(), twice)); err == nil || !strings.Contains(err.Error(), "written twice") {
		t.Errorf("a second author of /v1/tickets: %v, want an error", err)
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
