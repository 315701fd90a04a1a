// Package audit checks, read-only, that the guarantee still holds in a
// database: the unique constraints are in place, no (tenant, key) has two
// business rows, and no intent is stuck in PROCESSING. It also reports
// whether an acknowledged commit would survive a failover to a standby,
// which warns but is no failure: the guarantee's data is intact now.
package audit

import (
	"context"
	"fmt"
	"time"

	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/internal/replication"
	"github.com/jackc/pgx/v5"
)

// Duplicate is a (tenant, key) with more than one row: the guarantee broke.
type Duplicate struct {
	Table    string
	TenantID string
	Key      string
	Rows     int
}

// Report is what an audit found.
type Report struct {
	Checked           []idem.Guard
	MissingConstraint []idem.Guard
	Duplicates        []Duplicate
	Stale             []idem.Record
	Horizon           time.Duration
	// Replication is the database's standbys and commit settings.
	Replication replication.Report
}

// Healthy is true when nothing was found.
func (r Report) Healthy() bool {
	return len(r.MissingConstraint) == 0 && len(r.Duplicates) == 0 && len(r.Stale) == 0 && r.Replication.Blocked() == ""
}

// MissingConstraintError: tables whose (tenant_id, idem_key) has no unique
// index, so that a duplicate could be written. Every role refuses to start
// on one (RequireConstraints), as audit reports it.
type MissingConstraintError struct {
	Tables []string
}

func (e *MissingConstraintError) Error() string {
	return fmt.Sprintf("table(s) %v have no unique index on (tenant_id, idem_key): duplicates are possible, so nothing starts; "+
		"add UNIQUE (tenant_id, idem_key) to the table's migration (docs/your-operation.md)", e.Tables)
}

// RequireConstraints returns a *MissingConstraintError naming every guard
// whose table lacks its unique index on (tenant_id, idem_key): the
// constraint is the last line of invariant 1, so an operation whose table
// lacks it is not served.
func RequireConstraints(ctx context.Context, db idem.Querier, guards []idem.Guard) error {
	missing, err := missingConstraints(ctx, db, guards)
	if err != nil || len(missing) == 0 {
		return err
	}
	e := &MissingConstraintError{}
	for _, g := range missing {
		e.Tables = append(e.Tables, g.Table)
	}
	return e
}

// missingConstraints are the guards whose table has no unique index on
// (tenant_id, idem_key): what audit reports and every role refuses.
func missingConstraints(ctx context.Context, db idem.Querier, guards []idem.Guard) ([]idem.Guard, error) {
	var missing []idem.Guard
	for _, g := range guards {
		ok, err := hasUniqueIndex(ctx, db, g.Table)
		if err != nil {
			return nil, err
		}
		if !ok {
			missing = append(missing, g)
		}
	}
	return missing, nil
}

// Run audits db. guards are the tables whose (tenant_id, idem_key) must be
// unique; horizon is the reconcile horizon (processing timeout).
func Run(ctx context.Context, db idem.Querier, records *idem.Store, guards []idem.Guard, horizon time.Duration) (Report, error) {
	rep := Report{Checked: guards, Horizon: horizon}
	var err error
	if rep.MissingConstraint, err = missingConstraints(ctx, db, guards); err != nil {
		return rep, err
	}
	for _, g := range guards {
		dups, err := duplicates(ctx, db, g.Table)
		if err != nil {
			return rep, err
		}
		rep.Duplicates = append(rep.Duplicates, dups...)
	}
	stale, err := records.Stale(ctx, horizon, 100)
	if err != nil {
		return rep, err
	}
	rep.Stale = stale
	if rep.Replication, err = replication.Check(ctx, db); err != nil {
		return rep, err
	}
	return rep, nil
}

// hasUniqueIndex looks for a valid unique index on exactly
// (tenant_id, idem_key), whatever it is named: a dropped unique index is
// one way duplicates get in, since the constraint is the last line.
func hasUniqueIndex(ctx context.Context, db idem.Querier, table string) (bool, error) {
	var ok bool
	err := db.QueryRow(ctx, `
		SELECT EXISTS (
			SELECT 1 FROM pg_index i
			JOIN pg_class c ON c.oid = i.indrelid
			JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = current_schema()
			WHERE c.relname = $1 AND i.indisunique AND i.indisvalid AND i.indpred IS NULL
			  AND (SELECT array_agg(a.attname::text ORDER BY a.attname)
			       FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum = ANY (i.indkey))
			      = ARRAY['idem_key', 'tenant_id'])`, table).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("audit %s constraint: %w", table, err)
	}
	return ok, nil
}

func duplicates(ctx context.Context, db idem.Querier, table string) ([]Duplicate, error) {
	rows, err := db.Query(ctx, `SELECT tenant_id, idem_key, count(*) FROM `+pgx.Identifier{table}.Sanitize()+`
		GROUP BY tenant_id, idem_key HAVING count(*) > 1 ORDER BY count(*) DESC LIMIT 20`)
	if err != nil {
		return nil, fmt.Errorf("audit %s duplicates: %w", table, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Duplicate, error) {
		d := Duplicate{Table: table}
		return d, row.Scan(&d.TenantID, &d.Key, &d.Rows)
	})
	if err != nil {
		return nil, fmt.Errorf("audit %s duplicates: %w", table, err)
	}
	return out, nil
}
