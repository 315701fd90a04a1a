package activities

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/op"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// openState is how far an openingTx got.
type openState int

const (
	// stateUnopened: the step has sent no statement yet.
	stateUnopened openState = iota
	// stateOpen: BEGIN, the record's lock and the savepoint took effect.
	stateOpen
	// stateNotOpen: the record is not open for the intent; the transaction
	// the pipeline began is aborted, and the step's statement did not run.
	stateNotOpen
	// stateBroken: the pipeline failed otherwise (a lost connection).
	stateBroken
)

// errNotOpen is what the step's statements return once its record was
// found not open: the execution then reads the record under its lock and
// decides, whatever the step did with the error.
var errNotOpen = errors.New("the intent's record is not open for this execution")

// openingTx is the step's transaction on the common path. It is not begun
// until the step's first statement, which is sent in one pipeline behind
// what opens it (idem.QueueOpen: BEGIN, the record's lock, the savepoint),
// so that opening costs no round trip of its own. A record that is not
// open for the intent aborts the pipeline at the lock, before the step's
// statement, and every statement of the step then fails with errNotOpen.
// Once open, it is pgx's transaction. What the step queues with op.Later
// it keeps for the finishing pipeline (executeOnce), which, when the step
// sent nothing itself, opens the transaction too.
//
// Like stepTx, it cannot be committed or rolled back by the step.
type openingTx struct {
	conn  *pgx.Conn
	in    idem.Intent
	state openState
	err   error
	tx    pgx.Tx // once open
	// later are the statements the step queued with op.Later, for the
	// pipeline that finishes the record; with nothing sent before them,
	// that pipeline opens the transaction too.
	later []*pgx.QueuedQuery
	// now: op.Later sends at once (the long way, after a pipeline that
	// carried later statements failed).
	now bool
}

// openingTx is the transaction a step runs in: op.ExecutionTx.
var _ op.ExecutionTx = (*openingTx)(nil)

// Later keeps b's statements for the finishing pipeline (op.Later), or
// sends them at once on the long way.
func (t *openingTx) Later(ctx context.Context, b *pgx.Batch) error {
	switch {
	case t.now:
		return t.SendBatch(ctx, b).Close()
	case t.state == stateNotOpen:
		return errNotOpen
	case t.state == stateBroken:
		return t.err
	}
	t.later = append(t.later, b.QueuedQueries...)
	return nil
}

// Hinted reports that the step may use its input's hint (op.In.Hint):
// on its first run, not on the long way after a pipeline failed, which
// may have failed because the hint was stale.
func (t *openingTx) Hinted() bool { return !t.now }

// open sends the open with what queue adds to its pipeline, and reads the
// open's results. It returns nil, nil when the transaction was open
// already: the caller then sends its statement on t.tx.
func (t *openingTx) open(ctx context.Context, queue func(b *pgx.Batch)) (pgx.BatchResults, error) {
	switch t.state {
	case stateUnopened:
	case stateOpen:
		return nil, nil
	case stateNotOpen:
		return nil, errNotOpen
	case stateBroken:
		return nil, t.err
	}
	b := &pgx.Batch{}
	idem.QueueOpen(b, t.in, stepSavepoint)
	opening := b.Len()
	queue(b)
	br := t.conn.SendBatch(ctx, b)
	for range opening {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			if idem.NotOpen(err) {
				t.state = stateNotOpen
				return nil, errNotOpen
			}
			t.state, t.err = stateBroken, fmt.Errorf("open the transaction: %w", err)
			return nil, t.err
		}
	}
	t.state, t.tx = stateOpen, br.Tx()
	return br, nil
}

// begun opens the transaction on its own, for what cannot share its
// pipeline, and returns it.
func (t *openingTx) begun(ctx context.Context) (pgx.Tx, error) {
	br, err := t.open(ctx, func(*pgx.Batch) {})
	if br != nil {
		err = br.Close()
	}
	if err != nil {
		return nil, err
	}
	return t.tx, nil
}

func (t *openingTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	br, err := t.open(ctx, func(b *pgx.Batch) { b.Queue(sql, args...) })
	switch {
	case err != nil:
		return pgconn.CommandTag{}, err
	case br == nil:
		return t.tx.Exec(ctx, sql, args...)
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

func (t *openingTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	br, err := t.open(ctx, func(b *pgx.Batch) { b.Queue(sql, args...) })
	switch {
	case err != nil:
		return nil, err
	case br == nil:
		return t.tx.Query(ctx, sql, args...)
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

func (t *openingTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	br, err := t.open(ctx, func(b *pgx.Batch) { b.Queue(sql, args...) })
	switch {
	case err != nil:
		return errRow{err}
	case br == nil:
		return t.tx.QueryRow(ctx, sql, args...)
	}
	return batchRow{Row: br.QueryRow(), br: br}
}

func (t *openingTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	br, err := t.open(ctx, func(open *pgx.Batch) { open.QueuedQueries = append(open.QueuedQueries, b.QueuedQueries...) })
	switch {
	case err != nil:
		return pgx.FailedBatchResults(b, err)
	case br == nil:
		return t.tx.SendBatch(ctx, b)
	}
	return br
}

func (t *openingTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	tx, err := t.begun(ctx)
	if err != nil {
		return 0, err
	}
	return tx.CopyFrom(ctx, table, columns, src)
}

func (t *openingTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	tx, err := t.begun(ctx)
	if err != nil {
		return nil, err
	}
	return tx.Prepare(ctx, name, sql)
}

func (t *openingTx) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := t.begun(ctx)
	if err != nil {
		return nil, err
	}
	return tx.Begin(ctx)
}

// LargeObjects opens the transaction on its own if it is not yet.
func (t *openingTx) LargeObjects() pgx.LargeObjects {
	tx, err := t.begun(context.Background())
	if err != nil {
		// pgx's LargeObjects carries no error. The SDK fails the attempt
		// on a panic, and Temporal retries it.
		panic(fmt.Errorf("large objects: %w", err))
	}
	return tx.LargeObjects()
}

func (t *openingTx) Conn() *pgx.Conn                { return t.conn }
func (t *openingTx) Commit(context.Context) error   { return errStepEnds }
func (t *openingTx) Rollback(context.Context) error { return errStepEnds }

// batchRows are the rows of a pipelined statement: closing them reads the
// rest of the pipeline.
type batchRows struct {
	pgx.Rows
	br  pgx.BatchResults
	err error
}

func (r *batchRows) Close() {
	if r.br == nil {
		return
	}
	r.Rows.Close()
	r.err = r.br.Close()
	r.br = nil
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

// batchRow is pgx's row of a pipelined statement: scanning it reads the
// rest of the pipeline.
type batchRow struct {
	pgx.Row
	br pgx.BatchResults
}

func (r batchRow) Scan(dest ...any) error {
	err := r.Row.Scan(dest...)
	if cerr := r.br.Close(); err == nil {
		err = cerr
	}
	return err
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
