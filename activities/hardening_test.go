package activities_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/idemflow/idemflow/activities"
	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/internal/ops/tickets"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
	"go.temporal.io/sdk/temporal"
)

// A settle of attempt 1 arriving after the record was failed and reopened
// (attempt 2) must leave attempt 2 alone.
func TestLateSettleOfAnEarlierAttemptDoesNotFailAReopenedOne(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	in := f.claim(t, "reopened")
	first, _ := f.records.Get(ctx, "acme", "reopened")
	in.Intent.Attempt = first.Attempts
	if _, err := f.acts.ResolveIntent(ctx, activities.ResolveInput{Intent: in.Intent, Reason: "gave up"}); err != nil {
		t.Fatal(err)
	}
	c, err := f.records.Claim(ctx, idem.ClaimParams{TenantID: "acme", Key: "reopened", BizType: tickets.BizType, Fingerprint: in.Intent.Fingerprint, WorkflowID: in.Intent.WorkflowID})
	if err != nil || !c.Owner || c.Record.Attempts != 2 {
		t.Fatalf("reopen: %+v %v", c, err)
	}
	// The old run's settle, late, with attempt 1.
	res, err := f.acts.ResolveIntent(ctx, activities.ResolveInput{Intent: in.Intent, Reason: "old run gave up again"})
	if err != nil || res.Action != idem.ResolvedNone {
		t.Fatalf("late settle: %+v %v", res, err)
	}
	rec, _ := f.records.Get(ctx, "acme", "reopened")
	if rec.Status != idem.StatusProcessing {
		t.Fatalf("the reopened attempt was settled by the old one: %+v", rec)
	}
	// The reopened attempt's own execution still runs.
	in.Intent.Attempt = 2
	if _, err := createTicket(f.acts, ctx, in); err != nil {
		t.Fatal(err)
	}
}

// Anyone who can start workflows on the task queue can hand an activity any
// input: content that does not match the claimed fingerprint is refused.
func TestActivityRefusesARequestThatDoesNotMatchItsFingerprint(t *testing.T) {
	f := setup(t)
	in := f.claim(t, "forged")
	in.Request.Title = "written by someone else"
	_, err := createTicket(f.acts, context.Background(), in)
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != idem.ErrTypeForged || !appErr.NonRetryable() {
		t.Fatalf("forged input: %v", err)
	}
	if n := testenv.Count(t, f.pool, "ticket", ""); n != 0 {
		t.Fatalf("%d tickets", n)
	}
}

// Input PostgreSQL cannot store, if it ever passes validation, fails the
// intent at once instead of being retried for minutes.
func TestUnstorableInputFailsAtOnceWithAStableProblem(t *testing.T) {
	f := setup(t)
	in := f.claim(t, "nul")
	in.Request.Title = "bad\x00title"
	fp, err := fingerprint(in.Request)
	if err != nil {
		t.Fatal(err)
	}
	in.Intent.Fingerprint = fp
	if _, err := f.pool.Exec(context.Background(), `UPDATE idempotency_record SET fingerprint = $1 WHERE idem_key = 'nul'`, fp); err != nil {
		t.Fatal(err)
	}
	_, err = createTicket(f.acts, context.Background(), in)
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || !appErr.NonRetryable() {
		t.Fatalf("unstorable input: %v", err)
	}
	rec, _ := f.records.Get(context.Background(), "acme", "nul")
	if rec.Status != idem.StatusFailed || rec.Response.Status != 400 || bytes.Contains(rec.Response.Body, []byte("22021")) ||
		!bytes.Contains(rec.Response.Body, []byte("/problems/unstorable-input")) {
		t.Fatalf("record: %+v %s", rec, rec.Response.Body)
	}
}

// The stored answer of a failed execution is what tenants see (replays,
// GET /v1/operations): it never carries the raw cause.
func TestFailedAnswerHidesTheRawCause(t *testing.T) {
	f := setup(t)
	in := f.claim(t, "gave-up")
	reason := `execution gave up: ERROR: relation "ticket" does not exist (SQLSTATE 42P01) worker 4242@build-host`
	res, err := f.acts.ResolveIntent(context.Background(), activities.ResolveInput{Intent: in.Intent, Reason: reason})
	if err != nil || res.Status != idem.StatusFailed {
		t.Fatalf("%+v %v", res, err)
	}
	for _, leak := range []string{"SQLSTATE", "4242@build-host", "relation"} {
		if bytes.Contains(res.Outcome.Body, []byte(leak)) {
			t.Fatalf("stored answer leaks %q: %s", leak, res.Outcome.Body)
		}
	}
	rec, _ := f.records.Get(context.Background(), "acme", "gave-up")
	if rec.ErrorReason != reason {
		t.Fatalf("the cause is kept for operators in error_reason: %q", rec.ErrorReason)
	}
}

// A purge that raced a claim: the record was made again (PROCESSING) for a
// key whose business row already exists, because the claim read
// idempotency_key before the earlier intent committed. The execution then
// finds the key known (the slow path, under the record's lock): with the
// row's own parameters it answers with that row, with others it is
// refused as a reused key, and nothing is written either way.
func TestAnExecutionWhoseKeyIsAlreadyWrittenRecallsOrRefuses(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	first := f.claim(t, "raced")
	want, err := createTicket(f.acts, ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	reopen := func(in ticketIntent) {
		t.Helper()
		if _, err := f.pool.Exec(ctx, `UPDATE idempotency_record SET status = 'PROCESSING', fingerprint = $2, response_status = NULL,
			response_body = NULL, resource_path = NULL WHERE idem_key = $1`, in.Intent.Key, in.Intent.Fingerprint); err != nil {
			t.Fatal(err)
		}
	}

	other := first
	other.Request.Title = "other parameters"
	if other.Intent.Fingerprint, err = fingerprint(other.Request); err != nil {
		t.Fatal(err)
	}
	reopen(other)
	_, err = createTicket(f.acts, ctx, other)
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != idem.ErrTypeRejected || !strings.Contains(err.Error(), "idempotency-key-reused") {
		t.Fatalf("other parameters under a written key: %v, want the reused key refused", err)
	}
	if rec, err := f.records.Get(ctx, "acme", "raced"); err != nil || rec.Status != idem.StatusFailed {
		t.Fatalf("record %s %v, want FAILED", rec.Status, err)
	}

	reopen(first)
	got, err := createTicket(f.acts, ctx, first)
	if err != nil || !bytes.Equal(got.Body, want.Body) {
		t.Fatalf("the same parameters under a written key: %s %v, want the first answer %s", got.Body, err, want.Body)
	}
	if n := testenv.Count(t, f.pool, "ticket", "idem_key = 'raced'"); n != 1 {
		t.Fatalf("%d tickets, want 1", n)
	}
}
