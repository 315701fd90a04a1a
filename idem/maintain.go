package idem

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Stale returns up to limit PROCESSING records not touched for longer than
// horizon, oldest first.
func (s *Store) Stale(ctx context.Context, horizon time.Duration, limit int) ([]Record, error) {
	rows, err := s.db.Query(ctx, `
		SELECT `+recordColumns+` FROM idempotency_record
		WHERE status = 'PROCESSING' AND updated_at < now() - make_interval(secs => $1)
		ORDER BY updated_at LIMIT $2`, horizon.Seconds(), limit)
	if err != nil {
		return nil, fmt.Errorf("stale records: %w", err)
	}
	recs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Record, error) { return scanRecord(row) })
	if err != nil {
		return nil, fmt.Errorf("stale records: %w", err)
	}
	return recs, nil
}

// PurgeBatch deletes up to limit expired records and returns how many it
// deleted. It never deletes a PROCESSING record, nor one finished more
// recently than its business type's retention (even if its expire_at says
// otherwise, say after the retention was raised). SKIP LOCKED lets two
// purges, or a purge and a completing activity, pass each other.
func (s *Store) PurgeBatch(ctx context.Context, limit int) (int64, error) {
	types := make([]string, 0, len(s.retention.ByBizType))
	secs := make([]float64, 0, len(s.retention.ByBizType))
	for t, d := range s.retention.ByBizType {
		types = append(types, t)
		secs = append(secs, d.Seconds())
	}
	tag, err := s.db.Exec(ctx, `
		WITH r(biz_type, secs) AS (SELECT * FROM unnest($1::text[], $2::float8[]))
		DELETE FROM idempotency_record WHERE id IN (
			SELECT i.id FROM idempotency_record i LEFT JOIN r ON r.biz_type = i.biz_type
			WHERE i.status <> 'PROCESSING' AND i.expire_at < now()
			  AND i.updated_at < now() - make_interval(secs => COALESCE(r.secs, $3))
			ORDER BY i.expire_at
			LIMIT $4
			FOR UPDATE OF i SKIP LOCKED)`,
		types, secs, s.retention.For("").Seconds(), limit)
	if err != nil {
		return 0, fmt.Errorf("purge: %w", err)
	}
	return tag.RowsAffected(), nil
}

// Processing counts PROCESSING records of all tenants and the age of the
// oldest (0 when none): the operator's gauge of whether reconcile keeps up.
// It reads the partial index reconcile uses.
func (s *Store) Processing(ctx context.Context) (int, time.Duration, error) {
	var n int
	var age float64
	if err := s.db.QueryRow(ctx, `SELECT count(*), coalesce(extract(epoch FROM now() - min(updated_at)), 0)::float8
		FROM idempotency_record WHERE status = 'PROCESSING'`).Scan(&n, &age); err != nil {
		return 0, 0, fmt.Errorf("count PROCESSING records: %w", err)
	}
	return n, time.Duration(age * float64(time.Second)), nil
}
