package activities_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemflow/idemflow/activities"
	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
	"github.com/idemflow/idemflow/op"
	"github.com/idemflow/idemflow/starter"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

type noteRequest struct {
	Text string `json:"text"`
}

// A step runs inside the execution's transaction and cannot end it: were
// its Commit to commit, its row would exist while the record still said
// PROCESSING. The step gets an error, and nothing commits.
func TestAStepCannotEndItsTransaction(t *testing.T) {
	f := setup(t)
	if _, err := f.pool.Exec(context.Background(), `CREATE TABLE note (tenant_id text, idem_key text, text text, UNIQUE (tenant_id, idem_key))`); err != nil {
		t.Fatal(err)
	}
	var commitErr, rollbackErr error
	o := op.Define(op.Spec[noteRequest, struct{}]{
		Name: "note",
		Step: func(ctx context.Context, tx pgx.Tx, in op.In[noteRequest]) (struct{}, error) {
			if _, err := tx.Exec(ctx, `INSERT INTO note VALUES ($1, $2, $3)`, in.TenantID, in.Key, in.Request.Text); err != nil {
				return struct{}{}, err
			}
			commitErr, rollbackErr = tx.Commit(ctx), tx.Rollback(ctx)
			return struct{}{}, commitErr
		},
		Lookup: func(context.Context, op.Querier, string, string) (struct{}, bool, error) {
			return struct{}{}, false, nil
		},
		View:  func(struct{}) op.Answer { return op.Answer{Body: map[string]string{}} },
		Table: "note",
	})
	err := runOperation(t, f, o, "ends-tx", `{"text":"hello"}`)
	for _, e := range []error{commitErr, rollbackErr, err} {
		if e == nil || !strings.Contains(e.Error(), "must not end its transaction") {
			t.Errorf("a step ending its transaction: %v", e)
		}
	}
	var n int
	if err := f.pool.QueryRow(context.Background(), `SELECT count(*) FROM note`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d notes committed (%v)", n, err)
	}
	rec, err := f.records.Get(context.Background(), "acme", "ends-tx")
	if err != nil || rec.Status != idem.StatusProcessing {
		t.Errorf("record %s %v, want PROCESSING (nothing committed)", rec.Status, err)
	}
}

// runOperation claims key for o with body, as the gateway does (with the
// operation's hint, if it has one), and runs o's activity once.
func runOperation(t *testing.T, f fixture, o *op.Operation, key, body string) error {
	t.Helper()
	_, err := runHinted(t, f, o, key, body, nil)
	return err
}

// runHinted is runOperation, answering too; a hint other than nil
// replaces what the claim read (a stale or forged one).
func runHinted(t *testing.T, f fixture, o *op.Operation, key, body string, hint json.RawMessage) (idem.Outcome, error) {
	t.Helper()
	p, err := o.Prepare([]byte(body), nil)
	if err != nil {
		t.Fatal(err)
	}
	in := starter.OperationIntent(o, "acme", key, p)
	c, err := f.records.Claim(context.Background(), idem.ClaimParams{TenantID: in.TenantID, Key: in.Key, BizType: in.BizType,
		Fingerprint: in.Fingerprint, WorkflowID: in.WorkflowID, Hint: in.Hint})
	if err != nil {
		t.Fatal(err)
	}
	in.Attempt = c.Record.Attempts
	if hint == nil {
		hint = c.Hint
	}
	return activities.Operation{Activities: f.acts, Ops: []*op.Operation{o}}.Run(context.Background(), in.Input(in.Intent, hint).(op.Input))
}

// What a step queues for later (op.Later) is in its transaction: it
// commits with the record, after what the step sent itself, or not at all
// when the step refuses; on a transaction that is not an execution's it is
// sent at once.
func TestLaterStatementsCommitWithTheRecordOrNotAtAll(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	if _, err := f.pool.Exec(ctx, `CREATE TABLE note (tenant_id text, idem_key text, text text, seq serial, UNIQUE (tenant_id, idem_key, text))`); err != nil {
		t.Fatal(err)
	}
	o := op.Define(op.Spec[noteRequest, struct{}]{
		Name: "later_note",
		Step: func(ctx context.Context, tx pgx.Tx, in op.In[noteRequest]) (struct{}, error) {
			// Queued before the step's own statement, sent after it.
			b := &pgx.Batch{}
			b.Queue(`INSERT INTO note (tenant_id, idem_key, text) VALUES ($1, $2, 'later')`, in.TenantID, in.Key)
			if err := op.Later(ctx, tx, b); err != nil {
				return struct{}{}, err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO note (tenant_id, idem_key, text) VALUES ($1, $2, 'now')`, in.TenantID, in.Key); err != nil {
				return struct{}{}, err
			}
			if in.Request.Text == "refuse" {
				return struct{}{}, &op.Rejection{Code: "refused", Reason: "asked to"}
			}
			if in.Request.Text == "guard" {
				// A row count checked in Go: by the time it could
				// object, PostgreSQL has run the COMMIT behind it.
				g := &pgx.Batch{}
				g.Queue(`INSERT INTO note (tenant_id, idem_key, text) VALUES ($1, $2, 'guarded')`, in.TenantID, in.Key).
					Exec(func(pgconn.CommandTag) error { return errors.New("the guard objects") })
				if err := op.Later(ctx, tx, g); err != nil {
					return struct{}{}, err
				}
			}
			return struct{}{}, nil
		},
		Lookup: func(context.Context, op.Querier, string, string) (struct{}, bool, error) {
			return struct{}{}, false, nil
		},
		View:       func(struct{}) op.Answer { return op.Answer{Body: map[string]string{}} },
		Table:      "note",
		Rejections: map[string]string{"refused": "The step was asked to refuse."},
	})
	if err := runOperation(t, f, o, "done", `{"text":"write"}`); err != nil {
		t.Fatal(err)
	}
	var order string
	if err := f.pool.QueryRow(ctx, `SELECT string_agg(text, ',' ORDER BY seq) FROM note WHERE idem_key = 'done'`).Scan(&order); err != nil || order != "now,later" {
		t.Errorf("notes %q (%v), want the step's own statement, then the later one", order, err)
	}
	if rec, err := f.records.Get(ctx, "acme", "done"); err != nil || rec.Status != idem.StatusSuccess {
		t.Errorf("record %s %v, want SUCCESS", rec.Status, err)
	}

	if err := runOperation(t, f, o, "refused", `{"text":"refuse"}`); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("a refusal: %v", err)
	}
	if n := testenv.Count(t, f.pool, "note", "idem_key = 'refused'"); n != 0 {
		t.Errorf("a refused step's later statement committed: %d notes", n)
	}
	if rec, err := f.records.Get(ctx, "acme", "refused"); err != nil || rec.Status != idem.StatusFailed {
		t.Errorf("record %s %v, want FAILED", rec.Status, err)
	}

	// A later statement with a result callback is refused: its callback
	// could not stop the commit sent behind it.
	if err := runOperation(t, f, o, "guarded", `{"text":"guard"}`); err == nil || !strings.Contains(err.Error(), "result callback") {
		t.Errorf("a later statement with a callback: %v, want it refused", err)
	}
	if n := testenv.Count(t, f.pool, "note", "idem_key = 'guarded'"); n != 0 {
		t.Errorf("a later statement whose callback objected committed: %d notes", n)
	}

	tx, err := f.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO note (tenant_id, idem_key, text) VALUES ('acme', 'plain', 'later')`)
	if err := op.Later(ctx, tx, b); err != nil {
		t.Fatal(err)
	}
	if n := testenv.Count(t, tx, "note", "idem_key = 'plain'"); n != 1 {
		t.Errorf("op.Later on a plain transaction: %d notes, want it sent at once", n)
	}
}

// countedRequest counts its decodes (a package variable: a test's own
// counter, read only by TestAnExecutionDecodesItsRequestOnce).
type countedRequest struct {
	Text string `json:"text"`
}

var countedDecodes atomic.Int32

func (r *countedRequest) UnmarshalJSON(b []byte) error {
	countedDecodes.Add(1)
	var plain struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(b, &plain); err != nil {
		return err
	}
	r.Text = plain.Text
	return nil
}

// An execution decodes its request once: the fingerprint it checks and
// the step it runs read the same decode (and so does the step run again on
// the long way, after a pipeline with Later statements failed).
func TestAnExecutionDecodesItsRequestOnce(t *testing.T) {
	f := setup(t)
	if _, err := f.pool.Exec(context.Background(), `CREATE TABLE counted (tenant_id text, idem_key text, text text, UNIQUE (tenant_id, idem_key))`); err != nil {
		t.Fatal(err)
	}
	o := op.Define(op.Spec[countedRequest, struct{}]{
		Name: "counted",
		Step: func(ctx context.Context, tx pgx.Tx, in op.In[countedRequest]) (struct{}, error) {
			_, err := tx.Exec(ctx, `INSERT INTO counted VALUES ($1, $2, $3)`, in.TenantID, in.Key, in.Request.Text)
			return struct{}{}, err
		},
		Lookup: func(context.Context, op.Querier, string, string) (struct{}, bool, error) {
			return struct{}{}, false, nil
		},
		View:  func(struct{}) op.Answer { return op.Answer{Body: map[string]string{}} },
		Table: "counted",
	})
	p, err := o.Prepare([]byte(`{"text":"once"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	in := starter.OperationIntent(o, "acme", "decoded-once", p)
	c, err := f.records.Claim(context.Background(), idem.ClaimParams{TenantID: in.TenantID, Key: in.Key, BizType: in.BizType,
		Fingerprint: in.Fingerprint, WorkflowID: in.WorkflowID, Hint: in.Hint})
	if err != nil {
		t.Fatal(err)
	}
	in.Attempt = c.Record.Attempts
	countedDecodes.Store(0)
	if _, err := (activities.Operation{Activities: f.acts, Ops: []*op.Operation{o}}).Run(context.Background(), in.Input(in.Intent, c.Hint).(op.Input)); err != nil {
		t.Fatal(err)
	}
	if n := countedDecodes.Load(); n != 1 {
		t.Fatalf("the execution decoded its request %d times, want 1", n)
	}
}
