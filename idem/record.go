package idem

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/idemflow/idemflow/internal/apperr"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Status is the life cycle of an intent's idempotency record.
type Status string

const (
	// StatusProcessing: accepted, its workflow may or may not be running.
	StatusProcessing Status = "PROCESSING"
	// StatusSuccess: the business row exists and Response is its answer.
	StatusSuccess Status = "SUCCESS"
	// StatusFailed: nothing was written; a retry with the same parameters
	// may execute again, unless the answer is final (Outcome.Final).
	StatusFailed Status = "FAILED"
)

// StatusOutcomeUnknown is the answer status of an intent whose effect's
// outcome is unknown for good: an HTTP tool's call that got no answer
// saying whether it took effect, and that may never be sent again (it is
// at_most_once, or the downstream refused the resend). Only
// /problems/outcome-unknown answers with it.
const StatusOutcomeUnknown = 502

// Final reports whether a FAILED record with this answer is final: a retry
// gets it again as a replay, and never runs again. Every other FAILED
// record is reopened by a retry with the same parameters.
func (o Outcome) Final() bool { return o.Status == StatusOutcomeUnknown }

// Outcome is the answer an intent produced, stored so that every retry gets
// it back byte for byte.
type Outcome struct {
	Status   int    `json:"status"`
	Body     Answer `json:"body"`
	Location string `json:"location,omitempty"`
	// ContentType is the answer's media type when it is not idemflow's
	// own (JSON, or problem+json from 400 on): an HTTP tool's downstream
	// answer, replayed as it came.
	ContentType string `json:"content_type,omitempty"`
}

// Record is one row of idempotency_record.
type Record struct {
	ID          uuid.UUID
	TenantID    string
	Key         string
	BizType     string
	Fingerprint string
	Status      Status
	Response    Outcome
	ErrorReason string
	WorkflowID  string
	Attempts    int
	CreatedAt   time.Time
	UpdatedAt   time.Time
	ExpireAt    time.Time
	// Origin is the claiming request's Idempotency-Origin (ClaimParams),
	// uuid.Nil when it sent none or the record was rebuilt after purge.
	Origin uuid.UUID
}

// Querier is what a pool, a connection and a transaction all offer, so
// that the store's statements can join a caller's transaction (Begin in a
// transaction is a savepoint).
type Querier interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

var (
	// errNoRecord: no record for that tenant and key (or ID). It is an
	// apperr.ErrNotFound, the one not-found error callers test for.
	errNoRecord = fmt.Errorf("idempotency record: %w", apperr.ErrNotFound)
	// ErrNotProcessing: a completion named PROCESSING as the expected state
	// and found another; someone else finished the intent first.
	ErrNotProcessing = errors.New("idempotency record is not PROCESSING")
)

// KeyReusedError reports a key sent again with different parameters.
type KeyReusedError struct {
	Key     string
	BizType string // of the first request
	Asked   string // of this request
}

// Error says plainly whether the key was used for another operation or for
// this one with other parameters: the two mistakes have different fixes.
// It says what happened and nothing more: integrations hand it to a model,
// which cannot choose keys and would read advice to use a new key as
// "call again", the duplicate idemflow prevents (modeltexts.json).
func (e *KeyReusedError) Error() string {
	if e.Asked != "" && e.Asked != e.BizType {
		return fmt.Sprintf("idempotency key %q was already used for another operation (%s), not %s; this request was not executed", e.Key, e.BizType, e.Asked)
	}
	return fmt.Sprintf("idempotency key %q was already used with different parameters (first use: %s); this request was not executed", e.Key, e.BizType)
}

// Retention says how long a finished record is kept, per business type.
type Retention struct {
	Default   time.Duration
	ByBizType map[string]time.Duration
}

// DefaultRetention is 7 days: far longer than any agent's retry window
// (see RetentionAdvice in schedule), and the rows are small.
const DefaultRetention = 7 * 24 * time.Hour

// For returns the retention of bizType.
func (r Retention) For(bizType string) time.Duration {
	if d, ok := r.ByBizType[bizType]; ok && d > 0 {
		return d
	}
	if r.Default > 0 {
		return r.Default
	}
	return DefaultRetention
}

// Prior is what a business row remembers of the intent that wrote it:
// enough to rebuild that intent's record after the record was purged.
type Prior struct {
	BizType     string
	Fingerprint string
	WorkflowID  string
	Outcome     Outcome
}

// Recall finds the business row written under (tenantID, key) within q.
// found is false when no row exists. Business rows are never purged, so a
// key stays remembered after its record is gone.
type Recall func(ctx context.Context, q Querier, tenantID, key string) (prior Prior, found bool, err error)

// Store owns the idempotency_record table: no other package writes it.
type Store struct {
	db        Querier
	retention Retention
	recall    Recall
	// Waiters, when set, is told of every record this store's users
	// settle (see Waiters); the gateway and worker of one process share it.
	Waiters *Waiters
	// NotifyChannel, when set (to SettledChannel), is where Settled also
	// announces a record, for gateways in other processes that Listen.
	NotifyChannel string
	// origin names this store in its notifications, so that its own
	// Listen skips them.
	origin string
	// quiet: no other process listens (WatchListeners).
	quiet atomic.Bool
}

// NewStore returns a Store over db (usually a *pgxpool.Pool). recall is
// consulted whenever a key has no record, so that a key reused after its
// record was purged is still a replay or a conflict, never a new
// execution; it may be nil only for a store that never claims or resolves.
func NewStore(db Querier, retention Retention, recall Recall) *Store {
	return &Store{db: db, retention: retention, recall: recall, origin: uuid.NewString()}
}

// Recall finds the business row of (tenantID, key) within q.
func (s *Store) Recall(ctx context.Context, q Querier, tenantID, key string) (Prior, bool, error) {
	if s.recall == nil {
		return Prior{}, false, errors.New("idem: this store was made without a Recall")
	}
	return s.recall(ctx, q, tenantID, key)
}

const recordColumns = `id, tenant_id, idem_key, biz_type, fingerprint, status,
	response_status, response_body, resource_path, error_reason, workflow_id,
	attempts, created_at, updated_at, expire_at, response_content_type, origin`

func scanRecord(row pgx.Row) (Record, error) { return scanRecordAfter(row) }

// scanRecordAfter scans a row of first's columns, then recordColumns.
func scanRecordAfter(row pgx.Row, first ...any) (Record, error) {
	var r Record
	var respStatus *int32
	var location, reason, contentType *string
	var origin *uuid.UUID
	err := row.Scan(append(first, &r.ID, &r.TenantID, &r.Key, &r.BizType, &r.Fingerprint, &r.Status,
		&respStatus, &r.Response.Body, &location, &reason, &r.WorkflowID,
		&r.Attempts, &r.CreatedAt, &r.UpdatedAt, &r.ExpireAt, &contentType, &origin)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return Record{}, errNoRecord
	}
	if err != nil {
		return Record{}, err
	}
	if respStatus != nil {
		r.Response.Status = int(*respStatus)
	}
	if location != nil {
		r.Response.Location = *location
	}
	if reason != nil {
		r.ErrorReason = *reason
	}
	if contentType != nil {
		r.Response.ContentType = *contentType
	}
	if origin != nil {
		r.Origin = *origin
	}
	return r, nil
}

// ClaimParams identifies an intent being submitted.
type ClaimParams struct {
	TenantID    string
	Key         string
	BizType     string
	Fingerprint string
	WorkflowID  string
	// Hint, if set, is read in the claim's pipeline, at no round trip of
	// its own (op.Spec.Hint).
	Hint *Hint
	// Origin is the caller's name for this call, the same on each of its
	// transport retries (uuid.Nil: none). A claim that creates or reopens
	// the record keeps it, so that the same call asking again is known
	// as the one that ran the intent (Record.Mine).
	Origin uuid.UUID
}

// Mine reports whether a request of origin claimed the record: the call
// that ran the intent, asking again after its answer was lost. A request
// without an origin is never the claimer's.
func (r Record) Mine(origin uuid.UUID) bool {
	return origin != uuid.Nil && r.Origin == origin
}

// Hint is a read for an intent's step, sent with its claim: one row of
// one column, JSON (NULL is none). It is read without a lock, so the step
// may use it only as a guess that PostgreSQL verifies (op.Spec.Hint).
type Hint struct {
	SQL  string
	Args []any
}

// Claim is the result of submitting an intent.
type Claim struct {
	Record Record
	// Owner is true when this call created the record or reopened a FAILED
	// one: it started this attempt, as opposed to a duplicate of it.
	Owner bool
	// Hint is what ClaimParams.Hint read, when the claim's first statement
	// carried it and it read a value; nil otherwise (a claim that took
	// more rounds, or a hint that failed and was dropped).
	Hint json.RawMessage
}

// claimOnce sends the claim's first statement, with hint's read behind
// it when there is one, in one pipeline. hintErr is PostgreSQL's refusal
// of the hint, which rolled the claim back with it (the pipeline is one
// implicit transaction). A hint that read no row, or that Go cannot
// scan, leaves the claim as it went, with no hint: the claim's result was
// read first, so it is known, and sending it again would take the record
// this request inserted for a duplicate's.
func (s *Store) claimOnce(ctx context.Context, p ClaimParams, hint *Hint, ttl float64, inserted *bool) (rec Record, read json.RawMessage, hintErr, err error) {
	args := []any{p.TenantID, p.Key, uuid.New(), p.BizType, p.Fingerprint, p.WorkflowID, ttl, nullable(p.Origin)}
	sb, batches := s.db.(interface {
		SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	})
	if hint == nil || !batches {
		rec, err = scanRecordAfter(s.db.QueryRow(ctx, claimSQL, args...), inserted)
		return rec, nil, nil, err
	}
	b := &pgx.Batch{}
	b.Queue(claimSQL, args...)
	b.Queue(hint.SQL, hint.Args...)
	br := sb.SendBatch(ctx, b)
	rec, err = scanRecordAfter(br.QueryRow(), inserted)
	if err == nil {
		hintErr = br.QueryRow().Scan(&read)
	}
	if cerr := br.Close(); cerr != nil && hintErr == nil {
		hintErr = cerr
	}
	var refused *pgconn.PgError
	switch {
	case err != nil:
		return rec, nil, nil, err
	case errors.As(hintErr, &refused):
		*inserted = false // rolled back
		return Record{}, nil, hintErr, hintErr
	case ConnectionLost(hintErr):
		// Whether the claim committed is not known: as a claim whose
		// connection died, it is sent again.
		*inserted = false
		return Record{}, nil, nil, hintErr
	case hintErr != nil:
		return rec, nil, nil, nil
	}
	return rec, read, nil, nil
}

// Claim records an intent or finds the record of an earlier submission.
//
// One statement does the common cases, a new key and a known one alike:
// it reads the record and, only when there is none and idempotency_key
// does not know the key either, inserts a PROCESSING one. Anything else
// takes the rounds below: a key with no record that idempotency_key knows
// was purged, and its record is rebuilt from its business row (Recall),
// so that the same parameters get the first answer again and others are a
// *KeyReusedError.
//
// The unique (tenant_id, idem_key) constraint decides between concurrent
// submissions: exactly one INSERT wins. A matching FAILED record is reopened
// with a compare-and-set on its status, so that again only one caller runs
// the retry, unless its answer is final (Outcome.Final): that is answered
// as it is. A different fingerprint is a *KeyReusedError.
func (s *Store) Claim(ctx context.Context, p ClaimParams) (Claim, error) {
	ttl := s.retention.For(p.BizType).Seconds()
	var inserted bool
	var rec Record
	var err error
	// A pooled connection is not pinged before use (pgurl.IdlePing): one
	// that died while idle (a restart, a terminated backend) is found
	// here, dropped by the pool, and the claim sent again on another. The
	// claim is safe to repeat: it inserts the record once, or reads it.
	var hint json.RawMessage
	hinted := p.Hint
	for try := 0; ; try++ {
		var hintErr error
		// Each try says for itself whether it inserted: pgx scans the
		// row before the statement's end can fail (a connection ended
		// by a switchover, 57P01), so a failed try may have set it, and
		// a later try that fails before any row must not inherit it.
		inserted = false
		rec, hint, hintErr, err = s.claimOnce(ctx, p, hinted, ttl, &inserted)
		if hintErr != nil && !ConnectionLost(hintErr) && ctx.Err() == nil {
			// The hint's own failure undid the claim with it (one
			// pipeline, one implicit transaction): claim without it.
			// The step does without a hint.
			hinted = nil
			continue
		}
		if try >= maxDeadConns || !ConnectionLost(err) || ctx.Err() != nil {
			break
		}
	}
	if inserted && err == nil {
		return Claim{Record: rec, Owner: true, Hint: hint}, nil
	}
	// The statement's read is the first round's. What it did not settle
	// (a FAILED record to reopen, a purged key, an insert that lost its
	// race) takes the rounds below; a record can also vanish between two
	// statements (purge), and a reopen can lose its race: a few rounds
	// settle them all.
	for round := range 5 {
		if round > 0 {
			rec, err = s.Get(ctx, p.TenantID, p.Key)
		}
		if errors.Is(err, apperr.ErrNotFound) {
			rec, owner, err := s.create(ctx, p, ttl)
			if errors.Is(err, errRaced) {
				continue
			}
			if err != nil {
				return Claim{}, fmt.Errorf("claim %s/%s: %w", p.TenantID, p.Key, err)
			}
			if rec.Fingerprint != p.Fingerprint {
				return Claim{Record: rec}, &KeyReusedError{Key: p.Key, BizType: rec.BizType, Asked: p.BizType}
			}
			return Claim{Record: rec, Owner: owner}, nil
		}
		if err != nil {
			return Claim{}, fmt.Errorf("claim %s/%s: %w", p.TenantID, p.Key, err)
		}
		if rec.Fingerprint != p.Fingerprint {
			return Claim{Record: rec}, &KeyReusedError{Key: p.Key, BizType: rec.BizType, Asked: p.BizType}
		}
		if rec.Status != StatusFailed || rec.Response.Final() {
			return Claim{Record: rec}, nil
		}
		reopened, err := scanRecord(s.db.QueryRow(ctx, `
			UPDATE idempotency_record
			SET status = 'PROCESSING', response_status = NULL, response_body = NULL,
				resource_path = NULL, error_reason = NULL, response_content_type = NULL, attempts = attempts + 1,
				updated_at = now(), expire_at = now() + make_interval(secs => $4), origin = $5
			WHERE tenant_id = $1 AND idem_key = $2 AND fingerprint = $3 AND status = 'FAILED'
			RETURNING `+recordColumns,
			p.TenantID, p.Key, p.Fingerprint, ttl, nullable(p.Origin)))
		if err == nil {
			return Claim{Record: reopened, Owner: true}, nil
		}
		if !errors.Is(err, apperr.ErrNotFound) {
			return Claim{}, fmt.Errorf("claim %s/%s: reopen: %w", p.TenantID, p.Key, err)
		}
	}
	return Claim{}, fmt.Errorf("claim %s/%s: record kept changing under the claim", p.TenantID, p.Key)
}

// claimSQL reads the record of ($1, $2) and, when there is none and
// idempotency_key does not know the key, inserts a PROCESSING one, all in
// one statement: its first column says whether it inserted. No row: the
// key is known (its record was purged), or a concurrent insert won.
const claimSQL = `
	WITH cur AS (
		SELECT ` + recordColumns + ` FROM idempotency_record WHERE tenant_id = $1 AND idem_key = $2
	), ins AS (
		INSERT INTO idempotency_record
			(id, tenant_id, idem_key, biz_type, fingerprint, status, workflow_id, expire_at, origin)
		SELECT $3, $1, $2, $4, $5, 'PROCESSING', $6, now() + make_interval(secs => $7), $8
		WHERE NOT EXISTS (SELECT 1 FROM cur)
			AND NOT EXISTS (SELECT 1 FROM idempotency_key WHERE tenant_id = $1 AND idem_key = $2)
		ON CONFLICT (tenant_id, idem_key) DO NOTHING
		RETURNING ` + recordColumns + `
	)
	SELECT true, * FROM ins
	UNION ALL
	SELECT false, * FROM cur`

// errRaced: another request inserted the record first.
var errRaced = errors.New("record inserted concurrently")

// create inserts the record of a key that has none: rebuilt as SUCCESS from
// the business row when one exists (owner false: nothing runs), else a new
// PROCESSING record (owner true).
func (s *Store) create(ctx context.Context, p ClaimParams, ttl float64) (Record, bool, error) {
	prior, found, err := s.Recall(ctx, s.db, p.TenantID, p.Key)
	if err != nil {
		return Record{}, false, fmt.Errorf("recall: %w", err)
	}
	var rec Record
	if found {
		var location *string
		if prior.Outcome.Location != "" {
			location = &prior.Outcome.Location
		}
		rec, err = scanRecord(s.db.QueryRow(ctx, `
			INSERT INTO idempotency_record
				(id, tenant_id, idem_key, biz_type, fingerprint, status, response_status,
				 response_body, resource_path, workflow_id, expire_at, response_content_type)
			VALUES ($1, $2, $3, $4, $5, 'SUCCESS', $6, $7, $8, $9, now() + make_interval(secs => $10), $11)
			ON CONFLICT (tenant_id, idem_key) DO NOTHING
			RETURNING `+recordColumns,
			uuid.New(), p.TenantID, p.Key, prior.BizType, prior.Fingerprint, prior.Outcome.Status,
			prior.Outcome.Body, location, prior.WorkflowID, s.retention.For(prior.BizType).Seconds(),
			nullable(prior.Outcome.ContentType)))
	} else {
		rec, err = scanRecord(s.db.QueryRow(ctx, `
			INSERT INTO idempotency_record
				(id, tenant_id, idem_key, biz_type, fingerprint, status, workflow_id, expire_at, origin)
			VALUES ($1, $2, $3, $4, $5, 'PROCESSING', $6, now() + make_interval(secs => $7), $8)
			ON CONFLICT (tenant_id, idem_key) DO NOTHING
			RETURNING `+recordColumns,
			uuid.New(), p.TenantID, p.Key, p.BizType, p.Fingerprint, p.WorkflowID, ttl, nullable(p.Origin)))
	}
	if errors.Is(err, apperr.ErrNotFound) {
		return Record{}, false, errRaced
	}
	if err != nil {
		return Record{}, false, fmt.Errorf("insert: %w", err)
	}
	return rec, !found, nil
}

// Get returns the record of (tenant, key).
func (s *Store) Get(ctx context.Context, tenantID, key string) (Record, error) {
	return GetTx(ctx, s.db, tenantID, key, false)
}

// GetByID returns the record with that operation ID, only within tenantID:
// another tenant's ID reads as not found.
func (s *Store) GetByID(ctx context.Context, tenantID string, id uuid.UUID) (Record, error) {
	return scanRecord(s.db.QueryRow(ctx,
		`SELECT `+recordColumns+` FROM idempotency_record WHERE id = $1 AND tenant_id = $2`, id, tenantID))
}

// GetTx reads a record within q; with lock it takes a row lock, which
// serialises every attempt to complete the intent.
func GetTx(ctx context.Context, q Querier, tenantID, key string, lock bool) (Record, error) {
	sql := `SELECT ` + recordColumns + ` FROM idempotency_record WHERE tenant_id = $1 AND idem_key = $2`
	if lock {
		sql += ` FOR UPDATE`
	}
	return scanRecord(q.QueryRow(ctx, sql, tenantID, key))
}

// Finish moves a PROCESSING record to SUCCESS or FAILED with its answer,
// inside q so that it commits together with the business row. Its WHERE
// names the expected state: a record finished by someone else is
// ErrNotProcessing, never overwritten.
func (s *Store) Finish(ctx context.Context, q Querier, rec Record, st Status, out Outcome, reason string) error {
	args, err := s.finishArgs(rec, st, out, reason)
	if err != nil {
		return err
	}
	_, err = s.finished(rec, q.QueryRow(ctx, finishSQL, args...))
	return err
}

// QueueFinish queues Finish on b, for an execution that pipelines it with
// the rest of its commit; into receives the record as it is then.
func (s *Store) QueueFinish(b *pgx.Batch, rec Record, st Status, out Outcome, reason string, into *Record) error {
	args, err := s.finishArgs(rec, st, out, reason)
	if err != nil {
		return err
	}
	b.Queue(finishSQL, args...).QueryRow(func(row pgx.Row) error {
		r, err := s.finished(rec, row)
		*into = r
		return err
	})
	return nil
}

const finishSQL = `
	UPDATE idempotency_record
	SET status = $3, response_status = $4, response_body = $5, resource_path = $6,
		error_reason = $7, updated_at = now(),
		expire_at = now() + make_interval(secs => $8), response_content_type = $9
	WHERE tenant_id = $1 AND idem_key = $2 AND status = 'PROCESSING'
	RETURNING ` + recordColumns

func (s *Store) finishArgs(rec Record, st Status, out Outcome, reason string) ([]any, error) {
	if st != StatusSuccess && st != StatusFailed {
		return nil, fmt.Errorf("finish %s/%s: %s is not a final status", rec.TenantID, rec.Key, st)
	}
	return []any{rec.TenantID, rec.Key, st, out.Status, out.Body, nullable(out.Location), nullable(reason),
		s.retention.For(rec.BizType).Seconds(), nullable(out.ContentType)}, nil
}

// finished reads the row finishSQL returned: none means the record was
// not PROCESSING (someone else finished it first).
func (s *Store) finished(rec Record, row pgx.Row) (Record, error) {
	r, err := scanRecord(row)
	if errors.Is(err, apperr.ErrNotFound) {
		return Record{}, fmt.Errorf("finish %s/%s: %w", rec.TenantID, rec.Key, ErrNotProcessing)
	}
	if err != nil {
		return Record{}, fmt.Errorf("finish %s/%s: %w", rec.TenantID, rec.Key, err)
	}
	return r, nil
}

// QueueOpen queues on b what opens an execution's transaction, ahead of
// the step's first statement in the same pipeline: BEGIN; the lock of
// in's record, which must be open for in (PROCESSING, in's fingerprint,
// and a key idempotency_key does not know: the common case, a claim that
// just inserted it); and SAVEPOINT savepoint, after the lock, so that
// rolling back to it keeps the record locked. A record that is not open
// makes the lock fail with NotOpen's SQLSTATE: the transaction is aborted,
// so nothing queued after it takes effect, and the caller rolls it back
// and reads the record under its lock (QueueLock) to learn why.
//
// b must be empty: the BEGIN is pgx's (pgx.Batch.BeginTx), so that the
// batch's results carry the transaction.
func QueueOpen(b *pgx.Batch, in Intent, savepoint string) {
	b.BeginTx(pgx.TxOptions{})
	b.Queue(`SELECT 1 / count(*) FROM (SELECT 1 FROM idempotency_record
		WHERE tenant_id = $1 AND idem_key = $2 AND status = 'PROCESSING' AND fingerprint = $3
		AND NOT EXISTS (SELECT 1 FROM idempotency_key WHERE tenant_id = $1 AND idem_key = $2)
		FOR UPDATE) AS open`, in.TenantID, in.Key, in.Fingerprint)
	b.Queue("SAVEPOINT " + savepoint)
}

// NotOpen reports the error of QueueOpen's lock on a record that is not
// open for its intent (division_by_zero: count(*) of the open rows is 0).
func NotOpen(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "22012"
}

// Locked is an execution's first read: its record under the row lock,
// and whether idempotency_key knows its key (a business row was written
// under it, by an earlier execution or, with other parameters, another
// intent).
type Locked struct {
	// Found is false when the record is gone.
	Found    bool
	Record   Record
	KeyKnown bool
}

// QueueLock queues on b the read of (tenantID, key)'s record under its
// row lock, with whether idempotency_key knows the key, so that an
// execution learns both in the round trip that opens its transaction.
func QueueLock(b *pgx.Batch, tenantID, key string, into *Locked) {
	b.Queue(`SELECT EXISTS (SELECT 1 FROM idempotency_key k WHERE k.tenant_id = $1 AND k.idem_key = $2), `+recordColumns+`
		FROM idempotency_record WHERE tenant_id = $1 AND idem_key = $2 FOR UPDATE`, tenantID, key).
		QueryRow(func(row pgx.Row) error {
			rec, err := scanRecordAfter(row, &into.KeyKnown)
			if errors.Is(err, apperr.ErrNotFound) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("lock record %s/%s: %w", tenantID, key, err)
			}
			into.Found, into.Record = true, rec
			return nil
		})
}

// maxDeadConns bounds the claim's tries on connections found dead: a pool
// holds a few idle ones, and after a restart each of them is.
const maxDeadConns = 16

// ConnectionLost reports an error that says a pooled connection was gone
// before the statement could run: a socket closed or reset, or the
// server's operator-intervention errors (57P01 terminated by an
// administrator, 57P02 crash shutdown). A failure to open a new connection
// is not one: the server is down, and trying again at once would only
// hammer it.
func ConnectionLost(err error) bool {
	var connectErr *pgconn.ConnectError
	if err == nil || errors.As(err, &connectErr) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return strings.HasPrefix(pgErr.Code, "57P")
	}
	var netErr net.Error
	return pgconn.SafeToRetry(err) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed) ||
		(errors.As(err, &netErr) && !netErr.Timeout())
}

// notifyTimeout bounds one announcement to other processes.
const notifyTimeout = 5 * time.Second

// QueueSettled queues on b, behind the COMMIT of a transaction that
// settles (tenantID, key), its announcement to other processes' listeners
// (with NotifyChannel set, and another process listening:
// WatchListeners), so that it costs no round trip of its own.
// The caller then wakes this process's waiters (Waiters.Settled).
//
// The notification is sent after the COMMIT, in a transaction of its own,
// never inside the business transaction: PostgreSQL serialises the
// commits of notifying transactions on one global lock, which would queue
// every settling commit behind the others' WAL flush; and a listener that
// stalls with its connection open fills the notification queue, after
// which every notifying commit fails. Its own transaction commits without
// waiting for the flush (synchronous_commit off), so the lock is held
// briefly. Its failure is the batch's error although the COMMIT before it
// took effect: the caller tells them apart by the COMMIT's own result. A
// lost notification only delays a waiter in another process, which also
// watches the run in Temporal.
func (s *Store) QueueSettled(b *pgx.Batch, tenantID, key string) {
	if s.notifies() {
		b.Queue(`SELECT set_config('synchronous_commit', 'off', true), pg_notify($1, $2)`, s.NotifyChannel, s.payload(tenantID, key))
	}
}

// Settled announces a record its caller has just committed as final, for
// callers that commit without a batch: to the waiters of this process at
// once, and, with NotifyChannel set, to other processes' listeners with
// pg_notify, on its own after the commit and off the caller's path (see
// QueueSettled for why never inside the business transaction).
//
// final, when the caller has it, is the record as its transaction
// committed it: this process's waiters take it instead of reading it.
func (s *Store) Settled(tenantID, key string, final *Record) {
	s.Waiters.Settled(tenantID, key, final)
	if !s.notifies() {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), notifyTimeout)
		defer cancel()
		_, _ = s.db.Exec(ctx, `SELECT pg_notify($1, $2)`, s.NotifyChannel, s.payload(tenantID, key))
	}()
}

// Intent identifies one idempotent operation everywhere past the gateway:
// in workflow inputs, activities and reconcile.
type Intent struct {
	TenantID    string `json:"tenant_id"`
	Key         string `json:"idempotency_key"`
	BizType     string `json:"biz_type"`
	Fingerprint string `json:"fingerprint"`
	WorkflowID  string `json:"workflow_id"`
	// Attempt is the record's attempts count when this execution was
	// started (1 or more). Settling checks it under the record's lock, so
	// that a late settle of an earlier attempt never fails a reopened one.
	Attempt int `json:"attempt,omitempty"`
}

// Intent returns the record's intent.
func (r Record) Intent() Intent {
	return Intent{TenantID: r.TenantID, Key: r.Key, BizType: r.BizType, Fingerprint: r.Fingerprint, WorkflowID: r.WorkflowID, Attempt: r.Attempts}
}

// Guard names a unique constraint the exactly-once guarantee rests on: at
// most one row of Table per (tenant_id, idem_key).
type Guard struct {
	Table string
}

// RecordGuard is idempotency_record's own guard.
var RecordGuard = Guard{Table: "idempotency_record"}

// ResolveAction says what Resolve did.
type ResolveAction string

// What Resolve can do.
const (
	// ResolvedNone: the record was already final, is another request's
	// (purged and claimed again), belongs to a later attempt, or is gone.
	ResolvedNone ResolveAction = "none"
	// ResolvedBackfilled: the business row exists; SUCCESS was written.
	ResolvedBackfilled ResolveAction = "backfilled"
	// ResolvedFailed: no business row; FAILED was written.
	ResolvedFailed ResolveAction = "failed"
)

// Resolution is what Resolve decided.
type Resolution struct {
	Status  Status        `json:"status"`
	Outcome Outcome       `json:"outcome"`
	Action  ResolveAction `json:"action"`
}

// ResolveParams name a PROCESSING intent to settle and the answers to store.
type ResolveParams struct {
	Intent Intent
	// Preferred, when set, is stored instead of the answer rebuilt from the
	// business row (it is the exact answer a completed run returned); it is
	// used only when the row exists.
	Preferred *Outcome
	// Failed is stored when no business row exists, with Reason.
	Failed Outcome
	Reason string
	// Before, if set, runs in the settling transaction once the record is
	// known to be this attempt's and PROCESSING, before the business row
	// is recalled: where the effect lives outside idemflow's database (an
	// HTTP tool's), what the caller learned of it is written here, under
	// the same lock and in the same commit as the record.
	Before func(ctx context.Context, tx pgx.Tx) error
}

// Resolve settles a PROCESSING record whose execution no longer runs:
// SUCCESS with the business row's answer when the row exists, FAILED with
// p.Failed when it does not. It never writes a business row, and it works
// under the record's row lock, which every execution holds while it writes,
// so it cannot interleave with one. The caller must know that no execution
// of this attempt is still running: a run that gave up or was stopped, or
// reconcile after asking Temporal.
func (s *Store) Resolve(ctx context.Context, p ResolveParams) (Resolution, error) {
	var res Resolution
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		rec, err := GetTx(ctx, tx, p.Intent.TenantID, p.Intent.Key, true)
		if errors.Is(err, apperr.ErrNotFound) {
			res = Resolution{Action: ResolvedNone}
			return nil
		}
		if err != nil {
			return fmt.Errorf("lock record: %w", err)
		}
		if rec.Status != StatusProcessing || rec.Fingerprint != p.Intent.Fingerprint || rec.Attempts != p.Intent.Attempt {
			res = Resolution{Status: rec.Status, Outcome: rec.Response, Action: ResolvedNone}
			return nil
		}
		if p.Before != nil {
			if err := p.Before(ctx, tx); err != nil {
				return err
			}
		}
		prior, found, err := s.Recall(ctx, tx, rec.TenantID, rec.Key)
		if err != nil {
			return err
		}
		reason := p.Reason
		switch {
		case found && prior.Fingerprint == rec.Fingerprint:
			res = Resolution{Status: StatusSuccess, Action: ResolvedBackfilled, Outcome: prior.Outcome}
			if p.Preferred != nil {
				res.Outcome = *p.Preferred
			}
			reason = ""
		case found:
			// Only data from before Claim recalled rows can get here: a
			// row under this key with other parameters. This intent must
			// never run.
			res = Resolution{Status: StatusFailed, Action: ResolvedFailed, Outcome: p.Failed}
			reason = "a business row under this key has other parameters"
		default:
			res = Resolution{Status: StatusFailed, Action: ResolvedFailed, Outcome: p.Failed}
		}
		return s.Finish(ctx, tx, rec, res.Status, res.Outcome, reason)
	})
	if err != nil {
		return Resolution{}, fmt.Errorf("resolve %s/%s: %w", p.Intent.TenantID, p.Intent.Key, err)
	}
	if res.Action != ResolvedNone {
		s.Settled(p.Intent.TenantID, p.Intent.Key, nil)
	}
	return res, nil
}

// nullable is v, or SQL NULL for its zero value ("", uuid.Nil).
func nullable[T comparable](v T) *T {
	var zero T
	if v == zero {
		return nil
	}
	return &v
}
