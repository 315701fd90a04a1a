package activities_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/idemflow/idemflow/activities"
	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/internal/ops/tickets"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
	"go.temporal.io/sdk/testsuite"
)

const body = `{"customer_id":"c-1","title":"Stuck","priority":"low"}`

// backdate makes a record look PROCESSING since long before the horizon.
func backdate(t *testing.T, s *testenv.Stack, key string) idem.Record {
	t.Helper()
	if _, err := s.Pool.Exec(context.Background(),
		`UPDATE idempotency_record SET updated_at = now() - interval '1 hour' WHERE idem_key = $1`, key); err != nil {
		t.Fatal(err)
	}
	rec, err := s.Records.Get(context.Background(), testenv.TenantA, key)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// claimOnly writes the state a gateway leaves when it dies right after
// recording the intent: a PROCESSING record and no workflow.
func claimOnly(t *testing.T, s *testenv.Stack, key string) ticketIntent {
	t.Helper()
	req := tickets.Request{CustomerID: "c-1", Title: "Stuck", Priority: "low"}
	fp, _ := fingerprint(req)
	it := idem.Intent{TenantID: testenv.TenantA, Key: key, BizType: tickets.BizType, Fingerprint: fp, WorkflowID: tickets.WorkflowID(testenv.TenantA, key)}
	c, err := s.Records.Claim(context.Background(), idem.ClaimParams{TenantID: it.TenantID, Key: key, BizType: it.BizType, Fingerprint: fp, WorkflowID: it.WorkflowID})
	if err != nil {
		t.Fatal(err)
	}
	it.Attempt = c.Record.Attempts // as the starter sets it
	return ticketIntent{Intent: it, Request: req}
}

func TestReconcileLeavesARunningWorkflowAlone(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{NoWorker: true})
	r := s.Do(testenv.Request{Path: "/v1/tickets", Token: s.Tokens[testenv.TenantA], Key: "running", Body: body, Header: map[string]string{"Prefer": "wait=0"}})
	if r.Status != 202 {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	rec := backdate(t, s, "running")
	got, err := s.Activities.ReconcileIntent(context.Background(), rec.Intent())
	if err != nil || got != activities.VerdictRunning {
		t.Fatalf("outcome %q %v", got, err)
	}
	if rec, _ = s.Records.Get(context.Background(), testenv.TenantA, "running"); rec.Status != idem.StatusProcessing {
		t.Fatalf("a running intent was settled: %s", rec.Status)
	}
}

func TestReconcileBackfillsFromACompletedWorkflow(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	first := s.Do(testenv.Request{Path: "/v1/tickets", Token: s.Tokens[testenv.TenantA], Key: "done", Body: body})
	if first.Status != 201 {
		t.Fatalf("%d %s", first.Status, first.Body)
	}
	// The 201 comes as soon as the record commits (the worker beside the
	// gateway wakes it); the run closes a moment later. Wait for that.
	if err := s.Temporal.GetWorkflow(context.Background(), tickets.WorkflowID(testenv.TenantA, "done"), "").Get(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	// The workflow completed, but the record lost its answer. The ticket
	// has moved on since, so an answer rebuilt from the row would differ
	// from the one the first caller got: only the workflow's result is the
	// same bytes.
	for _, sql := range []string{
		`UPDATE idempotency_record SET status = 'PROCESSING', response_status = NULL, response_body = NULL, resource_path = NULL WHERE idem_key = 'done'`,
		`UPDATE ticket SET status = 'closed' WHERE idem_key = 'done'`,
	} {
		if _, err := s.Pool.Exec(context.Background(), sql); err != nil {
			t.Fatal(err)
		}
	}
	rec := backdate(t, s, "done")
	got, err := s.Activities.ReconcileIntent(context.Background(), rec.Intent())
	if err != nil || got != activities.VerdictFromWorkflow {
		t.Fatalf("outcome %q %v", got, err)
	}
	again := s.Do(testenv.Request{Path: "/v1/tickets", Token: s.Tokens[testenv.TenantA], Key: "done", Body: body})
	if again.Status != 201 || !bytes.Equal(again.Body, first.Body) || again.Header.Get("Location") != first.Header.Get("Location") {
		t.Fatalf("after backfill: %d %s", again.Status, again.Body)
	}
}

func TestReconcileBackfillsFromTheBusinessRow(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	in := claimOnly(t, s, "row")
	tk, err := tickets.Insert(context.Background(), s.Pool, newTicket(in))
	if err != nil {
		t.Fatal(err)
	}
	// The step writes its key's row in the same transaction as its row.
	if err := idem.RememberKey(context.Background(), s.Pool, in.Intent); err != nil {
		t.Fatal(err)
	}
	rec := backdate(t, s, "row")
	got, err := s.Activities.ReconcileIntent(context.Background(), rec.Intent())
	if err != nil || got != activities.VerdictFromRow {
		t.Fatalf("outcome %q %v", got, err)
	}
	rec, _ = s.Records.Get(context.Background(), testenv.TenantA, "row")
	if rec.Status != idem.StatusSuccess || !bytes.Equal(rec.Response.Body, tk.Body()) {
		t.Fatalf("record %s %s", rec.Status, rec.Response.Body)
	}
	if n := testenv.Count(t, s.Pool, "ticket", ""); n != 1 {
		t.Fatalf("reconcile wrote rows: %d", n)
	}
}

func TestReconcileFailsAnIntentWithNothingWrittenAndARetryRunsIt(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	claimOnly(t, s, "nothing")
	rec := backdate(t, s, "nothing")
	got, err := s.Activities.ReconcileIntent(context.Background(), rec.Intent())
	if err != nil || got != activities.VerdictFailed {
		t.Fatalf("outcome %q %v", got, err)
	}
	rec, _ = s.Records.Get(context.Background(), testenv.TenantA, "nothing")
	if rec.Status != idem.StatusFailed || testenv.Count(t, s.Pool, "ticket", "") != 0 {
		t.Fatalf("record %s", rec.Status)
	}
	// Reconciling again is a no-op: it never double-completes.
	if got, _ := s.Activities.ReconcileIntent(context.Background(), rec.Intent()); got != activities.VerdictSettled {
		t.Fatalf("second pass: %q", got)
	}
	r := s.Do(testenv.Request{Path: "/v1/tickets", Token: s.Tokens[testenv.TenantA], Key: "nothing", Body: body})
	if r.Status != 201 || testenv.Count(t, s.Pool, "ticket", "") != 1 {
		t.Fatalf("retry after FAILED: %d %s", r.Status, r.Body)
	}
}

func TestPurgeDeletesOnlyExpiredFinishedRecordsInBatches(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{NoWorker: true})
	ctx := context.Background()
	insert := func(key, status, expire, updated string) {
		t.Helper()
		resp := "NULL"
		if status != "PROCESSING" {
			resp = "'x'"
		}
		_, err := s.Pool.Exec(ctx, `INSERT INTO idempotency_record
			(id, tenant_id, idem_key, biz_type, fingerprint, status, response_status, response_body, workflow_id, updated_at, expire_at)
			VALUES (gen_random_uuid(), 'acme', $1, 'ticket.create', 'fp', $2, 200, `+resp+`::bytea, 'w', now() - $4::interval, now() - $3::interval)`,
			key, status, expire, updated)
		if err != nil {
			t.Fatal(err)
		}
	}
	for i, st := range []string{"SUCCESS", "SUCCESS", "FAILED", "SUCCESS", "FAILED"} {
		insert("old-"+string(rune('a'+i)), st, "1 day", "8 days")
	}
	insert("processing", "PROCESSING", "1 day", "8 days")      // never purged
	insert("fresh", "SUCCESS", "-1 day", "1 hour")             // not expired
	insert("young-but-expired", "SUCCESS", "1 day", "2 hours") // younger than the 7-day retention
	var env testsuite.WorkflowTestSuite
	aenv := env.NewTestActivityEnvironment()
	aenv.RegisterActivity(s.Activities)
	run := func() activities.PurgeResult {
		v, err := aenv.ExecuteActivity(s.Activities.PurgeExpired, activities.PurgeInput{BatchSize: 2, Budget: idem.Duration(time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		var res activities.PurgeResult
		if err := v.Get(&res); err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := run(); res.Deleted != 5 || !res.Complete {
		t.Fatalf("first purge: %+v", res)
	}
	if res := run(); res.Deleted != 0 {
		t.Fatalf("second purge deleted %d", res.Deleted)
	}
	var left []string
	rows, _ := s.Pool.Query(ctx, `SELECT idem_key FROM idempotency_record ORDER BY idem_key`)
	for rows.Next() {
		var k string
		_ = rows.Scan(&k)
		left = append(left, k)
	}
	if len(left) != 3 || left[0] != "fresh" || left[1] != "processing" || left[2] != "young-but-expired" {
		t.Fatalf("left %v", left)
	}
}
