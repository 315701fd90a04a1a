// Package registry is the list of operations one process knows: idemflow's
// own (Builtins: tickets, orders) and the ones a team declared, all of
// them op declarations. New checks that no two of them, nor idemflow's own
// routes, tools and workflows, share a name; the Set then says how a key's
// business row is recalled, which unique constraints guard the rows and
// which rejections each step can answer. Every process builds its Set
// once and passes it on (internal/service): the record store, the worker,
// the gateway, MCP, audit, inspect and the metrics read it.
package registry

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/idemflow/idemflow/activities"
	"github.com/idemflow/idemflow/httptool"
	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/internal/ops/orders"
	"github.com/idemflow/idemflow/internal/ops/tickets"
	"github.com/idemflow/idemflow/migrations"
	"github.com/idemflow/idemflow/op"
)

// Builtins are idemflow's own operations.
func Builtins() []*op.Operation {
	return []*op.Operation{tickets.Create, orders.Create, orders.Pay, orders.Cancel, orders.Refund, orders.Fulfill}
}

// Set is the operations of one process: the built-ins and the declared
// ones.
type Set struct {
	ops   []*op.Operation
	byBiz map[string]*op.Operation
}

// reserved are the names that idemflow's other routes, tools, workflows
// and activities hold, and which no declared operation may take.
var reserved = struct{ routes, tools, workflows []string }{
	routes: []string{"/v1/operations", "/v1/operations/{id}", "/v1/tenant", "/v1/tools",
		"/healthz", "/readyz", "/metrics", "/openapi.json", "/problems/{slug}"},
	tools:     []string{"get_operation"},
	workflows: []string{"Reconcile"},
}

// New returns the set of the built-ins and ops. A name that two of them
// share (a route, a tool, a business type, a scope, a workflow, an
// activity) is an error: every one of them must lead to one operation.
// Only operations that share both their workflow and their activity (an
// order's transitions) may share either: the worker registers the pair
// once, and the activity finds each intent's operation by its business
// type.
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
	for _, wf := range reserved.workflows {
		_ = claim("workflow", wf, "idemflow")
	}
	// The worker registers every method of Activities under its name.
	acts := reflect.TypeFor[*activities.Activities]()
	for i := range acts.NumMethod() {
		_ = claim("activity", acts.Method(i).Name, "idemflow")
	}
	pairs := map[string]string{} // workflow -> activity, of the pairs claimed
	for i, o := range append(Builtins(), ops...) {
		who := "operation " + o.Name
		if i < len(Builtins()) {
			who = "idemflow's " + who
		}
		for _, c := range [][2]string{{"route", o.Route}, {"tool", o.Tool}, {"business type", o.BizType}, {"scope", o.Scope}} {
			if err := claim(c[0], c[1], who); err != nil {
				return nil, err
			}
		}
		for _, rd := range o.Reads {
			if err := claim("route", rd.Route, who); err != nil {
				return nil, err
			}
		}
		if act, ok := pairs[o.Workflow]; !ok || act != o.Activity {
			for _, c := range [][2]string{{"workflow", o.Workflow}, {"activity", o.Activity}} {
				if err := claim(c[0], c[1], who); err != nil {
					return nil, err
				}
			}
			pairs[o.Workflow] = o.Activity
		}
		s.ops = append(s.ops, o)
		s.byBiz[o.BizType] = o
	}
	for _, f := range s.Families() {
		if err := claim("route", f.Pattern, "idemflow (the actions of "+f.Parent+")"); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Family is sibling operations: POST routes that differ only in their last,
// literal segment under one parent with a path parameter (archive and
// restore under /v1/widgets/{id}, as an order's actions are). The gateway
// answers a path under the parent that names none of them with a 404 that
// lists them, so that a misspelled action is told what it can be.
type Family struct {
	// Parent is the path the actions hang from; Pattern is Parent with
	// a wildcard last segment, the route of that 404.
	Parent, Pattern string
	// Actions are the last segments, in declaration order.
	Actions []string
}

// Families are the set's families of sibling operations, in the order of
// their first operation.
func (s *Set) Families() []Family {
	var out []Family
	index := map[string]int{}
	for _, o := range s.ops {
		i := strings.LastIndex(o.Route, "/")
		parent, last := o.Route[:i], o.Route[i+1:]
		if len(op.RouteParams(parent)) == 0 || strings.Contains(last, "{") {
			continue
		}
		j, ok := index[parent]
		if !ok {
			wildcard := "{action}"
			for strings.Contains(parent, wildcard) {
				wildcard = "{" + wildcard[1:len(wildcard)-1] + "_}"
			}
			j, index[parent] = len(out), len(out)
			out = append(out, Family{Parent: parent, Pattern: parent + "/" + wildcard})
		}
		out[j].Actions = append(out[j].Actions, last)
	}
	return out
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

// Seed writes every operation's demo data for a new tenant (op.Spec.Seed):
// a dev stack's and a chaos run's tenants get it, a deployment's none.
func (s *Set) Seed(ctx context.Context, q idem.Querier, tenantID string) error {
	for _, o := range s.ops {
		if o.Seed != nil {
			if err := o.Seed(ctx, q, tenantID); err != nil {
				return fmt.Errorf("operation %s: seed %s: %w", o.Name, tenantID, err)
			}
		}
	}
	return nil
}

// Example is the first operation that declares an example request, a
// team's declared ones before idemflow's own: its route and body, for a
// banner's "try it" (ok false when none does).
func (s *Set) Example() (route, body string, ok bool) {
	// A team's own operation first: a program built for it wants it shown.
	builtins := len(Builtins())
	for _, o := range append(slices.Clone(s.ops[builtins:]), s.ops[:builtins]...) {
		if o.Example != "" {
			return o.Route, o.Example, true
		}
	}
	return "", "", false
}

// Inspect is what the operation of bizType shows of a key beyond its row
// (op.Spec.Inspect): nothing when it declares no view, or no operation
// has that business type.
func (s *Set) Inspect(ctx context.Context, q idem.Querier, bizType, tenantID, key string) ([]string, error) {
	o, ok := s.byBiz[bizType]
	if !ok || o.Inspect == nil {
		return nil, nil
	}
	return o.Inspect(ctx, q, tenantID, key)
}

// Operations lists the operations: the built-in ones, then the ones given
// to New, in their order (a copy).
func (s *Set) Operations() []*op.Operation { return slices.Clone(s.ops) }

// Recall is an idem.Recall over every operation's rows, at the cost of one
// lookup (idem.KeyRecall): the key's row in idempotency_key names the
// business type that wrote it, whose operation then reads its row.
func (s *Set) Recall(ctx context.Context, q idem.Querier, tenantID, key string) (idem.Prior, bool, error) {
	return idem.KeyRecall(s.recallOf)(ctx, q, tenantID, key)
}

func (s *Set) recallOf(bizType string) idem.Recall {
	if o, ok := s.byBiz[bizType]; ok {
		return o.Recall
	}
	return nil
}

// Guards lists every constraint the exactly-once guarantee rests on: the
// record's own, the key's, the HTTP tools' calls' (idemflow's own table,
// whether a process loads tools or not), and each operation's table's
// (once, however many operations write it).
func (s *Set) Guards() []idem.Guard {
	guards := []idem.Guard{idem.RecordGuard, idem.KeyGuard, {Table: httptool.Table}}
	for _, o := range s.ops {
		if g := o.Guard(); !slices.Contains(guards, g) {
			guards = append(guards, g)
		}
	}
	return guards
}

// CommonRejections are the business rejections any type's step can answer:
// a key whose row was written with other parameters, and parameters that
// cannot be stored with the record.
func CommonRejections() []string { return []string{"idempotency-key-reused", "unstorable-input"} }

// Rejections lists every business type with the rejection codes its step
// can answer, for what must know them before they happen (the metrics
// export each at 0). TestEveryRejectionCodeIsListedAndDescribed fails on a
// code in the source that is left out.
func (s *Set) Rejections() map[string][]string {
	out := map[string][]string{}
	for _, o := range s.ops {
		out[o.BizType] = append(CommonRejections(), slices.Sorted(maps.Keys(o.Rejections))...)
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
