// Package registry declares idemflow's business types in one place: for
// each, how a key's business row is recalled, the unique constraints that
// guard its rows, the workflows that run its intents, and the rejections
// its steps can answer. The record store, the worker, audit and the metrics
// read it, so adding a type is a domain package, one file in each layer
// (starter, workflows, activities, gateway), a migration, and one entry
// here (DEVELOPERS.md lists them).
package registry

import (
	"context"
	"strings"

	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/orders"
	"github.com/idemflow/idemflow/tickets"
	"github.com/idemflow/idemflow/workflows"
)

// Type is one business type's declaration.
type Type struct {
	Name string
	// Recall finds the row a key wrote, for records purged or lost.
	Recall idem.Recall
	// Guards are its tables' one-row-per-(tenant, key) constraints.
	Guards []idem.Guard
	// Workflows run its intents.
	Workflows []any
}

// Types lists every business type.
func Types() []Type {
	return []Type{
		{Name: "ticket", Recall: tickets.Recall, Guards: []idem.Guard{tickets.Guard},
			Workflows: []any{workflows.CreateTicket}},
		{Name: "order", Recall: orders.Recall, Guards: orders.Guards,
			Workflows: []any{workflows.CreateOrder, workflows.TransitionOrder}},
	}
}

// Recall is an idem.Recall over every type's business rows, at the cost of
// one lookup (idem.KeyRecall): the key's row in idempotency_key names the
// business type that wrote it, whose Recall then reads its row. A type's
// name is its business types' prefix ("order" for order.create, order.pay).
func Recall(ctx context.Context, q idem.Querier, tenantID, key string) (idem.Prior, bool, error) {
	return idem.KeyRecall(recallOf)(ctx, q, tenantID, key)
}

func recallOf(bizType string) idem.Recall {
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
func Guards() []idem.Guard {
	guards := []idem.Guard{idem.RecordGuard, idem.KeyGuard}
	for _, t := range Types() {
		guards = append(guards, t.Guards...)
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
func Rejections() map[string][]string {
	out := map[string][]string{tickets.BizType: nil}
	for bt, codes := range orders.Rejections() {
		out[bt] = codes
	}
	for bt, codes := range out {
		out[bt] = append(append([]string(nil), CommonRejections...), codes...)
	}
	return out
}
