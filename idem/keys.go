package idem

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// KeyGuard is the constraint of idempotency_key: one row per (tenant, key)
// that wrote its business effect.
var KeyGuard = Guard{Table: "idempotency_key"}

// RememberKey records, within q (the business step's transaction), that
// in's key wrote its effect. The row outlives the idempotency record, so a
// purged key is still recalled (KeyRecall) with one lookup, and still
// refused for another operation.
func RememberKey(ctx context.Context, q Querier, in Intent) error {
	if _, err := q.Exec(ctx, rememberSQL, in.TenantID, in.Key, in.BizType, in.Fingerprint); err != nil {
		return fmt.Errorf("remember key %s/%s: %w", in.TenantID, in.Key, err)
	}
	return nil
}

// QueueRememberKey queues RememberKey on b, a batch in the step's
// transaction.
func QueueRememberKey(b *pgx.Batch, in Intent) {
	b.Queue(rememberSQL, in.TenantID, in.Key, in.BizType, in.Fingerprint)
}

const rememberSQL = `INSERT INTO idempotency_key (tenant_id, idem_key, biz_type, fingerprint)
	VALUES ($1, $2, $3, $4) ON CONFLICT (tenant_id, idem_key) DO NOTHING`

// KeyRecall is a Recall over every business type at the cost of one: it
// looks the key up in idempotency_key, and only for a key found there asks
// the Recall of the business type that wrote it (of) for the row and its
// answer. A key never used costs one statement, however many types exist.
// A row that keeps no fingerprint of its own (a declared operation's) gets
// the key row's, written in the same transaction as the row.
func KeyRecall(of func(bizType string) Recall) Recall {
	return func(ctx context.Context, q Querier, tenantID, key string) (Prior, bool, error) {
		var bizType, fingerprint string
		err := q.QueryRow(ctx, `SELECT biz_type, fingerprint FROM idempotency_key WHERE tenant_id = $1 AND idem_key = $2`,
			tenantID, key).Scan(&bizType, &fingerprint)
		if errors.Is(err, pgx.ErrNoRows) {
			return Prior{}, false, nil
		}
		if err != nil {
			return Prior{}, false, fmt.Errorf("recall key %s/%s: %w", tenantID, key, err)
		}
		recall := of(bizType)
		if recall == nil {
			return Prior{}, false, fmt.Errorf("recall key %s/%s: written by %s, which no business type declares", tenantID, key, bizType)
		}
		p, found, err := recall(ctx, q, tenantID, key)
		if err != nil {
			return Prior{}, false, err
		}
		if !found {
			return Prior{}, false, fmt.Errorf("recall key %s/%s: written by %s, and its row is gone", tenantID, key, bizType)
		}
		if p.Fingerprint == "" {
			p.Fingerprint = fingerprint
		}
		return p, true, nil
	}
}
