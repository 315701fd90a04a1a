package activities_test

import (
	"context"
	"strings"
	"testing"

	"github.com/idemflow/idemflow/activities"
	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/op"
	"github.com/idemflow/idemflow/starter"
	"github.com/jackc/pgx/v5"
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
	p, err := o.Prepare([]byte(`{"text":"hello"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	in := starter.OperationIntent(o, "acme", "ends-tx", p)
	c, err := f.records.Claim(context.Background(), idem.ClaimParams{TenantID: in.TenantID, Key: in.Key, BizType: in.BizType,
		Fingerprint: in.Fingerprint, WorkflowID: in.WorkflowID})
	if err != nil {
		t.Fatal(err)
	}
	in.Attempt = c.Record.Attempts
	_, err = activities.Operation{Activities: f.acts, Ops: []*op.Operation{o}}.Run(context.Background(), in.Input(in.Intent).(op.Input))
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
