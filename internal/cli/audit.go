package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/idemflow/idemflow/internal/audit"
)

func runAudit(ctx context.Context, env *Env, args []string) error {
	fs := flags("audit", env)
	dbURL := fs.String("database-url", "", "PostgreSQL URL; default: a running dev stack's (env DATABASE_URL)")
	horizon := fs.Duration("processing-timeout", 5*time.Minute, "PROCESSING older than this is reported as stuck (env IDEMFLOW_PROCESSING_TIMEOUT)")
	dataDirFlag(fs)
	if err := parseDevFlags(fs, args); err != nil {
		return err
	}
	if *dbURL == "" {
		return fmt.Errorf("%w: DATABASE_URL (or --database-url, or a running 'idemflow dev') is required", errUsage)
	}
	conn, err := connect(ctx, *dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	rep, err := audit.Run(ctx, conn, idemStore(conn), env.Set.Guards(), *horizon)
	if err != nil {
		return err
	}
	w := env.Stdout
	for _, g := range rep.Checked {
		state := "ok"
		for _, m := range rep.MissingConstraint {
			if m == g {
				state = "MISSING: no unique index on (tenant_id, idem_key); duplicates are possible"
			}
		}
		fmt.Fprintf(w, "constraint %-20s %s\n", g.Table, state)
	}
	fmt.Fprintf(w, "duplicates             %d\n", len(rep.Duplicates))
	for _, d := range rep.Duplicates {
		fmt.Fprintf(w, "  %s: tenant %s key %q has %d rows\n", d.Table, d.TenantID, d.Key, d.Rows)
	}
	fmt.Fprintf(w, "stuck PROCESSING > %v  %d\n", rep.Horizon, len(rep.Stale))
	for _, r := range rep.Stale {
		fmt.Fprintf(w, "  %s (tenant %s, key %q, since %s)\n", r.WorkflowID, r.TenantID, r.Key, r.UpdatedAt.Format(time.RFC3339))
	}
	fmt.Fprintf(w, "failover               %s\n", rep.Replication.Summary())
	if warning := rep.Replication.Warning(); warning != "" {
		fmt.Fprintf(w, "  WARNING: %s\n", warning)
	}
	if blocked := rep.Replication.Blocked(); blocked != "" {
		fmt.Fprintf(w, "  ERROR: %s\n", blocked)
	}
	if rep.Healthy() {
		fmt.Fprintln(w, "healthy")
		return nil
	}
	fmt.Fprintln(w, "UNHEALTHY")
	return exitCodeError{code: 3, err: fmt.Errorf("audit found problems")}
}
