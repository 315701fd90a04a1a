package schemathesis

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemflow/idemflow/internal/tooling/testenv"
	"github.com/jackc/pgx/v5/pgxpool"
)

// scripts/schemathesis.sh runs the hooks against any deployment, whose
// declared operations are its own: the nothing-recorded check finds the
// keyed tables there, and never asks for one the deployment lacks (the
// example's refund_request, which made every exchange error with
// UndefinedTable). A table a team adds is found too.
func TestTheHooksFindTheDeploymentsKeyedTables(t *testing.T) {
	py, err := filepath.Abs(filepath.Join(".venv", "bin", "python"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(py); err != nil {
		t.Fatal("Schemathesis is not installed: run scripts/test.sh, or (. scripts/lib.sh; build_schemathesis)")
	}
	u := testenv.Database(t) // idemflow's tables, no declared operation
	rows := func() string {
		t.Helper()
		cmd := exec.Command(py, "-c", `import sys, psycopg, hooks
with psycopg.connect(sys.argv[1]) as conn:
    hooks._keyed_tables = None
    print(" ".join(hooks.keyed_tables(conn)), "|", hooks.rows_under(conn, "k-1"))`, u)
		cmd.Env = append(os.Environ(), "IDEMFLOW_URL=http://127.0.0.1:1", "PYTHONPATH=.")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("the hooks against a deployment without the example: %v\n%s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	got := rows()
	t.Logf("idemflow's own tables: %s", got)
	for _, want := range []string{"public.idempotency_record", "public.idempotency_key", "public.ticket", "public.purchase_order", "public.order_event", "public.tool_call"} {
		if !strings.Contains(got, want) {
			t.Errorf("the keyed tables miss %s: %s", want, got)
		}
	}
	pool := testenv.PoolOn(t, u, func(*pgxpool.Config) {})
	if _, err := pool.Exec(context.Background(), `CREATE TABLE payout (tenant_id text NOT NULL, idem_key text NOT NULL, UNIQUE (tenant_id, idem_key));
		INSERT INTO payout VALUES ('t-a', 'k-1')`); err != nil {
		t.Fatal(err)
	}
	got = rows()
	t.Logf("with a team's table: %s", got)
	if !strings.Contains(got, "public.payout") || !strings.Contains(got, "{'public.payout': 1}") {
		t.Fatalf("a team's keyed table, and its row under k-1, not found: %s", got)
	}
}

// The changed-body check changes a string its schema constrains with a
// pattern too, where the pattern allows the change: every string of the
// built-ins has one (no NUL), and against a deployment without the
// example's operation the check never judged an exchange, which
// IdemflowChecksRan then failed.
func TestTheChangedBodyCheckChangesAPatternedString(t *testing.T) {
	py, err := filepath.Abs(filepath.Join(".venv", "bin", "python"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, "-c", `import hooks
print(hooks._change("c-1", {"type": "string", "maxLength": 128, "pattern": "^[^\\x00]*$"}))
print(hooks._change("c-1", {"type": "string", "pattern": "^c-1$"}))
print(hooks._change("FIVEOFF", {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"}))`)
	cmd.Env = append(os.Environ(), "IDEMFLOW_URL=http://127.0.0.1:1", "PYTHONPATH=.")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got, want := strings.Fields(string(out)), []string{"c-x", "None", "FIVEOFx"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("changed values %q, want %q", got, want)
	}
}
