package devserver

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemflow/idemflow/internal/pgurl"
	"github.com/jackc/pgx/v5"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

func hello(ctx workflow.Context, name string) (string, error) { return "hello " + name, nil }

func dial(t *testing.T, hostPort string) client.Client {
	t.Helper()
	c, err := client.Dial(client.Options{HostPort: hostPort, Logger: SilentSDKLogger()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestTemporalKeepsWorkflowsAcrossRestartAndSetsRetention(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		dir := t.TempDir()
		testKeepsWorkflows(t, TemporalConfig{DataDir: dir, Retention: 36 * time.Hour}, func(t *testing.T) {
			// The pragmas took: SQLite writes a write-ahead log, not a
			// rollback journal (unknown pragma keys are silently ignored).
			if _, err := os.Stat(filepath.Join(dir, "temporal.db-wal")); err != nil {
				t.Fatalf("no WAL file: %v", err)
			}
		})
	})
	t.Run("postgres", func(t *testing.T) {
		db := "idemflow_test_temporal_" + strconv.FormatInt(time.Now().UnixNano(), 36)
		t.Cleanup(func() { dropDatabases(t, db, db+"_visibility") })
		testKeepsWorkflows(t, TemporalConfig{DataDir: t.TempDir(), Retention: 36 * time.Hour,
			Postgres: testAdminURL(), PostgresDatabase: db}, func(t *testing.T) {
			// A second server on the same databases is refused, whatever
			// its data directory.
			_, err := StartTemporal(context.Background(), TemporalConfig{DataDir: t.TempDir(), Postgres: testAdminURL(), PostgresDatabase: db})
			if err == nil || !strings.Contains(err.Error(), "another idemflow dev") {
				t.Fatalf("a second server on the same databases: %v", err)
			}
		})
	})
}

// A start that finds the database's lock held by a server that is giving
// it back (a restart behind a pooler in session mode, whose reset of the
// old session comes after its client closed) waits for it, and a server
// that stops gives its lock back before Stop returns. (A fresh-clone run
// failed: "start 2 behind session pooling: … another idemflow dev runs a
// Temporal server on it".)
func TestAStartWaitsForTheLockOfAServerThatIsStopping(t *testing.T) {
	ctx := context.Background()
	db := "idemflow_test_temporal_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	t.Cleanup(func() { dropDatabases(t, db, db+"_visibility") })
	u, err := EnsureDatabase(ctx, testAdminURL(), db)
	if err != nil {
		t.Fatal(err)
	}
	holder, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_lock("+pgLockKey+")"); err != nil {
		t.Fatal(err)
	}
	released := make(chan struct{})
	time.AfterFunc(1500*time.Millisecond, func() {
		defer close(released)
		_, _ = holder.Exec(ctx, "SELECT pg_advisory_unlock("+pgLockKey+")")
	})
	srv, err := StartTemporal(ctx, TemporalConfig{DataDir: t.TempDir(), Retention: 24 * time.Hour, Postgres: testAdminURL(), PostgresDatabase: db})
	if err != nil {
		t.Fatalf("a start while the lock was being given back: %v", err)
	}
	_ = srv.Stop()
	<-released // the holder's connection is this goroutine's again
	var free bool
	if err := holder.QueryRow(ctx, "SELECT pg_try_advisory_lock("+pgLockKey+")").Scan(&free); err != nil || !free {
		t.Fatalf("the lock is still held when Stop returned: %v", err)
	}
}

// A multi-host URL whose first host is down: the embedded store follows
// it to the next one, as pgx does for idemflow's own pools (issue #55: it
// took the first host alone and dialled it for ever).
func TestTemporalOnAMultiHostURLSkipsAHostThatIsDown(t *testing.T) {
	db := "idemflow_test_temporal_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	t.Cleanup(func() { dropDatabases(t, db, db+"_visibility") })
	admin := testAdminURL()
	multi := strings.Replace(admin, "@", "@127.0.0.1:1,", 1) + "&target_session_attrs=read-write"
	if !strings.Contains(admin, "@") || !strings.Contains(admin, "?") {
		t.Fatalf("the test's admin URL %q has no user or query to extend", admin)
	}
	testKeepsWorkflows(t, TemporalConfig{DataDir: t.TempDir(), Retention: 36 * time.Hour, Postgres: multi, PostgresDatabase: db}, func(*testing.T) {})
}

// belowEphemeral fails t unless hostPort's port is below the kernel's
// ephemeral range, where an outgoing connection could take it between
// the check that it is free and the server's bind (a failed bind ends
// the process).
func belowEphemeral(t *testing.T, hostPort string) {
	t.Helper()
	_, p, _ := net.SplitHostPort(hostPort)
	if port, _ := strconv.Atoi(p); port >= ephemeralLow() {
		t.Errorf("the frontend's default port %d is in the kernel's ephemeral range (from %d)", port, ephemeralLow())
	}
}

func dropDatabases(t *testing.T, names ...string) {
	conn, err := pgx.Connect(context.Background(), testAdminURL())
	if err != nil {
		t.Log(err)
		return
	}
	defer conn.Close(context.Background())
	for _, n := range names {
		if _, err := conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+n+" WITH (FORCE)"); err != nil {
			t.Log(err)
		}
	}
}

// testKeepsWorkflows runs a workflow, restarts the server on the same
// store, and finds it; check runs while the first server is up.
func testKeepsWorkflows(t *testing.T, cfg TemporalConfig, check func(t *testing.T)) {
	ctx := context.Background()
	dir := cfg.DataDir
	srv, err := StartTemporal(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Port == 0 {
		belowEphemeral(t, srv.HostPort)
	}
	c := dial(t, srv.HostPort)
	w := worker.New(c, "q", worker.Options{})
	w.RegisterWorkflow(hello)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "kept", TaskQueue: "q"}, hello, "dev")
	if err != nil {
		t.Fatal(err)
	}
	var got string
	if err := run.Get(ctx, &got); err != nil || got != "hello dev" {
		t.Fatalf("%q %v", got, err)
	}
	check(t)
	// A second process cannot run a server on the same data directory.
	if _, err := StartTemporal(ctx, TemporalConfig{DataDir: dir}); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("a second server on the same data directory: %v", err)
	}
	w.Stop()
	c.Close()
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}

	cfg.Retention = 48 * time.Hour // a changed setting reaches the existing namespace
	srv, err = StartTemporal(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop() //nolint:errcheck
	c = dial(t, srv.HostPort)
	defer c.Close()
	d, err := c.DescribeWorkflowExecution(ctx, "kept", "")
	if err != nil {
		t.Fatalf("the workflow did not survive the restart: %v", err)
	}
	if d.WorkflowExecutionInfo.Status.String() != "Completed" {
		t.Fatalf("status %s", d.WorkflowExecutionInfo.Status)
	}
	ns, err := c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	if got := ns.Config.WorkflowExecutionRetentionTtl.AsDuration(); got != 48*time.Hour {
		t.Fatalf("retention %v, want 48h", got)
	}

	port, _ := FreePort()
	ui, err := StartUI("127.0.0.1", port, srv.HostPort, "default")
	if err != nil {
		t.Fatal(err)
	}
	defer ui.Stop()
	for _, path := range []string{"/", "/api/v1/namespaces/default/workflows"} {
		resp, err := http.Get(ui.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("UI %s: %d", path, resp.StatusCode)
		}
		if path != "/" && !strings.Contains(string(body), `"kept"`) {
			t.Fatalf("UI API does not list the workflow: %s", body)
		}
	}
}

func TestPrivatePostgresStartsFromInstalledBinaries(t *testing.T) {
	if _, err := PostgresBin(); err != nil {
		t.Fatalf("PostgreSQL binaries are needed (scripts/test.sh installs them): %v", err)
	}
	saved := localCandidates
	localCandidates = nil // do not settle for the machine's own server
	defer func() { localCandidates = saved }()
	ctx := context.Background()
	dir := t.TempDir()
	port, _ := FreePort()
	pg, err := EnsurePostgres(ctx, dir, port, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Stop(ctx) //nolint:errcheck
	if !pg.Private {
		t.Fatal("expected a private server")
	}
	u, err := EnsureDatabase(ctx, pg.AdminURL, "idemflow")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	// A second call finds the running private server instead of starting one.
	again, err := EnsurePostgres(ctx, dir, port, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil || again.Private {
		t.Fatalf("second call: %+v %v", again, err)
	}
	if err := pg.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if ping(ctx, pg.AdminURL) == nil {
		t.Fatal("still answering after Stop")
	}
}

// testAdminURL is testenv.AdminURL (which this package cannot import: testenv
// imports it).
func testAdminURL() string {
	if u := os.Getenv("IDEMFLOW_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres"
}

// Seen running 'idemflow chaos' and pressing Ctrl-C while its PostgreSQL
// started: pg_ctl was stopped while it waited, and the server it had
// forked (in a session of its own) kept running after chaos exited, on a
// deleted directory. A start that fails, here by its context ending at
// several points of the start, leaves no server behind.
func TestAStartCutShortLeavesNoServerRunning(t *testing.T) {
	if _, err := PostgresBin(); err != nil {
		t.Fatalf("PostgreSQL binaries are needed (scripts/test.sh installs them): %v", err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := t.TempDir()
	port, _ := FreePort()
	pg, err := StartPrivatePostgres(context.Background(), dir, port, logger) // initdb, once
	if err != nil {
		t.Fatal(err)
	}
	if err := pg.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	cut := 0
	for _, after := range []time.Duration{20 * time.Millisecond, 80 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond} {
		ctx, cancel := context.WithTimeout(context.Background(), after)
		pg, err := StartPrivatePostgres(ctx, dir, port, logger)
		cancel()
		if err == nil {
			_ = pg.Stop(context.Background()) // started within the time: nothing to check
			continue
		}
		cut++
		if ping(context.Background(), fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2", port)) == nil {
			t.Fatalf("a start cut short after %v (%v) left a server answering on port %d", after, err, port)
		}
	}
	if cut == 0 {
		t.Fatal("every start finished within 400ms: no start was cut short, so nothing was checked")
	}
}

// dev creates the database --database-url names when it is missing, as it
// creates Temporal's: once, and then finds it. A wrong password is not a
// missing database, and creates nothing.
func TestTheNamedDatabaseIsCreatedWhenMissing(t *testing.T) {
	admin := testAdminURL()
	name := "idemflow_missing_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	u, err := WithDatabase(admin, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn, err := pgurl.Connect(context.Background(), admin)
		if err == nil {
			_, _ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name)
			conn.Close(context.Background())
		}
	})
	for i, want := range []bool{true, false} {
		created, err := EnsureDatabaseOf(context.Background(), u)
		if err != nil || created != want {
			t.Fatalf("call %d: created %v, %v; want %v", i+1, created, err, want)
		}
	}
	conn, err := pgurl.Connect(context.Background(), u)
	if err != nil {
		t.Fatalf("the database is not there: %v", err)
	}
	conn.Close(context.Background())

	wrong, _ := url.Parse(u)
	wrong.User = url.UserPassword("no_such_role_here", "x")
	wrong.Path = "/" + name + "_other"
	if created, err := EnsureDatabaseOf(context.Background(), wrong.String()); err == nil || created {
		t.Fatalf("an unknown role: created %v, %v; want the connection's error", created, err)
	}
}

// fatalChild, set in a child's environment, makes
// TestTemporalsFatalErrorIsSaidWhereDevRuns that child: it starts a server
// that Temporal ends with a fatal error, and so ends.
const fatalChild = "IDEMFLOW_TEST_TEMPORAL_FATAL_CHILD"

// Temporal ends the process on a fatal error (a listener it cannot bind),
// after logging it. Its log is a file in the data directory, so that dev
// used to end with status 1 and no word where it was run. An address
// Temporal cannot parse as an IP (its listeners bind to IPs) is such an
// error, and one that a port check cannot see.
func TestTemporalsFatalErrorIsSaidWhereDevRuns(t *testing.T) {
	if dir := os.Getenv(fatalChild); dir != "" {
		_, err := StartTemporal(context.Background(), TemporalConfig{DataDir: dir, IP: "localhost", Namespace: "default"})
		fmt.Fprintf(os.Stdout, "StartTemporal returned: %v\n", err)
		os.Exit(0)
	}
	dir := t.TempDir()
	stdout, stderr, err := runChild(t, fatalChild, dir)
	logged, _ := os.ReadFile(filepath.Join(dir, "temporal-server.log"))
	if !strings.Contains(string(logged), "unable to parse bindOnIP") {
		t.Fatalf("the server did not end as this test expects (exit: %v; stdout: %s; its log: %s)", err, stdout, logged)
	}
	if err == nil {
		t.Fatalf("the server's fatal error did not end the process: %s", stdout)
	}
	if !strings.Contains(stderr, "unable to parse bindOnIP") {
		t.Fatalf("the process ended (%v) with its reason only in temporal-server.log; stderr: %q", err, stderr)
	}
}

// portRaceChild, set in a child's environment, makes
// TestAPortTakenBetweenPickAndBindIsPickedAgain the child that starts
// the server.
const portRaceChild = "IDEMFLOW_TEST_TEMPORAL_PORT_RACE_CHILD"

// A port found free is bound by Temporal a moment later; another process
// may take it in between (on a busy machine, about one start in ten).
// Temporal then ends the process ("Failed to start ringpop listener …
// address already in use"). The start picks its ports again instead. One
// of the child's picks is a port held open, as if taken in between.
func TestAPortTakenBetweenPickAndBindIsPickedAgain(t *testing.T) {
	if dir := os.Getenv(portRaceChild); dir != "" {
		taken, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer taken.Close()
		picks := 0
		var stderr strings.Builder
		srv, err := StartTemporal(context.Background(), TemporalConfig{DataDir: dir, Namespace: "default", Stderr: &stderr,
			pickPort: func() (int, error) {
				// The first pick is the frontend's port, checked before
				// the start; the second is its membership (ringpop) port,
				// which only Temporal binds.
				if picks++; picks == 2 {
					return taken.Addr().(*net.TCPAddr).Port, nil
				}
				return FreePort()
			}})
		if err == nil {
			_ = srv.Stop()
		}
		fmt.Fprintf(os.Stdout, "StartTemporal returned: %v\nits stderr: %s\n", err, stderr.String())
		os.Exit(0)
	}
	stdout, stderr, err := runChild(t, portRaceChild, t.TempDir())
	t.Logf("the child: %v\n%s%s", err, stdout, stderr)
	if err != nil || !strings.Contains(stdout, "StartTemporal returned: <nil>") {
		t.Fatalf("a port taken between the pick and the bind ended the start (exit: %v)", err)
	}
	if !strings.Contains(stdout, "address already in use") {
		t.Fatal("the start did not say it picked its ports again")
	}
}

// distinctPortsChild, set in a child's environment, makes
// TestOneStartsListenersTakeDistinctPortsAndNoneReserved the child that
// starts the server.
const distinctPortsChild = "IDEMFLOW_TEST_TEMPORAL_DISTINCT_PORTS_CHILD"

// A port is free until its listener binds it, so two picks of one start
// can return the same port, and a pick can return the port dev serves its
// gateway on once Temporal is up. The first made the start collide with
// itself; the second made dev fail with "bind: address already in use"
// on its own --http-addr (a CI run of TestDevRestartsAtOnceAfterSIGKILL).
// Here every pick repeats the one before, and one returns the reserved
// port.
func TestOneStartsListenersTakeDistinctPortsAndNoneReserved(t *testing.T) {
	if dir := os.Getenv(distinctPortsChild); dir != "" {
		reserved, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		picks, last := 0, 0
		var stderr strings.Builder
		srv, err := StartTemporal(context.Background(), TemporalConfig{DataDir: dir, Namespace: "default", Stderr: &stderr,
			Reserved: []int{reserved},
			pickPort: func() (int, error) {
				picks++
				switch {
				case picks == 3:
					return reserved, nil
				case picks%2 == 0:
					return last, nil
				}
				last, err = FreePort()
				return last, err
			}})
		if err != nil {
			fmt.Fprintf(os.Stdout, "StartTemporal returned: %v\nits stderr: %s\n", err, stderr.String())
			os.Exit(0)
		}
		defer srv.Stop()
		fmt.Fprintf(os.Stdout, "StartTemporal returned: <nil>\nits stderr: %s\n", stderr.String())
		if err := portFree("127.0.0.1", reserved); err != nil {
			fmt.Fprintf(os.Stdout, "the reserved port: %v\n", err)
		}
		return
	}
	stdout, stderr, err := runChild(t, distinctPortsChild, t.TempDir())
	t.Logf("the child: %v\n%s%s", err, stdout, stderr)
	if err != nil || !strings.Contains(stdout, "StartTemporal returned: <nil>") {
		t.Fatalf("a start whose picks repeat did not start (exit: %v)", err)
	}
	if strings.Contains(stdout, "picking the ports again") {
		t.Fatal("the start's own listeners collided: it picked its ports again")
	}
	if strings.Contains(stdout, "the reserved port") {
		t.Fatal("a listener of the server took the port reserved for the caller")
	}
}

// runChild runs the calling test again in a child process, with env set
// to dir in its environment, which makes it the child: a server that ends
// its process must not end the test's.
func runChild(t *testing.T, env, dir string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$")
	cmd.Env = append(os.Environ(), env+"="+dir)
	var out, errs strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errs
	err = cmd.Run()
	return out.String(), errs.String(), err
}

// The server reads search attributes from its store on every read only
// while ones it was given could be missing from a service's copy: for a
// minute after the start that added them, never after a start that found
// them. Forced for good, every workflow start read them from PostgreSQL
// (about five statements each). A workflow started with them at once is
// accepted either way.
func TestSearchAttributeReadsAreForcedOnlyWhileJustAdded(t *testing.T) {
	ctx := context.Background()
	db := "idemflow_test_temporal_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	t.Cleanup(func() { dropDatabases(t, db, db+"_visibility") })
	attrs := map[string]enumspb.IndexedValueType{"IdemflowTestKey": enumspb.INDEXED_VALUE_TYPE_KEYWORD}
	cfg := TemporalConfig{DataDir: t.TempDir(), Postgres: testAdminURL(), PostgresDatabase: db, SearchAttributes: attrs}
	for i, want := range []bool{true, false} {
		srv, err := StartTemporal(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got := srv.ForcesSearchAttributeReads(); got != want {
			t.Errorf("start %d: reads forced %v, want %v", i+1, got, want)
		}
		c, err := DialTemporal(ctx, srv.HostPort, "default", 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		key := temporal.NewSearchAttributeKeyKeyword("IdemflowTestKey")
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: fmt.Sprintf("sa-%d", i), TaskQueue: "nobody",
			TypedSearchAttributes: temporal.NewSearchAttributes(key.ValueSet("k"))}, "Nothing")
		if err != nil {
			t.Errorf("start %d: a workflow with the search attribute: %v", i+1, err)
		} else {
			_ = c.TerminateWorkflow(ctx, run.GetID(), run.GetRunID(), "test")
		}
		c.Close()
		if err := srv.Stop(); err != nil {
			t.Fatal(err)
		}
	}
}
