package httptool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/op"
	"github.com/jackc/pgx/v5"
)

// Table is the tools' table: one row per (tenant, key) whose call may
// have been sent (migrations/005_tool_call.sql). Only this package writes
// it; audit checks its UNIQUE (tenant_id, idem_key).
const Table = "tool_call"

// State is a tool_call row's state.
type State string

// The states.
const (
	// Sending: a request may have reached the downstream; its outcome
	// is not known.
	Sending State = "sending"
	// Done: the downstream's answer is stored.
	Done State = "done"
	// OutcomeUnknown: the call's outcome stayed unknown, and it may not
	// be sent again (an at_most_once call, or a resend the downstream
	// refused); final.
	OutcomeUnknown State = "unknown"
)

// Call is a key's tool_call row.
type Call struct {
	BizType     string
	Fingerprint string
	State       State
	Sends       int
	// SinceSent and SinceFirstSent are how long ago the last and the
	// first request were sent, by the database's clock (every send is
	// stamped by it).
	SinceSent, SinceFirstSent time.Duration
	Answer                    idem.Outcome
}

// Get reads the call of (tenantID, key) within q; found is false when no
// request was ever sent under the key.
func Get(ctx context.Context, q idem.Querier, tenantID, key string) (c Call, found bool, err error) {
	var status *int32
	var contentType *string
	var since, sinceFirst float64
	err = q.QueryRow(ctx, `
		SELECT biz_type, fingerprint, state, sends, extract(epoch FROM now() - last_sent_at)::float8,
			extract(epoch FROM now() - first_sent_at)::float8, response_status, response_body, response_content_type
		FROM tool_call WHERE tenant_id = $1 AND idem_key = $2`, tenantID, key).
		Scan(&c.BizType, &c.Fingerprint, &c.State, &c.Sends, &since, &sinceFirst, &status, &c.Answer.Body, &contentType)
	if errors.Is(err, pgx.ErrNoRows) {
		return Call{}, false, nil
	}
	if err != nil {
		return Call{}, false, fmt.Errorf("read tool call %s/%s: %w", tenantID, key, err)
	}
	c.SinceSent = time.Duration(since * float64(time.Second))
	c.SinceFirstSent = time.Duration(sinceFirst * float64(time.Second))
	if status != nil {
		c.Answer.Status = int(*status)
	}
	if contentType != nil {
		c.Answer.ContentType = *contentType
	}
	return c, true, nil
}

// ErrSentMeanwhile: another execution sent the call since this one read
// its row.
var ErrSentMeanwhile = errors.New("the call was sent again by another execution meanwhile")

// MarkSending records, within q, that a request of in is about to be
// sent: the row is committed before the request leaves, so that whatever
// runs next knows the downstream may have the effect. sends is the count
// of requests the caller read (0 for none): a row that has moved on since
// is ErrSentMeanwhile, so that two executions that both looked the key up
// and found nothing cannot both send.
func MarkSending(ctx context.Context, q idem.Querier, in idem.Intent, sends int) error {
	sql := `INSERT INTO tool_call (tenant_id, idem_key, biz_type, fingerprint, state)
		VALUES ($1, $2, $3, $4, 'sending') ON CONFLICT (tenant_id, idem_key) DO NOTHING`
	args := []any{in.TenantID, in.Key, in.BizType, in.Fingerprint}
	if sends > 0 {
		sql = `UPDATE tool_call SET sends = sends + 1, last_sent_at = now()
			WHERE tenant_id = $1 AND idem_key = $2 AND biz_type = $3 AND fingerprint = $4
				AND state = 'sending' AND sends = $5`
		args = append(args, sends)
	}
	tag, err := q.Exec(ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("mark tool call %s/%s sending: %w", in.TenantID, in.Key, err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("mark tool call %s/%s sending: %w", in.TenantID, in.Key, ErrSentMeanwhile)
	}
	return nil
}

// Settle stores, within q, the final answer of in's call: Done with the
// downstream's answer, or OutcomeUnknown with idemflow's.
func Settle(ctx context.Context, q idem.Querier, in idem.Intent, st State, out idem.Outcome) error {
	var contentType *string
	if out.ContentType != "" {
		contentType = &out.ContentType
	}
	tag, err := q.Exec(ctx, `
		INSERT INTO tool_call (tenant_id, idem_key, biz_type, fingerprint, state, response_status, response_body,
			response_content_type, settled_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, now())
		ON CONFLICT (tenant_id, idem_key) DO UPDATE SET state = excluded.state,
			response_status = excluded.response_status, response_body = excluded.response_body,
			response_content_type = excluded.response_content_type, settled_at = now()
		WHERE tool_call.state = 'sending' AND tool_call.fingerprint = excluded.fingerprint`,
		in.TenantID, in.Key, in.BizType, in.Fingerprint, st, out.Status, out.Body, contentType)
	if err != nil {
		return fmt.Errorf("settle tool call %s/%s: %w", in.TenantID, in.Key, err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("settle tool call %s/%s: it is already settled, or another request's", in.TenantID, in.Key)
	}
	return nil
}

// Forget deletes, within q, the row of a call the downstream rejected:
// nothing happened, so a retry sends afresh.
func Forget(ctx context.Context, q idem.Querier, in idem.Intent) error {
	if _, err := q.Exec(ctx, `DELETE FROM tool_call WHERE tenant_id = $1 AND idem_key = $2 AND state = 'sending' AND fingerprint = $3`,
		in.TenantID, in.Key, in.Fingerprint); err != nil {
		return fmt.Errorf("forget tool call %s/%s: %w", in.TenantID, in.Key, err)
	}
	return nil
}

// recall is every tool's op.JSONSpec.Lookup: a done call's answer.
func recall(ctx context.Context, q op.Querier, tenantID, key string) (op.Answer, bool, error) {
	c, found, err := Get(ctx, q, tenantID, key)
	if err != nil || !found || c.State != Done {
		return op.Answer{}, false, err
	}
	return op.Answer{Status: c.Answer.Status, Body: append(json.RawMessage{}, c.Answer.Body...), ContentType: c.Answer.ContentType}, true, nil
}
