// Package downstream is the test kit's refunds API: the service an HTTP
// tool calls, for a team's tests of its tools file. It fails the ways
// real services do, on demand: it drops the connection after committing,
// answers after the caller gave up, or fails with a 5xx.
//
// It serves the two kinds of API a tool is declared for:
//   - POST /keyed/refunds deduplicates by the Idempotency-Key header, as
//     Stripe does: the same key answers the first answer again, marked
//     Idempotent-Replayed: true, and other parameters under it are a 422;
//   - POST /plain/refunds ignores that header and stores the body's
//     external_id, which GET /plain/refunds?external_id= looks up (200 with
//     the refund, 404 for none); a second POST is a second refund.
//
// GET /refunds lists every refund made.
//
// It is internal/refundapi, which idemflow's own tooling (chaos) uses
// too: the kit names it for teams, and tooling does not depend on the kit.
package downstream

import "github.com/idemflow/idemflow/internal/refundapi"

// Fault is what the server does to one POST.
type Fault = refundapi.Fault

// The faults (see refundapi).
const (
	None = refundapi.None
	Drop = refundapi.Drop
	Late = refundapi.Late
	Fail = refundapi.Fail
	Slow = refundapi.Slow
)

// Refund is one effect.
type Refund = refundapi.Refund

// MaxAmount: a larger refund is rejected (422).
const MaxAmount = refundapi.MaxAmount

// Server is the service. The zero value is not ready: use New.
type Server = refundapi.Server

// New returns an empty server with no faults.
func New() *Server { return refundapi.New() }
