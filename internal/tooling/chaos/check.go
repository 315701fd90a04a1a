package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/idemflow/idemflow/activities"
	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/internal/audit"
	"github.com/idemflow/idemflow/internal/ops/orders"
	"github.com/idemflow/idemflow/internal/ops/tickets"
	"github.com/idemflow/idemflow/workflows"
	"github.com/jackc/pgx/v5"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
)

// check waits out the reconcile horizon, then checks every invariant from
// PostgreSQL and Temporal, filling rep.
func (r *run) check(ctx context.Context, rep *Report) error {
	if err := r.settle(ctx, rep); err != nil {
		return err
	}
	c, n := &rep.Client, &rep.Naive
	tenant := r.tenants[0]

	// Invariant 1: at most one row per (tenant, key), by constraint (the
	// audit checks the constraints are there) and by count.
	// The processes' guards: the built-ins', and the HTTP tools' (whose
	// table is idemflow's own).
	a, err := audit.Run(ctx, r.admin, idem.NewStore(r.admin, idem.Retention{}, nil), r.set.Guards(), r.cfg.ProcessingTimeout)
	if err != nil {
		return err
	}
	for _, g := range a.MissingConstraint {
		rep.violate("no unique constraint on %s (tenant_id, idem_key)", g.Table)
	}
	for _, d := range a.Duplicates {
		if d.TenantID == tenant {
			c.Duplicates += d.Rows - 1
			rep.violate("%s: key %q has %d rows", d.Table, d.Key, d.Rows)
		}
	}
	// One logical task, one row: the marker is in the ticket's title and
	// the order's customer; the naive client's duplicates show here.
	for i, st := range []*ClientReport{c, n} {
		var dups int
		if err := r.admin.QueryRow(ctx, `SELECT coalesce(sum(n - 1), 0) FROM (
				SELECT count(*) AS n FROM `+tickets.Create.Table+` WHERE tenant_id = $1 GROUP BY title
				UNION ALL SELECT count(*) FROM `+orders.Create.Table+` WHERE tenant_id = $1 GROUP BY customer_id) x WHERE n > 1`,
			r.tenants[i]).Scan(&dups); err != nil {
			return err
		}
		st.LogicalDuplicates = dups
		if err := r.admin.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+tickets.Create.Table+` WHERE tenant_id = $1),
				(SELECT count(*) FROM `+orders.Create.Table+` WHERE tenant_id = $1), (SELECT count(*) FROM `+orders.Pay.Table+` WHERE tenant_id = $1)`,
			r.tenants[i]).Scan(&st.Tickets, &st.Orders, &st.Events); err != nil {
			return err
		}
	}
	if c.LogicalDuplicates > 0 {
		rep.violate("%d tasks of the idemflow client made more than one row", c.LogicalDuplicates)
	}
	// Invariants 3 and 4: what an agent was told exists exactly once and
	// replays byte for byte; what it was not told ended done or failed.
	if err := r.checkIntents(ctx, rep); err != nil {
		return err
	}
	// An HTTP tool's effect is at the downstream: its own store counts,
	// after the final replays, so that a call a replay sent again (its
	// first answer lost with a failover) shows as a second effect.
	r.checkDownstream(rep)
	var processing int
	if err := r.admin.QueryRow(ctx, `SELECT count(*) FROM idempotency_record WHERE tenant_id = $1 AND status = 'PROCESSING'`, tenant).Scan(&processing); err != nil {
		return err
	}
	c.Stuck += processing
	if processing > 0 {
		rep.violate("%d records still PROCESSING past the reconcile horizon", processing)
	}
	if err := r.checkTemporal(ctx, rep); err != nil {
		return err
	}
	return r.checkOrders(ctx, rep)
}

// settle waits until no record of the run is PROCESSING and none of its
// workflows runs, or the horizon and two reconcile runs have passed since
// the faults stopped. A record can settle before its run ends: a run
// whose task's completion a fault lost (Temporal's store restarted, say)
// ends on the task's retry, after its record was final.
func (r *run) settle(ctx context.Context, rep *Report) error {
	deadline := time.Now().Add(r.cfg.ProcessingTimeout + 2*r.cfg.ReconcileInterval + 20*time.Second)
	for {
		var n int
		err := r.admin.QueryRow(ctx, `SELECT count(*) FROM idempotency_record WHERE tenant_id = ANY($1) AND status = 'PROCESSING'`, r.tenants[:]).Scan(&n)
		if err == nil && n == 0 {
			var running []string
			if running, err = r.running(ctx); err == nil && len(running) == 0 {
				break
			}
		}
		if time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	rep.SettleTime = time.Since(r.startedAt) - rep.LoadTime
	return nil
}

// running lists the workflows of the idemflow client's tenant that still
// run.
func (r *run) running(ctx context.Context) ([]string, error) {
	if r.tc == nil {
		return nil, nil
	}
	var ids []string
	var token []byte
	for {
		resp, err := r.tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query: `ExecutionStatus = "Running"`, NextPageToken: token})
		if err != nil {
			return nil, fmt.Errorf("list running workflows: %w", err)
		}
		for _, e := range resp.Executions {
			if strings.Contains(e.Execution.WorkflowId, "/"+r.tenants[0]+"/") {
				ids = append(ids, e.Execution.WorkflowId)
			}
		}
		if token = resp.NextPageToken; len(token) == 0 {
			return ids, nil
		}
	}
}

// checkIntents checks each intent the idemflow client sent.
func (r *run) checkIntents(ctx context.Context, rep *Report) error {
	c := &rep.Client
	tenant := r.tenants[0]
	work := make(chan sent)
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range work {
				if err := r.checkIntent(ctx, rep, tenant, s, &mu); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for _, s := range c.stats.sent {
		work <- s
	}
	close(work)
	wg.Wait()
	return firstErr
}

func (r *run) checkIntent(ctx context.Context, rep *Report, tenant string, s sent, mu *sync.Mutex) error {
	var rows int
	where := ""
	if s.table == "tool_call" {
		where = " AND state = 'done'" // a sent call whose outcome is unknown is no effect
	}
	if err := r.admin.QueryRow(ctx, `SELECT count(*) FROM `+s.table+` WHERE tenant_id = $1 AND idem_key = $2`+where, tenant, s.key).Scan(&rows); err != nil {
		return fmt.Errorf("count %s rows: %w", s.table, err)
	}
	if s.table == "tool_call" && r.downstream != nil {
		// The downstream's own count must agree: one refund for a done
		// call, none for one that is not.
		if n := r.effects(tenant, s.key, toolOf(s.path)); n != rows {
			mu.Lock()
			if n <= 1 { // more than one is counted by checkDownstream, as duplicates
				rep.Client.Lost++
			}
			rep.violate("%s %s: idemflow holds %d done calls, the downstream %d refunds", s.path, s.key, rows, n)
			mu.Unlock()
		}
	}
	var status string
	err := r.admin.QueryRow(ctx, `SELECT status FROM idempotency_record WHERE tenant_id = $1 AND idem_key = $2`, tenant, s.key).Scan(&status)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("read record %s: %w", s.key, err)
	}
	// What the agent was answered must replay, byte for byte.
	var st int
	var body []byte
	var replayed bool
	if s.outcome == done {
		if st, body, replayed, err = r.replay(ctx, r.tokens[0], s); err != nil {
			return fmt.Errorf("replay %s: %w", s.key, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	c := &rep.Client
	switch s.outcome {
	case done:
		if rows != 1 {
			c.Lost++
			rep.violate("%s %s: the agent was answered %d but there are %d rows", s.table, s.key, s.status, rows)
			if gap, ok := r.lostBefore(s.at); ok && rows == 0 {
				rep.AcknowledgedLost++
				rep.LossWindow = max(rep.LossWindow, gap)
			}
		}
		c.FinalReplays++
		if st != s.status || !bytes.Equal(body, s.answer) || !replayed {
			c.ReplayMismatches++
			rep.violate("replay of %s %s: %d %q (replayed %v), first answer %d %q", s.table, s.key, st, body, replayed, s.status, s.answer)
		}
	case rejected:
		// A business refusal is recorded FAILED, and a retry executes
		// again (README, "Orders"): it has no row and no replay to check.
		if rows != 0 {
			rep.violate("%s %s: refused with %d, yet %d rows", s.table, s.key, s.status, rows)
		}
	default: // abandoned or gave up: done with one row, or failed with none
		switch {
		case status == "SUCCESS" && rows != 1, status != "SUCCESS" && rows != 0:
			c.Lost++
			rep.violate("%s %s: record %q with %d rows", s.table, s.key, status, rows)
		case status == "SUCCESS":
			c.UnansweredDone++
		default:
			c.UnansweredFailed++
		}
	}
	return nil
}

// checkTemporal: no intent workflow of the run still runs, and what
// reconcile settled, by verdict.
func (r *run) checkTemporal(ctx context.Context, rep *Report) error {
	if r.tc == nil {
		return nil
	}
	tenant := r.tenants[0]
	running, err := r.running(ctx)
	if err != nil {
		return err
	}
	for _, id := range running {
		rep.Client.Stuck++
		rep.violate("workflow %s still running", id)
	}
	// Intents that ended without a run in Temporal: claimed, then the
	// gateway died (or the caller left) before the start. Only reconcile
	// can have settled them.
	rows, err := r.admin.Query(ctx, `SELECT workflow_id, status FROM idempotency_record WHERE tenant_id = $1 AND status <> 'PROCESSING'`, tenant)
	if err != nil {
		return err
	}
	type rec struct{ id, status string }
	var recs []rec
	for rows.Next() {
		var x rec
		if err := rows.Scan(&x.id, &x.status); err != nil {
			rows.Close()
			return err
		}
		recs = append(recs, x)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, x := range recs {
		_, err := r.tc.DescribeWorkflowExecution(ctx, x.id, "")
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			rep.NeverStarted[x.status]++
		}
	}
	if !r.cfg.local() {
		return nil // reconcile runs are the deployment's, not the run's
	}
	var token []byte
	for {
		resp, err := r.tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query: `WorkflowType = "Reconcile" AND ExecutionStatus = "Completed"`, NextPageToken: token})
		if err != nil {
			return fmt.Errorf("list reconcile runs: %w", err)
		}
		for _, e := range resp.Executions {
			var res workflows.ReconcileResult
			if err := r.tc.GetWorkflow(ctx, e.Execution.WorkflowId, e.Execution.RunId).Get(ctx, &res); err != nil {
				continue
			}
			rep.ReconcileRuns++
			for v, n := range res.Outcomes {
				if v != activities.VerdictRunning {
					rep.Reconciled[v] += n
				}
			}
		}
		if token = resp.NextPageToken; len(token) == 0 {
			break
		}
	}
	return nil
}

// checkOrders holds the first tenant's orders to the order domain's own
// consistency rules (orders.CheckConsistency): legal transitions only,
// stock and coupons add up, one capture per paid order.
func (r *run) checkOrders(ctx context.Context, rep *Report) error {
	f, err := orders.CheckConsistency(ctx, r.admin, r.tenants[0], r.initialStock)
	if err != nil {
		return err
	}
	rep.Client.IllegalTransitions += f.IllegalTransitions
	rep.Client.StockOff += f.StockOff
	rep.Client.CouponsOff += f.CouponsOff
	rep.Client.DoubleCaptures += f.DoubleCaptures
	for _, v := range f.Violations {
		rep.violate("%s", v)
	}
	return nil
}
