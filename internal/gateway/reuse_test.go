package gateway_test

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/internal/ops/tickets"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
	"github.com/idemflow/idemflow/op"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// purgeRecords deletes every idempotency record, as purge does once their
// retention has passed, while Temporal still holds the completed runs.
func purgeRecords(t *testing.T, s *testenv.Stack) {
	t.Helper()
	if _, err := s.Pool.Exec(context.Background(), `DELETE FROM idempotency_record`); err != nil {
		t.Fatal(err)
	}
}

// forgetAnswers makes the stack's gateway answer from PostgreSQL only, as a
// restarted gateway or another replica would: purge tests are about what
// the database remembers.
func forgetAnswers(s *testenv.Stack) { s.Gateway.Starter.Answers = nil }

func TestTicketKeyReusedAfterPurgeIsAConflictAndTheSameParamsReplay(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	forgetAnswers(s)
	first := ticket(s, testenv.TenantA, "k-purged", ticketBody)
	if first.Status != http.StatusCreated {
		t.Fatalf("first: %d %s", first.Status, first.Body)
	}
	purgeRecords(t, s)
	other := ticket(s, testenv.TenantA, "k-purged", `{"customer_id":"c-42","title":"Another ticket"}`)
	if other.Status != http.StatusUnprocessableEntity {
		t.Fatalf("other parameters after purge: %d %s", other.Status, other.Body)
	}
	assertProblem(t, other, "/problems/idempotency-key-reused")
	if n := testenv.Count(t, s.Pool, "ticket", "title = 'Another ticket'"); n != 0 {
		t.Fatalf("the conflicting request wrote %d tickets", n)
	}
	// The record was rebuilt from the ticket, not taken over.
	rec, err := s.Records.Get(context.Background(), testenv.TenantA, "k-purged")
	if err != nil || rec.Status != idem.StatusSuccess || !bytes.Equal(rec.Response.Body, first.Body) {
		t.Fatalf("record after the conflict: %+v %v", rec, err)
	}
	for _, purge := range []bool{false, true} {
		if purge {
			purgeRecords(t, s)
		}
		again := ticket(s, testenv.TenantA, "k-purged", ticketBody)
		if again.Status != http.StatusCreated || !bytes.Equal(again.Body, first.Body) ||
			again.Header.Get("Idempotent-Replayed") != "true" || again.Header.Get("Location") != first.Header.Get("Location") {
			t.Fatalf("same parameters after purge (%v): %d %v %s", purge, again.Status, again.Header, again.Body)
		}
	}
	// A key used for a ticket is not free for another kind of intent, and
	// the answer says so plainly, while the record lives and after purge.
	for _, purge := range []bool{false, true} {
		if purge {
			purgeRecords(t, s)
		}
		r := order(s, testenv.TenantA, "k-purged", basket)
		if r.Status != http.StatusUnprocessableEntity || !bytes.Contains(r.Body, []byte("already used for another operation (ticket.create), not order.create")) {
			t.Fatalf("order under a ticket key (purged: %v): %d %s", purge, r.Status, r.Body)
		}
	}
	if n := countTickets(t, s) + testenv.Count(t, s.Pool, "purchase_order", ""); n != 1 {
		t.Fatalf("%d business rows, want 1", n)
	}
}

func TestPaymentKeyReusedAfterPurgeDoesNotAnswerForAnotherOrder(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	forgetAnswers(s)
	o1 := orderNo(t, order(s, testenv.TenantA, "o-1", basket))
	o2 := orderNo(t, order(s, testenv.TenantA, "o-2", basket))
	paid := transition(s, testenv.TenantA, o1, "pay", "pay-1", `{"payment_ref":"psp-1"}`)
	if paid.Status != http.StatusOK {
		t.Fatalf("pay: %d %s", paid.Status, paid.Body)
	}
	purgeRecords(t, s)
	r := transition(s, testenv.TenantA, o2, "pay", "pay-1", `{"payment_ref":"psp-1"}`)
	if r.Status != http.StatusUnprocessableEntity {
		t.Fatalf("the same payment key on another order after purge: %d %s", r.Status, r.Body)
	}
	var status string
	if err := s.Pool.QueryRow(context.Background(), `SELECT status FROM purchase_order WHERE order_no = $1`, o2).Scan(&status); err != nil || status != "CREATED" {
		t.Fatalf("second order is %s (%v), want CREATED", status, err)
	}
	// Twice: the record is final, it does not flip.
	for range 2 {
		if r := transition(s, testenv.TenantA, o2, "pay", "pay-1", `{"payment_ref":"psp-1"}`); r.Status != http.StatusUnprocessableEntity {
			t.Fatalf("again: %d %s", r.Status, r.Body)
		}
	}
	purgeRecords(t, s)
	again := transition(s, testenv.TenantA, o1, "pay", "pay-1", `{"payment_ref":"psp-1"}`)
	if again.Status != http.StatusOK || !bytes.Equal(again.Body, paid.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the first payment after purge: %d %s", again.Status, again.Body)
	}
	if n := testenv.Count(t, s.Pool, "payment_charge", ""); n != 1 {
		t.Fatalf("%d charges", n)
	}
}

// An operator's cancel in the Web UI ends the intent FAILED with its own
// problem type, at once; a retry under the same key runs it again.
func TestOperatorCancelFailsTheIntentAndARetryRunsIt(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{NoWorker: true})
	ctx := context.Background()
	r := s.Do(testenv.Request{Path: "/v1/tickets", Token: s.Tokens[testenv.TenantA], Key: "to-cancel", Body: ticketBody, Header: map[string]string{"Prefer": "wait=0"}})
	if r.Status != http.StatusAccepted {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	wid := tickets.WorkflowID(testenv.TenantA, "to-cancel")
	if err := s.Temporal.CancelWorkflow(ctx, wid, ""); err != nil {
		t.Fatal(err)
	}
	s.StartWorker()
	waitForStatus(t, s, "to-cancel", idem.StatusFailed)
	rec, _ := s.Records.Get(ctx, testenv.TenantA, "to-cancel")
	if !bytes.Contains(rec.Response.Body, []byte("/problems/canceled-by-operator")) {
		t.Fatalf("answer after cancel: %s", rec.Response.Body)
	}
	if n := countTickets(t, s); n != 0 {
		t.Fatalf("%d tickets after cancel", n)
	}
	again := ticket(s, testenv.TenantA, "to-cancel", ticketBody)
	if again.Status != http.StatusCreated || countTickets(t, s) != 1 {
		t.Fatalf("retry after cancel: %d %s", again.Status, again.Body)
	}
}

// Terminate runs no workflow code: the request waiting on the run settles
// the record, the same way as a cancel.
func TestOperatorTerminateFailsTheIntentAndARetryRunsIt(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{NoWorker: true})
	ctx := context.Background()
	wid := tickets.WorkflowID(testenv.TenantA, "to-terminate")
	done := make(chan testenv.Response, 1)
	go func() {
		done <- s.Do(testenv.Request{Path: "/v1/tickets", Token: s.Tokens[testenv.TenantA], Key: "to-terminate", Body: ticketBody, Header: map[string]string{"Prefer": "wait=20"}})
	}()
	waitForRun(t, s.Temporal, wid)
	if err := s.Temporal.TerminateWorkflow(ctx, wid, "", "operator"); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.Status != http.StatusInternalServerError {
		t.Fatalf("waiting request after terminate: %d %s", r.Status, r.Body)
	}
	assertProblem(t, r, "/problems/canceled-by-operator")
	rec, err := s.Records.Get(ctx, testenv.TenantA, "to-terminate")
	if err != nil || rec.Status != idem.StatusFailed {
		t.Fatalf("record after terminate: %+v %v", rec, err)
	}
	s.StartWorker()
	again := ticket(s, testenv.TenantA, "to-terminate", ticketBody)
	if again.Status != http.StatusCreated || countTickets(t, s) != 1 {
		t.Fatalf("retry after terminate: %d %s", again.Status, again.Body)
	}
}

func waitForStatus(t *testing.T, s *testenv.Stack, key string, want idem.Status) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		rec, err := s.Records.Get(context.Background(), testenv.TenantA, key)
		if err == nil && rec.Status == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("record %s: %+v %v, want %s", key, rec, err, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func waitForRun(t *testing.T, tc client.Client, workflowID string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := tc.DescribeWorkflowExecution(context.Background(), workflowID, ""); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("workflow %s never started", workflowID)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A remembered answer is still tenant-scoped, still checked against the
// fingerprint, and byte-identical. The database is emptied of the key (its
// record and its ticket), so that only the gateway's memory can answer: a
// gateway without it, or with it broken, executes the key again and fails
// here.
func TestRememberedAnswersKeepTheContract(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	first := ticket(s, testenv.TenantA, "mem", ticketBody)
	purgeRecords(t, s)
	if _, err := s.Pool.Exec(context.Background(), `DELETE FROM ticket; DELETE FROM idempotency_key`); err != nil {
		t.Fatal(err)
	}
	again := ticket(s, testenv.TenantA, "mem", ticketBody)
	if again.Status != 201 || !bytes.Equal(again.Body, first.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("remembered replay: %d %s, first %s", again.Status, again.Body, first.Body)
	}
	if r := ticket(s, testenv.TenantA, "mem", `{"customer_id":"x","title":"y"}`); r.Status != http.StatusUnprocessableEntity {
		t.Fatalf("changed body against a remembered answer: %d %s", r.Status, r.Body)
	}
	if n := countTickets(t, s); n != 0 {
		t.Fatalf("%d tickets: the key was executed again instead of answered from memory", n)
	}
	if r := ticket(s, testenv.TenantB, "mem", ticketBody); r.Status != http.StatusCreated || r.Header.Get("Idempotent-Replayed") != "false" {
		t.Fatalf("the same key for another tenant: %d %v", r.Status, r.Header)
	}
	if n := countTickets(t, s); n != 1 {
		t.Fatalf("%d tickets, want tenant B's alone", n)
	}
}

// Suspected in #17 (item 15), confirmed here: a retry reopens FAILED
// attempt 1 as attempt 2 while attempt 1's run is still open (its step
// wrote FAILED, the run has not closed yet: a moment normally, a workflow
// task timeout when its worker dies then). With Prefer: wait=0 the start
// attached to that closing run and answered 202, and nothing started
// attempt 2 until reconcile, minutes later. The closing run is stood in
// for by a workflow under the intent's ID, with attempt 1's input, that
// only waits and fails.
func TestAReopenedAttemptGetsARunOfItsOwnWhileTheOldRunCloses(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	const key = "reopen-closing"
	req := failedAttemptOneWithItsRunOpen(t, s, key, func(ctx workflow.Context, _ op.Input) error {
		_ = workflow.Sleep(ctx, 3*time.Second)
		return temporal.NewApplicationError("attempt 1 gave up", "closing")
	})
	if r := s.Do(req); r.Status != http.StatusAccepted && r.Status != http.StatusCreated {
		t.Fatalf("attempt 2: %d %s", r.Status, r.Body)
	}
	waitForStatus(t, s, key, idem.StatusSuccess)
	if rec, _ := s.Records.Get(context.Background(), testenv.TenantA, key); rec.Attempts != 2 {
		t.Fatalf("record %+v", rec)
	}
	if n := countTickets(t, s); n != 1 {
		t.Fatalf("%d tickets", n)
	}
}

// Suspected in #17 (item 16), confirmed here: when a reopened attempt has
// attached to an earlier attempt's run that does not close (its worker
// is gone), and an operator terminates that run, the request settled the
// record FAILED with its own attempt: the operator stopped attempt 1, and
// attempt 2, which never ran, was failed. The stopped run's own attempt
// (from its input) decides; attempt 2 then gets its own run.
func TestTerminatingAnEarlierAttemptsRunDoesNotFailAReopenedOne(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	s.Gateway.Starter.ClosingWait = 300 * time.Millisecond
	const key = "terminate-earlier"
	req := failedAttemptOneWithItsRunOpen(t, s, key, func(ctx workflow.Context, _ op.Input) error {
		return workflow.Sleep(ctx, time.Hour)
	})
	req.Header = map[string]string{"Prefer": "wait=30"}
	answered := make(chan testenv.Response, 1)
	go func() {
		r, _ := testenv.Send(s.URL, req)
		answered <- r
	}()
	time.Sleep(1500 * time.Millisecond) // attempt 2 attached to the stuck run
	if err := s.Temporal.TerminateWorkflow(context.Background(), tickets.WorkflowID(testenv.TenantA, key), "", "an operator stops attempt 1"); err != nil {
		t.Fatal(err)
	}
	r := <-answered
	rec, _ := s.Records.Get(context.Background(), testenv.TenantA, key)
	if r.Status != http.StatusCreated || rec.Status != idem.StatusSuccess || rec.Attempts != 2 {
		t.Fatalf("attempt 2 after attempt 1's run was terminated: %d %s; record %s attempt %d", r.Status, r.Body, rec.Status, rec.Attempts)
	}
	if n := countTickets(t, s); n != 1 {
		t.Fatalf("%d tickets", n)
	}
}

// failedAttemptOneWithItsRunOpen leaves key as an earlier attempt would:
// its record FAILED (its step wrote it) while its run is still open. The
// run is stood in for by run, under the intent's workflow ID with attempt
// 1's input. It returns the request, with Prefer: wait=0, that a retry
// sends.
func failedAttemptOneWithItsRunOpen(t *testing.T, s *testenv.Stack, key string, run func(workflow.Context, op.Input) error) testenv.Request {
	t.Helper()
	s.Server.NewWorker("attempt-1", func(r worker.Registry) {
		r.RegisterWorkflowWithOptions(run, workflow.RegisterOptions{Name: "AttemptOne"})
	})
	if _, err := s.Temporal.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: tickets.WorkflowID(testenv.TenantA, key),
		TaskQueue: "attempt-1"}, "AttemptOne", op.Input{Intent: idem.Intent{TenantID: testenv.TenantA, Key: key, Attempt: 1}}); err != nil {
		t.Fatal(err)
	}
	req := testenv.Request{Path: "/v1/tickets", Token: s.Tokens[testenv.TenantA], Key: key, Body: ticketBody,
		Header: map[string]string{"Prefer": "wait=0"}}
	if r := s.Do(req); r.Status != http.StatusAccepted {
		t.Fatalf("attempt 1: %d %s", r.Status, r.Body)
	}
	if _, err := s.Pool.Exec(context.Background(), `UPDATE idempotency_record SET status = 'FAILED', response_status = 503,
		response_body = '{}' WHERE idem_key = $1`, key); err != nil {
		t.Fatal(err)
	}
	return req
}

// Every statement on the intent's path is bounded as the claim is
// (Starter.ClaimTimeout), not only the claim: here the settle a waiting
// request makes for a terminated run finds the record locked (as it would
// wait on a commit that never finishes), and the agent gets a 503 within
// the bound instead of waiting as long as the lock is held. Its retry
// once the lock is gone is served, with one ticket.
func TestTheSettleAfterATerminateIsBoundedLikeTheClaim(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{NoWorker: true})
	s.Gateway.Starter.ClaimTimeout = 2 * time.Second
	ctx := context.Background()
	wid := tickets.WorkflowID(testenv.TenantA, "locked")
	done := make(chan testenv.Response, 1)
	go func() {
		done <- s.Do(testenv.Request{Path: "/v1/tickets", Token: s.Tokens[testenv.TenantA], Key: "locked", Body: ticketBody, Header: map[string]string{"Prefer": "wait=30"}})
	}()
	waitForRun(t, s.Temporal, wid)
	lock, err := s.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lock.Exec(ctx, `SELECT 1 FROM idempotency_record WHERE tenant_id = $1 AND idem_key = $2 FOR UPDATE`, testenv.TenantA, "locked"); err != nil {
		t.Fatal(err)
	}
	released := time.AfterFunc(20*time.Second, func() { _ = lock.Rollback(context.Background()) })
	defer released.Stop()
	if err := s.Temporal.TerminateWorkflow(ctx, wid, "", "operator"); err != nil {
		t.Fatal(err)
	}
	terminated := time.Now()
	r := <-done
	took := time.Since(terminated)
	if r.Status != http.StatusServiceUnavailable || took > 10*time.Second || !strings.Contains(string(r.Body), "may have executed") {
		t.Fatalf("the waiting request, its settle held by a lock: %d after %s: %s", r.Status, took.Round(time.Millisecond), r.Body)
	}
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	s.StartWorker()
	again := ticket(s, testenv.TenantA, "locked", ticketBody)
	if again.Status != http.StatusCreated || countTickets(t, s) != 1 {
		t.Fatalf("the retry once the lock is gone: %d %s", again.Status, again.Body)
	}
}
