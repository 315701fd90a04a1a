package activities_test

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/idemflow/idemflow/activities"
	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/internal/ops/tickets"
	"github.com/idemflow/idemflow/internal/registry"
	"github.com/idemflow/idemflow/internal/tenant"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/temporal"
)

type fixture struct {
	dbURL   string
	pool    *pgxpool.Pool
	records *idem.Store
	acts    *activities.Activities
	// recall recalls the built-ins' rows, as a process's records do.
	recall idem.Recall
}

func setup(t *testing.T) fixture {
	pool, dbURL := testenv.Pool(t)
	if err := tenant.NewStore(pool).Ensure(context.Background(), "acme", ""); err != nil {
		t.Fatal(err)
	}
	set, err := registry.New()
	if err != nil {
		t.Fatal(err)
	}
	records := idem.NewStore(pool, idem.Retention{}, set.Recall)
	return fixture{dbURL: dbURL, pool: pool, records: records, acts: activities.New(pool, records, nil, nil), recall: set.Recall}
}

// claim records a PROCESSING intent as the gateway would.
func (f fixture) claim(t *testing.T, key string) ticketIntent {
	t.Helper()
	req := tickets.Request{CustomerID: "c", Title: "t", Priority: "normal"}
	fp, err := fingerprint(req)
	if err != nil {
		t.Fatal(err)
	}
	it := idem.Intent{TenantID: "acme", Key: key, BizType: tickets.BizType, Fingerprint: fp, WorkflowID: tickets.WorkflowID("acme", key)}
	c, err := f.records.Claim(context.Background(), idem.ClaimParams{TenantID: it.TenantID, Key: key, BizType: it.BizType, Fingerprint: fp, WorkflowID: it.WorkflowID})
	if err != nil || !c.Owner {
		t.Fatalf("claim: %+v %v", c, err)
	}
	it.Attempt = c.Record.Attempts // as the starter sets it
	return ticketIntent{Intent: it, Request: req}
}

func TestRetriedActivityReturnsTheFirstTicket(t *testing.T) {
	f := setup(t)
	in := f.claim(t, "k")
	first, err := createTicket(f.acts, context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	again, err := createTicket(f.acts, context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first.Body, again.Body) || first.Location != again.Location {
		t.Fatalf("retry answered differently:\n%s\n%s", first.Body, again.Body)
	}
	rec, _ := f.records.Get(context.Background(), "acme", "k")
	if rec.Status != idem.StatusSuccess || !bytes.Equal(rec.Response.Body, first.Body) {
		t.Fatalf("record %+v", rec)
	}
	if n := testenv.Count(t, f.pool, "ticket", ""); n != 1 {
		t.Fatalf("%d tickets", n)
	}
}

func TestConcurrentExecutionsWriteOneTicket(t *testing.T) {
	f := setup(t)
	in := f.claim(t, "race")
	var wg sync.WaitGroup
	bodies := make([][]byte, 10)
	for i := range bodies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := createTicket(f.acts, context.Background(), in)
			if err != nil {
				t.Error(err)
			}
			bodies[i] = out.Body
		}()
	}
	wg.Wait()
	for _, b := range bodies {
		if !bytes.Equal(b, bodies[0]) {
			t.Fatalf("executions disagree:\n%s\n%s", b, bodies[0])
		}
	}
	if n := testenv.Count(t, f.pool, "ticket", ""); n != 1 {
		t.Fatalf("%d tickets", n)
	}
}

func TestResolveWithoutRowFailsTheIntentAndBlocksLateExecution(t *testing.T) {
	f := setup(t)
	in := f.claim(t, "lost")
	res, err := f.acts.ResolveIntent(context.Background(), activities.ResolveInput{Intent: in.Intent, Reason: "test"})
	if err != nil || res.Status != idem.StatusFailed || res.Action != "failed" || res.Outcome.Status != 500 {
		t.Fatalf("resolve: %+v %v", res, err)
	}
	// A zombie attempt that arrives after the record was failed must not
	// write: FAILED means no row.
	_, err = createTicket(f.acts, context.Background(), in)
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != idem.ErrTypeClosed {
		t.Fatalf("late execution: %v", err)
	}
	if n := testenv.Count(t, f.pool, "ticket", ""); n != 0 {
		t.Fatalf("%d tickets after FAILED", n)
	}
	// A retry reopens it (one owner) and may then execute.
	c, err := f.records.Claim(context.Background(), idem.ClaimParams{TenantID: "acme", Key: "lost", BizType: tickets.BizType, Fingerprint: in.Intent.Fingerprint, WorkflowID: in.Intent.WorkflowID})
	if err != nil || !c.Owner || c.Record.Attempts != 2 {
		t.Fatalf("reopen: %+v %v", c, err)
	}
	if _, err := createTicket(f.acts, context.Background(), in); err != nil {
		t.Fatal(err)
	}
}

func TestResolveWithRowBackfillsTheSameBody(t *testing.T) {
	f := setup(t)
	in := f.claim(t, "orphan")
	// The state a crash can leave on a database where the record was
	// re-created: a ticket row and a PROCESSING record.
	tk, err := tickets.Insert(context.Background(), f.pool, newTicket(in))
	if err != nil {
		t.Fatal(err)
	}
	// The step writes its key's row in the same transaction as its row.
	if err := idem.RememberKey(context.Background(), f.pool, in.Intent); err != nil {
		t.Fatal(err)
	}
	res, err := f.acts.ResolveIntent(context.Background(), activities.ResolveInput{Intent: in.Intent, Reason: "test"})
	if err != nil || res.Status != idem.StatusSuccess || res.Action != "backfilled" {
		t.Fatalf("resolve: %+v %v", res, err)
	}
	if !bytes.Equal(res.Outcome.Body, tk.Body()) {
		t.Fatalf("backfilled body differs from the row's:\n%s\n%s", res.Outcome.Body, tk.Body())
	}
	// Settling twice changes nothing: every update names its expected state.
	res2, err := f.acts.ResolveIntent(context.Background(), activities.ResolveInput{Intent: in.Intent, Reason: "again"})
	if err != nil || res2.Action != "none" || !bytes.Equal(res2.Outcome.Body, tk.Body()) {
		t.Fatalf("second resolve: %+v %v", res2, err)
	}
}

func TestConcurrentClaimsHaveOneOwner(t *testing.T) {
	f := setup(t)
	p := idem.ClaimParams{TenantID: "acme", Key: "c", BizType: tickets.BizType, Fingerprint: "fp", WorkflowID: "w"}
	var wg sync.WaitGroup
	var mu sync.Mutex
	owners := 0
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := f.records.Claim(context.Background(), p)
			if err != nil {
				t.Error(err)
				return
			}
			if c.Owner {
				mu.Lock()
				owners++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if owners != 1 {
		t.Fatalf("%d owners", owners)
	}
	_, err := f.records.Claim(context.Background(), idem.ClaimParams{TenantID: "acme", Key: "c", BizType: tickets.BizType, Fingerprint: "other", WorkflowID: "w"})
	var reused *idem.KeyReusedError
	if !errors.As(err, &reused) {
		t.Fatalf("different fingerprint: %v", err)
	}
}

func TestUniqueConstraintIsTheLastLine(t *testing.T) {
	f := setup(t)
	in := f.claim(t, "u")
	if _, err := tickets.Insert(context.Background(), f.pool, newTicket(in)); err != nil {
		t.Fatal(err)
	}
	if _, err := tickets.Insert(context.Background(), f.pool, newTicket(in)); err == nil {
		t.Fatal("a second ticket under the same (tenant, key) was accepted")
	}
}

// An intent without an attempt (0) settles nothing: the attempt check under
// the record's lock has no wildcard, so that only the execution of the
// record's current attempt can settle it.
func TestResolveOfAnIntentWithoutAnAttemptSettlesNothing(t *testing.T) {
	f := setup(t)
	in := f.claim(t, "no-attempt")
	in.Intent.Attempt = 0
	res, err := f.acts.ResolveIntent(context.Background(), activities.ResolveInput{Intent: in.Intent, Reason: "test"})
	if err != nil || res.Status != idem.StatusProcessing || res.Action != "none" {
		t.Fatalf("resolve with attempt 0: %+v %v", res, err)
	}
}
