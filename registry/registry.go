// Package registry is the list of business types one process knows: the
// built-in ones (tickets, orders) and the operations a team declared (op).
// For each it holds how a key's business row is recalled, the unique
// constraints that guard its rows, the workflows that run its intents and
// the rejections its steps can answer. The record store, the worker, the
// gateway, MCP, audit, inspect and the metrics read it.
package registry

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/idemflow/idemflow/activities"
	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/migrations"
	"github.com/idemflow/idemflow/op"
	"github.com/idemflow/idemflow/orders"
	"github.com/idemflow/idemflow/tickets"
	"github.com/idemflow/idemflow/workflows"
)

// Type is one built-in business type's declaration.
type Type struct {
	Name string
	// Recall finds the row a key wrote, for records purged or lost.
	Recall idem.Recall
	// Guards are its tables' one-row-per-(tenant, key) constraints.
	Guards []idem.Guard
	// Workflows run its intents.
	Workflows []any
}

// Types lists the built-in business types that are not declarations (op)
// yet: their workflows are registered by function.
func Types() []Type {
	return []Type{
		{Name: "order", Recall: orders.Recall, Guards: orders.Guards,
			Workflows: []any{workflows.TransitionOrder}},
	}
}

// Builtins are idemflow's own declared operations.
func Builtins() []*op.Operation { return []*op.Operation{tickets.Create, orders.Create} }

// Set is the business types of one process: the built-ins and the
// declared operations.
type Set struct {
	ops   []*op.Operation
	byBiz map[string]*op.Operation
}

// reserved are the names that idemflow's routes, tools and types which
// are not declarations hold, and which no declared operation may take.
var reserved = struct{ routes, tools []string }{
	routes: []string{"/v1/operations", "/v1/tenant", "/v1/tools"},
	tools:  []string{"pay_order", "cancel_order", "refund_order", "fulfill_order", "get_operation"},
}

// New returns the set of the built-ins and ops. A name that two of them
// share (a route, a tool, a business type, a scope, a workflow, an
// activity) is an error: every one of them must lead to one operation.
func New(ops ...*op.Operation) (*Set, error) {
	s := &Set{byBiz: map[string]*op.Operation{}}
	seen := map[string]string{}
	claim := func(kind, name, who string) error {
		if prev, ok := seen[kind+" "+name]; ok {
			return fmt.Errorf("registry: %s and %s both declare the %s %q", prev, who, kind, name)
		}
		seen[kind+" "+name] = who
		return nil
	}
	for _, r := range reserved.routes {
		_ = claim("route", r, "idemflow")
	}
	for _, t := range reserved.tools {
		_ = claim("tool", t, "idemflow")
	}
	for _, wf := range []string{"TransitionOrder", "Reconcile"} {
		_ = claim("workflow", wf, "idemflow")
	}
	// The worker registers every method of Activities under its name.
	acts := reflect.TypeFor[*activities.Activities]()
	for i := range acts.NumMethod() {
		_ = claim("activity", acts.Method(i).Name, "idemflow")
	}
	for i, o := range append(Builtins(), ops...) {
		who := "operation " + o.Name
		if i < len(Builtins()) {
			who = "idemflow's " + who
		} else if strings.HasPrefix(o.Scope, orders.ScopeCreate+"-") || strings.HasPrefix(o.BizType, "order.") {
			// An order's transitions are not declarations yet: their
			// scopes and business types are this family of names.
			return nil, fmt.Errorf("registry: %s takes a name of idemflow's order transitions", who)
		}
		for _, c := range [][2]string{{"route", o.Route}, {"tool", o.Tool}, {"business type", o.BizType}, {"scope", o.Scope},
			{"workflow", o.Workflow}, {"activity", o.Activity}} {
			if err := claim(c[0], c[1], who); err != nil {
				return nil, err
			}
		}
		s.ops = append(s.ops, o)
		s.byBiz[o.BizType] = o
	}
	return s, nil
}

// Builtin is the set of the built-ins alone: idemflow's own operations.
func Builtin() *Set {
	s, _ := New()
	return s
}

// Schemas are the declared operations' own migrations.
func (s *Set) Schemas() []migrations.Schema {
	var out []migrations.Schema
	for _, o := range s.ops {
		if o.Migrations != nil {
			out = append(out, migrations.Schema{Name: o.Name, Files: o.Migrations})
		}
	}
	return out
}

// Operations lists the declared operations: the built-in ones, then the
// ones given to New, in their order.
func (s *Set) Operations() []*op.Operation { return s.ops }

// Recall is an idem.Recall over every type's business rows, at the cost of
// one lookup (idem.KeyRecall): the key's row in idempotency_key names the
// business type that wrote it, whose Recall then reads its row. A built-in
// type's name is its business types' prefix ("order" for order.create,
// order.pay); a declared operation is found by its business type.
func (s *Set) Recall(ctx context.Context, q idem.Querier, tenantID, key string) (idem.Prior, bool, error) {
	return idem.KeyRecall(s.recallOf)(ctx, q, tenantID, key)
}

func (s *Set) recallOf(bizType string) idem.Recall {
	if o, ok := s.byBiz[bizType]; ok {
		return o.Recall
	}
	name, _, _ := strings.Cut(bizType, ".")
	for _, t := range Types() {
		if t.Name == name {
			return t.Recall
		}
	}
	return nil
}

// Guards lists every constraint the exactly-once guarantee rests on: the
// record's own and each type's.
func (s *Set) Guards() []idem.Guard {
	guards := []idem.Guard{idem.RecordGuard, idem.KeyGuard}
	for _, t := range Types() {
		guards = append(guards, t.Guards...)
	}
	for _, o := range s.ops {
		guards = append(guards, o.Guard())
	}
	return guards
}

// CommonRejections are the business rejections any type's step can answer:
// a key whose row was written with other parameters, and parameters that
// cannot be stored with the record.
var CommonRejections = []string{"idempotency-key-reused", "unstorable-input"}

// Rejections lists every business type with the rejection codes its step
// can answer, for what must know them before they happen (the metrics
// export each at 0). TestEveryRejectionCodeIsListedAndDescribed fails on a
// code in the source that is left out.
func (s *Set) Rejections() map[string][]string {
	out := map[string][]string{}
	for bt, codes := range orders.Rejections() {
		out[bt] = codes
	}
	for _, o := range s.ops {
		out[o.BizType] = slices.Sorted(maps.Keys(o.Rejections))
	}
	for bt, codes := range out {
		out[bt] = append(append([]string(nil), CommonRejections...), codes...)
	}
	return out
}

// Description is the text of a declared operation's rejection code, for
// GET /problems/{code}.
func (s *Set) Description(code string) (string, bool) {
	for _, o := range s.ops {
		if d, ok := o.Rejections[code]; ok {
			return d, true
		}
	}
	return "", false
}

// Recall is the built-ins' Set.Recall.
func Recall(ctx context.Context, q idem.Querier, tenantID, key string) (idem.Prior, bool, error) {
	return Builtin().Recall(ctx, q, tenantID, key)
}

// Guards is the built-ins' Set.Guards.
func Guards() []idem.Guard { return Builtin().Guards() }

// Rejections is the built-ins' Set.Rejections.
func Rejections() map[string][]string { return Builtin().Rejections() }
