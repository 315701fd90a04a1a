package chaos

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/internal/refundapi"
)

// The HTTP tools a local run's agents call, one of each kind, at the
// run's own downstream: refunds deduplicated by Idempotency-Key, and
// refunds that are looked up by external_id.
const (
	toolKeyed  = "chaos_refund_keyed"
	toolLookup = "chaos_refund_lookup"
	// toolTimeout is the tools' timeout; a late answer comes after
	// toolLate, when the caller gave up.
	toolTimeout = time.Second
	toolLate    = 2 * time.Second
	// downstreamToken is what the tools file's ${CHAOS_BILLING_TOKEN}
	// resolves to in the stack's processes, and what the downstream
	// demands.
	downstreamToken = "chaos-billing-token"
)

// startDownstream starts the run's downstream with its faults, and
// writes the tools file every gateway and worker process loads.
func (r *run) startDownstream(ctx context.Context) (toolsFile string, err error) {
	addr, err := r.ports.addr()
	if err != nil {
		return "", err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	ds := refundapi.New()
	ds.Token, ds.Late = downstreamToken, toolLate
	ds.Random(r.cfg.Faults[DownstreamFault], r.cfg.Seed+3)
	go func() { _ = ds.Serve(context.WithoutCancel(ctx), ln) }()
	r.downstream, r.downstreamLn = ds, ln
	base := "http://" + ln.Addr().String()
	schema := `
    input_schema:
      type: object
      additionalProperties: false
      required: [payment_id, amount_cents]
      properties:
        payment_id: {type: string}
        amount_cents: {type: integer, minimum: 1}`
	file := fmt.Sprintf(`tools:
  - name: %[3]s
    description: Refund at chaos's downstream, which deduplicates by Idempotency-Key.%[2]s
    call:
      method: POST
      url: %[1]s/keyed/refunds
      headers: {Authorization: "Bearer ${CHAOS_BILLING_TOKEN}"}
      key_header: Idempotency-Key
      timeout: %[5]s
  - name: %[4]s
    description: Refund at chaos's downstream, which ignores Idempotency-Key and is looked up by external_id.%[2]s
    call:
      method: POST
      url: %[1]s/plain/refunds
      headers: {Authorization: "Bearer ${CHAOS_BILLING_TOKEN}"}
      key_field: external_id
      timeout: %[5]s
    lookup:
      url: %[1]s/plain/refunds?external_id={key}
`, base, schema, toolKeyed, toolLookup, toolTimeout)
	toolsFile = filepath.Join(r.dir, "tools.yaml")
	if err := os.WriteFile(toolsFile, []byte(file), 0o644); err != nil {
		return "", err
	}
	return toolsFile, nil
}

// toolOf names the tool of a /v1/tools/ path.
func toolOf(path string) string { return strings.TrimPrefix(path, "/v1/tools/") }

// effects counts the downstream's refunds made under the key that
// (tenant, key, tool) sends.
func (r *run) effects(tenantID, key, tool string) int {
	return r.downstream.Effects(idem.DownstreamKey(tenantID, key, tool))
}

// checkDownstream counts, from the downstream's own store, each client's
// refunds and the tasks that made more than one (a task's marker is its
// payment_id), and every derived key with more than one refund.
func (r *run) checkDownstream(rep *Report) {
	if r.downstream == nil {
		return
	}
	perTask := map[string]int{}
	perKey := map[string]int{}
	for _, rf := range r.downstream.Refunds() {
		perTask[rf.PaymentID]++
		if k := rf.IdempotencyKey + rf.ExternalID; k != "" {
			perKey[k]++
		}
	}
	for i, c := range []*ClientReport{&rep.Client, &rep.Naive} {
		for task, n := range perTask {
			if !strings.HasPrefix(task, r.tenants[i]+"-") {
				continue
			}
			c.Refunds += n
			if n > 1 {
				c.LogicalDuplicates += n - 1
				if i == 0 {
					rep.violate("downstream: task %s made %d refunds", task, n)
				}
			}
		}
	}
	for k, n := range perKey {
		if n > 1 {
			rep.Client.Duplicates += n - 1
			rep.violate("downstream: the derived key %s has %d refunds", k, n)
		}
	}
}
