package cli_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemflow/idemflow/internal/cli"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
	"go.temporal.io/server/temporaltest"
)

func run(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := cli.Run(context.Background(), args, &out, &errOut)
	return code, out.String() + errOut.String()
}

func TestAuditIsHealthyThenCatchesAPlantedDuplicate(t *testing.T) {
	pool, dbURL := testenv.Pool(t)
	ctx := context.Background()
	if code, out := run(t, "audit", "--database-url", dbURL); code != 0 || !strings.Contains(out, "healthy") {
		t.Fatalf("healthy database: exit %d\n%s", code, out)
	}
	// Plant what the guarantee forbids: it takes dropping the constraint.
	for _, sql := range []string{
		`INSERT INTO tenant (id, name) VALUES ('acme', 'acme')`,
		`ALTER TABLE ticket DROP CONSTRAINT ticket_tenant_idem_key_uq`,
		`INSERT INTO ticket (id, tenant_id, idem_key, fingerprint, workflow_id, customer_id, title, description, priority, created_at)
		 SELECT gen_random_uuid(), 'acme', 'k-dup', 'fp', 'w', 'c', 't', '', 'normal', now() FROM generate_series(1, 2)`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	code, out := run(t, "audit", "--database-url", dbURL)
	if code != 3 {
		t.Fatalf("exit %d, want 3\n%s", code, out)
	}
	for _, want := range []string{"ticket               MISSING", `tenant acme key "k-dup" has 2 rows`, "UNHEALTHY"} {
		if !strings.Contains(out, want) {
			t.Fatalf("audit output lacks %q:\n%s", want, out)
		}
	}
}

func TestAuditReportsStuckIntents(t *testing.T) {
	pool, dbURL := testenv.Pool(t)
	ctx := context.Background()
	for _, sql := range []string{
		`INSERT INTO tenant (id, name) VALUES ('acme', 'acme')`,
		`INSERT INTO idempotency_record (id, tenant_id, idem_key, biz_type, fingerprint, status, workflow_id, updated_at, expire_at)
		 VALUES (gen_random_uuid(), 'acme', 'stuck', 'ticket.create', 'fp', 'PROCESSING', 'ticket/acme/stuck', now() - interval '1 hour', now() + interval '7 days')`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	code, out := run(t, "audit", "--database-url", dbURL, "--processing-timeout", "5m")
	if code != 3 || !strings.Contains(out, "ticket/acme/stuck") {
		t.Fatalf("exit %d\n%s", code, out)
	}
}

func TestUsageErrorsExit2(t *testing.T) {
	if code, _ := run(t, "no-such-command"); code != 2 {
		t.Fatalf("unknown command: exit %d", code)
	}
	if code, out := run(t, "audit", "--database-url", ""); code != 2 {
		t.Fatalf("missing database: exit %d\n%s", code, out)
	}
	// --duration budgets the whole run; one that cannot hold the checks
	// after the reconcile horizon is refused before anything starts (a
	// 10 s budget once ran for 1m03s).
	if code, out := run(t, "chaos", "--duration", "10s"); code != 2 || !strings.Contains(out, "give at least") {
		t.Errorf("chaos --duration 10s: exit %d\n%s", code, out)
	}
	// The profiler has no authentication: loopback only, refused before
	// anything connects.
	for _, cmd := range []string{"serve", "gateway", "dev"} {
		if code, out := run(t, cmd, "--pprof-addr", "0.0.0.0:6060"); code != 2 || !strings.Contains(out, "loopback only") {
			t.Errorf("%s --pprof-addr 0.0.0.0:6060: exit %d\n%s", cmd, code, out)
		}
	}
}

// A setting given through the environment is checked as strictly as a
// flag, before anything connects, and its value is never echoed.
func TestInvalidEnvironmentIsAStartUpErrorThatNeverEchoesTheValue(t *testing.T) {
	for _, tc := range []struct {
		cmd, env, value string
	}{
		{"worker", "IDEMFLOW_RECORD_RETENTION", "a-week"},
		{"worker", "IDEMFLOW_PROCESSING_TIMEOUT", "soon"},
		{"gateway", "IDEMFLOW_BOOTSTRAP_TOKENS", ","},
		{"gateway", "IDEMFLOW_BOOTSTRAP_TOKENS", "acme:"},
		{"gateway", "IDEMFLOW_BOOTSTRAP_TOKENS", "acme-tok-s3cret"},
		{"gateway", "IDEMFLOW_BOOTSTRAP_TOKENS", "Not A Tenant:tok-s3cret"},
		{"gateway", "IDEMFLOW_BOOTSTRAP_TOKENS", "acme:short-s3cret"},
		{"dev", "IDEMFLOW_BOOTSTRAP_TOKENS", ",,"},
	} {
		t.Run(tc.env+"="+tc.value, func(t *testing.T) {
			t.Setenv(tc.env, tc.value)
			// No database or Temporal is given: the error must come first.
			code, out := run(t, tc.cmd, "--database-url", "postgres://nobody@127.0.0.1:1/none")
			if code != 2 || !strings.Contains(out, tc.env) {
				t.Fatalf("exit %d, want 2 naming %s:\n%s", code, tc.env, out)
			}
			if strings.Contains(out, "s3cret") {
				t.Fatalf("the error echoes the value:\n%s", out)
			}
		})
	}
}

// Every schedule command reads its settings as every other command does:
// flags, then the variables their help names (a regression had describe,
// trigger, pause and unpause dial 127.0.0.1:7233 whatever TEMPORAL_ADDRESS
// said). Each lists only the flags that apply to it, and help exits 0.
func TestEveryScheduleCommandReadsItsEnvironment(t *testing.T) {
	ts := temporaltest.NewServer(temporaltest.WithT(t))
	t.Setenv("TEMPORAL_ADDRESS", ts.GetFrontendHostPort())
	t.Setenv("TEMPORAL_NAMESPACE", ts.GetDefaultNamespace())
	t.Setenv("IDEMFLOW_RECONCILE_INTERVAL", "7m")
	for _, verb := range []string{"apply", "describe", "pause", "unpause", "trigger", "describe"} {
		code, out := run(t, "schedule", verb)
		if code != 0 {
			t.Fatalf("schedule %s: exit %d\n%s", verb, code, out)
		}
		if verb == "describe" && !strings.Contains(out, `"7m0s"`) {
			t.Errorf("schedule describe does not show the interval apply read from IDEMFLOW_RECONCILE_INTERVAL:\n%s", out)
		}
	}
	for _, args := range [][]string{{"schedule", "-h"}, {"schedule", "help"}, {"schedule", "describe", "-h"}, {"schedule", "apply", "-h"}} {
		code, out := run(t, args...)
		if code != 0 {
			t.Errorf("%v: exit %d\n%s", args, code, out)
		}
		applies := args[1] == "apply"
		if args[1] == "describe" && (strings.Contains(out, "-purge-") || strings.Contains(out, "-record-retention")) {
			t.Errorf("schedule describe -h lists apply's flags:\n%s", out)
		}
		if applies && !strings.Contains(out, "-purge-batch") {
			t.Errorf("schedule apply -h lacks its flags:\n%s", out)
		}
	}
	if code, out := run(t, "schedule", "frobnicate"); code != 2 || !strings.Contains(out, "unknown schedule command") {
		t.Errorf("unknown schedule command: exit %d\n%s", code, out)
	}
}

// Help is an answer, not a usage error: it exits 0 and goes to stdout.
// version names the build.
func TestHelpExitsZeroAndVersionNamesTheBuild(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"help"}, {"-h"}} {
		var out, errOut bytes.Buffer
		if code := cli.Run(context.Background(), args, &out, &errOut); code != 0 || !strings.Contains(out.String(), "commands:") {
			t.Errorf("%v: exit %d\n%s%s", args, code, out.String(), errOut.String())
		}
	}
	if code, _ := run(t); code != 2 {
		t.Errorf("no command: exit %d, want 2", code)
	}
	for _, args := range [][]string{{"version"}, {"--version"}} {
		if code, out := run(t, args...); code != 0 || !strings.HasPrefix(out, "idemflow ") {
			t.Errorf("%v: exit %d %q", args, code, out)
		}
	}
}

// token, audit and migrate find a running dev stack the way inspect, mcp,
// demo and bench do: through the dev.env in the data directory, when
// neither a flag nor a variable says otherwise. A flag still wins.
func TestOperatorCommandsFindADevStackThroughDevEnv(t *testing.T) {
	_, dbURL := testenv.Pool(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "dev.env"), []byte("DATABASE_URL="+dbURL+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DATABASE_URL", "")
	t.Setenv("IDEMFLOW_DATA_DIR", dir)
	if code, out := run(t, "migrate"); code != 0 || !strings.Contains(out, "schema at version") {
		t.Fatalf("migrate: exit %d\n%s", code, out)
	}
	if code, out := run(t, "token", "--tenant", "beta"); code != 0 || !strings.HasPrefix(out, "idf_") {
		t.Fatalf("token --tenant beta: exit %d\n%s", code, out)
	}
	if code, out := run(t, "audit"); code != 0 || !strings.Contains(out, "healthy") {
		t.Fatalf("audit: exit %d\n%s", code, out)
	}
	if code, out := run(t, "audit", "--database-url", "postgres://nobody@127.0.0.1:1/none?connect_timeout=1"); code != 1 {
		t.Fatalf("an explicit --database-url must win over dev.env: exit %d\n%s", code, out)
	}
	t.Setenv("IDEMFLOW_DATA_DIR", t.TempDir()) // no dev stack there
	if code, out := run(t, "token", "--tenant", "beta"); code != 2 || !strings.Contains(out, "idemflow dev") {
		t.Fatalf("without a dev stack: exit %d\n%s", code, out)
	}
}

// A Temporal CLI profile alone (TEMPORAL_CONFIG_FILE, TEMPORAL_PROFILE)
// points idemflow's commands at the server and namespace it names.
func TestAScheduleCommandReachesTemporalThroughATemporalCLIProfile(t *testing.T) {
	ts := temporaltest.NewServer(temporaltest.WithT(t))
	file := filepath.Join(t.TempDir(), "temporal.toml")
	toml := "[profile.test]\naddress = \"" + ts.GetFrontendHostPort() + "\"\nnamespace = \"" + ts.GetDefaultNamespace() + "\"\n"
	if err := os.WriteFile(file, []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TEMPORAL_ADDRESS", "")
	t.Setenv("TEMPORAL_NAMESPACE", "")
	t.Setenv("TEMPORAL_CONFIG_FILE", file)
	t.Setenv("TEMPORAL_PROFILE", "test")
	t.Setenv("IDEMFLOW_DATA_DIR", t.TempDir()) // no dev stack to find
	for _, verb := range []string{"apply", "describe"} {
		if code, out := run(t, "schedule", verb); code != 0 {
			t.Fatalf("schedule %s: exit %d\n%s", verb, code, out)
		}
	}
}

// A tools file that cannot work stops every role that loads it before
// anything connects, naming the tool and the field; a tool may not take a
// name another operation holds; and only a role that calls the tools (a
// worker) needs their secrets.
func TestABadToolsFileIsAStartUpErrorForEveryRole(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tool := func(name, extra string) string {
		return "tools:\n  - name: " + name + "\n    description: d\n    input_schema: {type: object}\n" +
			"    call: {method: POST, url: 'http://billing:9000/r', headers: {Authorization: 'Bearer ${IDEMFLOW_TEST_BILLING}'}" + extra + "}\n"
	}
	neither := write("neither.yaml", tool("refund", ""))
	clash := write("clash.yaml", tool("create_ticket", ", key_header: Idempotency-Key"))
	good := write("good.yaml", tool("refund", ", key_header: Idempotency-Key"))
	nowhere := []string{"--database-url", "postgres://nobody@127.0.0.1:1/none", "--temporal-address", "127.0.0.1:1"}
	t.Setenv("IDEMFLOW_TEST_BILLING", "s3cret")
	for _, cmd := range []string{"serve", "gateway", "worker", "dev", "mcp"} {
		args := nowhere
		if cmd == "mcp" {
			args = []string{"--url", "http://127.0.0.1:1", "--token", "t"}
		}
		if cmd == "dev" {
			args = []string{"--data-dir", t.TempDir()}
		}
		code, out := run(t, append([]string{cmd, "--tools", neither}, args...)...)
		if code != 2 || !strings.Contains(out, "tool refund: call.key_header, lookup: a tool needs one of them") || strings.Contains(out, "s3cret") {
			t.Errorf("%s, neither mode: exit %d\n%s", cmd, code, out)
		}
		t.Setenv("IDEMFLOW_TOOLS", clash)
		code, out = run(t, append([]string{cmd}, args...)...)
		if code != 2 || !strings.Contains(out, `both declare the tool "create_ticket"`) {
			t.Errorf("%s, IDEMFLOW_TOOLS naming a built-in's tool: exit %d\n%s", cmd, code, out)
		}
		t.Setenv("IDEMFLOW_TOOLS", "")
	}
	// The header's variable is unset: a worker refuses to start, a gateway
	// (which never calls) goes on to connect, and fails there instead.
	os.Unsetenv("IDEMFLOW_TEST_BILLING")
	code, out := run(t, append([]string{"worker", "--tools", good}, nowhere...)...)
	if code != 2 || !strings.Contains(out, "call.headers.Authorization: $IDEMFLOW_TEST_BILLING is not set") {
		t.Errorf("worker without the secret: exit %d\n%s", code, out)
	}
	code, out = run(t, append([]string{"gateway", "--tools", good}, nowhere...)...)
	if code == 2 || strings.Contains(out, "IDEMFLOW_TEST_BILLING") {
		t.Errorf("gateway without the secret: exit %d\n%s", code, out)
	}
}

// A table whose (tenant_id, idem_key) lacks its unique index can take a
// duplicate: no role starts on it, and the refusal names the table and
// the fix (issue #57), before anything else is dialled.
func TestNoRoleStartsOnATableWithoutItsUniqueKey(t *testing.T) {
	pool, dbURL := testenv.Pool(t)
	if _, err := pool.Exec(context.Background(), `ALTER TABLE ticket DROP CONSTRAINT ticket_tenant_idem_key_uq`); err != nil {
		t.Fatal(err)
	}
	for _, role := range []string{"worker", "gateway", "serve"} {
		code, out := run(t, role, "--database-url", dbURL, "--temporal-address", "127.0.0.1:1")
		if code == 0 || !strings.Contains(out, "[ticket]") || !strings.Contains(out, "no unique index on (tenant_id, idem_key)") {
			t.Errorf("%s: exit %d, want a refusal naming the table ticket and its missing unique index:\n%s", role, code, out)
		}
	}
}
