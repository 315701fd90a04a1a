package op_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/idemflow/idemflow/internal/apperr"
	"github.com/idemflow/idemflow/internal/registry"
	"github.com/idemflow/idemflow/op"
	"github.com/jackc/pgx/v5"
)

type request struct {
	Name  string `json:"name"`
	Count int    `json:"count,omitempty"`
}

type row struct{ Name string }

func spec(name string) op.Spec[request, row] {
	return op.Spec[request, row]{
		Name: name,
		Rules: func(s *op.Schema) {
			s.Properties["name"].MaxLength = op.Ptr(5)
			s.Properties["count"].Minimum = op.Ptr(1.0)
		},
		Step:   func(context.Context, pgx.Tx, op.In[request]) (row, error) { return row{}, nil },
		Lookup: func(context.Context, op.Querier, string, string) (row, bool, error) { return row{}, false, nil },
		View:   func(r row) op.Answer { return op.Answer{Body: r} },
		Table:  name,
	}
}

func define(s op.Spec[request, row]) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = errors.New(r.(string))
		}
	}()
	op.Define(s)
	return nil
}

// A declaration that cannot work is refused when it is made, at start-up,
// with what is wrong; so is one that takes a name something else holds.
func TestADeclarationThatCannotWorkIsRefused(t *testing.T) {
	noStep := spec("widget")
	noStep.Step = nil
	typo := spec("widget")
	typo.Rules = func(s *op.Schema) { s.Properties["nmae"].MaxLength = op.Ptr(5) }
	noTable := spec("widget")
	noTable.Table = ""
	readNoGet := spec("widget")
	readNoGet.Reads = []op.Read{{Route: "/v1/widget/{id}"}}
	readWithMethod := spec("widget")
	readWithMethod.Reads = []op.Read{{Route: "GET /v1/widget/{id}", Get: func(context.Context, op.Querier, string, func(string) string) (json.RawMessage, error) {
		return nil, nil
	}}}
	for name, s := range map[string]op.Spec[request, row]{
		"bad name": spec("Widget!"), "no step": noStep, "rule on no field": typo, "no table": noTable,
		"a read without Get": readNoGet, "a read with a method": readWithMethod,
	} {
		if err := define(s); err == nil {
			t.Errorf("%s: defined", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
	if err := define(spec("widget")); err != nil {
		t.Fatal(err)
	}

	for name, ops := range map[string][]*op.Operation{
		"a built-in route":    {op.Define(spec("tickets"))},
		"a built-in tool":     {op.Define(spec("create_ticket"))},
		"another's name":      {op.Define(spec("widget")), op.Define(spec("widget"))},
		"a built-in biz type": {op.Define(func() op.Spec[request, row] { s := spec("widget"); s.BizType = "ticket.create"; return s }())},
		"an order's scope":    {op.Define(func() op.Spec[request, row] { s := spec("widget"); s.Scope = "order-pay"; return s }())},
		"a built-in's read route": {op.Define(func() op.Spec[request, row] {
			s := spec("widget")
			s.Reads = []op.Read{{Route: "/v1/tickets/{id}", Get: func(context.Context, op.Querier, string, func(string) string) (json.RawMessage, error) {
				return nil, nil
			}}}
			return s
		}())},
		"idemflow's own read route": {op.Define(func() op.Spec[request, row] {
			s := spec("widget")
			s.Reads = []op.Read{{Route: "/v1/operations/{id}", Get: func(context.Context, op.Querier, string, func(string) string) (json.RawMessage, error) {
				return nil, nil
			}}}
			return s
		}())},
	} {
		if _, err := registry.New(ops...); err == nil {
			t.Errorf("%s: accepted", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
	if _, err := registry.New(op.Define(spec("widget")), op.Define(spec("gadget"))); err != nil {
		t.Fatal(err)
	}
}

// The schema derived from the request type and its rules is the one check:
// each failing rule is one field error, and a body that passes is
// normalized and fingerprinted the same however it is spelt.
func TestTheSchemaIsDerivedFromTheRequestAndEnforced(t *testing.T) {
	o := op.Define(spec("widget"))
	schema := o.RequestSchema()
	if req, _ := schema["required"].([]any); len(req) != 1 || req[0] != "name" {
		t.Errorf("required: %v", schema["required"])
	}
	if schema["additionalProperties"] != false {
		t.Errorf("additionalProperties: %v", schema["additionalProperties"])
	}
	_, err := o.Prepare([]byte(`{"name":"toolong","count":0}`), nil)
	var inv *apperr.InvalidError
	if !errors.As(err, &inv) || len(inv.Fields) != 2 {
		t.Fatalf("want two field errors, got %v", err)
	}
	for _, f := range inv.Fields {
		if f.Field != "name" && f.Field != "count" {
			t.Errorf("field %q: %s", f.Field, f.Reason)
		}
	}
	for _, bad := range []string{`{"count":2}`, `{"name":"a","extra":1}`, `{"name":"a","name":"b"}`, `{"name":3}`, `[]`} {
		if _, err := o.Prepare([]byte(bad), nil); !errors.As(err, &inv) {
			t.Errorf("%s: %v", bad, err)
		}
	}
	p1, err := o.Prepare([]byte(`{"name":"a","count":2}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	p2, _ := o.Prepare([]byte(`{ "count": 2, "name": "a" }`), nil)
	p3, _ := o.Prepare([]byte(`{"name":"a","count":3}`), nil)
	if p1.Fingerprint != p2.Fingerprint || p1.Fingerprint == p3.Fingerprint {
		t.Errorf("fingerprints: %s %s %s", p1.Fingerprint, p2.Fingerprint, p3.Fingerprint)
	}

	// A path parameter comes from the path, never from the body.
	ps := spec("widget_part")
	ps.Route = "/v1/widgets/{name}/part"
	withPath := op.Define(ps)
	if got := withPath.PathParams; len(got) != 1 || got[0] != "name" {
		t.Fatalf("path params %v", got)
	}
	if _, ok := withPath.BodySchema()["properties"].(map[string]any)["name"]; ok {
		t.Error("the body schema holds the path parameter")
	}
	if _, err := withPath.Prepare([]byte(`{"count":2}`), map[string]string{"name": "a"}); err != nil {
		t.Fatalf("from the path: %v", err)
	}
	if _, err := withPath.Prepare([]byte(`{"name":"b"}`), map[string]string{"name": "a"}); !errors.As(err, &inv) {
		t.Errorf("a path parameter in the body: %v", err)
	}
}
