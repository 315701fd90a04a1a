package bench

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// pgReference is a PostgreSQL-only Idempotency-Key design, as an
// Idempotency-Key middleware would do it: claim the key (insert
// PROCESSING), execute (insert the row) and complete (store the answer) in
// one transaction; a replay reads the key's record under its row lock. Its
// tables live in schema bench_ref, apart from idemflow's.
type pgReference struct{ db *pgxpool.Pool }

func newPGReference(ctx context.Context, db *pgxpool.Pool) (*pgReference, error) {
	for _, sql := range []string{
		`CREATE SCHEMA IF NOT EXISTS bench_ref`,
		`CREATE TABLE IF NOT EXISTS bench_ref.idem (idem_key text PRIMARY KEY, fingerprint text NOT NULL,
			status text NOT NULL, response bytea)`,
		`CREATE TABLE IF NOT EXISTS bench_ref.ticket (id uuid PRIMARY KEY, idem_key text UNIQUE NOT NULL, body bytea NOT NULL)`,
	} {
		if _, err := db.Exec(ctx, sql); err != nil {
			return nil, fmt.Errorf("bench: PostgreSQL reference: %w", err)
		}
	}
	return &pgReference{db: db}, nil
}

func (p *pgReference) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil || key == "" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	sum := sha256.Sum256(body)
	fp := hex.EncodeToString(sum[:])
	var status int
	var answer []byte
	err = pgx.BeginFunc(r.Context(), p.db, func(tx pgx.Tx) error {
		var gotFP, st string
		err := tx.QueryRow(r.Context(), `SELECT fingerprint, status, response FROM bench_ref.idem WHERE idem_key = $1 FOR UPDATE`, key).
			Scan(&gotFP, &st, &answer)
		switch {
		case err == nil && gotFP != fp:
			status = http.StatusUnprocessableEntity
			return nil
		case err == nil && st == "SUCCESS":
			status = http.StatusCreated
			return nil
		case err == nil:
			status = http.StatusConflict
			return nil
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		tag, err := tx.Exec(r.Context(), `INSERT INTO bench_ref.idem (idem_key, fingerprint, status) VALUES ($1, $2, 'PROCESSING')
			ON CONFLICT DO NOTHING`, key, fp)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			status = http.StatusConflict
			return nil
		}
		answer = []byte(fmt.Sprintf(`{"ticket_id":%q,"idempotency_key":%q}`, uuid.NewString(), key))
		if _, err := tx.Exec(r.Context(), `INSERT INTO bench_ref.ticket (id, idem_key, body) VALUES ($1, $2, $3)`, uuid.New(), key, body); err != nil {
			return err
		}
		if _, err := tx.Exec(r.Context(), `UPDATE bench_ref.idem SET status = 'SUCCESS', response = $2 WHERE idem_key = $1`, key, answer); err != nil {
			return err
		}
		status = http.StatusCreated
		return nil
	})
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(answer)
}

// workflowTaskQueue is the bare workflow's own task queue.
const workflowTaskQueue = "idemflow-bench-reference"

// workflowReference starts a bare workflow per request on the same Temporal
// server, with eager start and one no-op local activity, and waits for it:
// the least a workflow per intent can cost there.
type workflowReference struct {
	tc client.Client
	w  worker.Worker
}

func newWorkflowReference(tc client.Client) (*workflowReference, error) {
	w := worker.New(tc, workflowTaskQueue, worker.Options{})
	w.RegisterWorkflowWithOptions(bareWorkflow, workflow.RegisterOptions{Name: "BenchBareWorkflow"})
	w.RegisterActivityWithOptions(noop, activity.RegisterOptions{Name: "BenchNoop"})
	if err := w.Start(); err != nil {
		return nil, fmt.Errorf("bench: reference worker: %w", err)
	}
	return &workflowReference{tc: tc, w: w}, nil
}

func (wr *workflowReference) stop() { wr.w.Stop() }

func (wr *workflowReference) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	run, err := wr.tc.ExecuteWorkflow(r.Context(), client.StartWorkflowOptions{
		ID: "bench-ref/" + r.Header.Get("Idempotency-Key"), TaskQueue: workflowTaskQueue, EnableEagerStart: true,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
	}, "BenchBareWorkflow")
	if err == nil {
		err = run.Get(r.Context(), nil)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusCreated)
}

func bareWorkflow(ctx workflow.Context) error {
	ctx = workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: 10 * time.Second})
	return workflow.ExecuteLocalActivity(ctx, "BenchNoop").Get(ctx, nil)
}

func noop(context.Context) error { return nil }
