// Package registry is the list of operations one process knows: idemflow's
// own (tickets, orders) and the ones a team declared, all of them op
// declarations. For each it holds how a key's business row is recalled,
// the unique constraint that guards its rows, the workflow and activity
// that run its intents and the rejections its step can answer. The record
// store, the worker, the gateway, MCP, audit, inspect and the metrics read
// it.
package registry

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sync"

	"github.com/idemflow/idemflow/activities"
	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/internal/httptool"
	"github.com/idemflow/idemflow/internal/orders"
	"github.com/idemflow/idemflow/internal/tickets"
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
	routes:    []string{"/v1/operations", "/v1/tenant", "/v1/tools", "/v1/orders/{order_no}/{action}"},
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
	return s, nil
}

// Builtin is the set of the built-ins alone: idemflow's own operations.
// A Set never changes, so it is built once: registry.Recall, a store's
// recall in tests, and a gateway or MCP server without a Set of their own
// ask for it often.
var Builtin = sync.OnceValue(func() *Set {
	s, err := New()
	if err != nil {
		panic(err) // idemflow's own names, checked by every test
	}
	return s
})

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

// Operations lists the operations: the built-in ones, then the ones given
// to New, in their order.
func (s *Set) Operations() []*op.Operation { return s.ops }

// ByWorkflow lists the operations by their workflow (and so activity)
// name, for the worker to register each pair once.
func (s *Set) ByWorkflow() map[string][]*op.Operation {
	out := map[string][]*op.Operation{}
	for _, o := range s.ops {
		out[o.Workflow] = append(out[o.Workflow], o)
	}
	return out
}

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
var CommonRejections = []string{"idempotency-key-reused", "unstorable-input"}

// Rejections lists every business type with the rejection codes its step
// can answer, for what must know them before they happen (the metrics
// export each at 0). TestEveryRejectionCodeIsListedAndDescribed fails on a
// code in the source that is left out.
func (s *Set) Rejections() map[string][]string {
	out := map[string][]string{}
	for _, o := range s.ops {
		out[o.BizType] = append(append([]string(nil), CommonRejections...), slices.Sorted(maps.Keys(o.Rejections))...)
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
