//go:build !nodev

package cli_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemflow/idemflow/internal/cli"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
	"github.com/jackc/pgx/v5"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/server/temporaltest"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestMain lets the test binary run as an idemflow process of its own
// (IDEMFLOW_TEST_CHILD=1), so that a test can kill it like a real one.
func TestMain(m *testing.M) {
	testenv.Main(m, func(ctx context.Context, args []string, stdout, stderr io.Writer) int {
		return cli.Run(ctx, args, stdout, stderr)
	})
}

// child is a running idemflow command in its own process.
type child = testenv.Child

func startDev(t *testing.T, dbURL string, args ...string) *child {
	t.Helper()
	return startChild(t, dbURL, "idemflow dev is up", append([]string{"dev"}, args...)...)
}

// startChild runs an idemflow command; Up closes when it prints ready.
func startChild(t *testing.T, dbURL, ready string, args ...string) *child {
	t.Helper()
	return testenv.StartChild(t, []string{"DATABASE_URL=" + dbURL}, ready, args...)
}

// SIGKILL 'idemflow dev' while agents create tickets, start it again at
// once on the same data directory: it comes up, and every intent ends
// with exactly one ticket.
func TestDevRestartsAtOnceAfterSIGKILL(t *testing.T) {
	for _, store := range []string{"postgres", "sqlite"} {
		t.Run(store, func(t *testing.T) { testDevRestart(t, store) })
	}
}

func testDevRestart(t *testing.T, store string) {
	pool, dbURL := testenv.Pool(t)
	dropTemporalDatabases(t, dbURL)
	if store == "postgres" {
		dbURL = withPoolParams(dbURL) // as the README recommends
	}
	dir := t.TempDir()
	args := []string{"--data-dir", dir, "--http-addr", fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)), "--temporal-store", store,
		"--temporal-port", fmt.Sprint(testenv.FreePort(t)), "--ui-port", fmt.Sprint(testenv.FreePort(t)), "--reconcile-interval", "1m"}
	first := startDev(t, dbURL, args...)
	first.WaitUp(t, 2*time.Minute)
	env := readEnvFile(t, filepath.Join(dir, "dev.env"))
	base, token := env["IDEMFLOW_URL"], env["IDEMFLOW_TOKEN"]
	// dev runs the roles serve runs, wired in the same place: its worker's
	// series are on its page too.
	if r, err := testenv.Send(base, testenv.Request{Method: "GET", Path: "/metrics"}); err != nil || !strings.Contains(string(r.Body), "idemflow_processing_records ") {
		t.Fatalf("dev's /metrics lacks idemflow_processing_records: %v", err)
	}
	// dev's page holds what the README's table says, once it served an
	// intent.
	if r := testenv.Do(t, base, testenv.Request{Path: "/v1/tickets", Token: token, Key: "metrics-table",
		Body: `{"customer_id":"c","title":"t"}`}); r.Status != 201 {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	checkMetricsTable(t, "dev", scrapeAfterRuns(t, base))

	// Agents create tickets while the stack is killed under them.
	const agents, perAgent = 8, 6
	ctx, stopLoad := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for a := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perAgent {
				if ctx.Err() != nil {
					return
				}
				_, _ = testenv.Send(base, testenv.Request{Path: "/v1/tickets", Token: token,
					Key: fmt.Sprintf("crash-%d-%d", a, i), Body: fmt.Sprintf(`{"customer_id":"c-%d","title":"t %d"}`, a, i)})
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	if err := first.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-first.Done
	stopLoad()
	wg.Wait()

	second := startDev(t, dbURL, args...)
	second.WaitUp(t, 90*time.Second)

	// Every agent retries every intent with its key until it is answered.
	for a := range agents {
		for i := range perAgent {
			key := fmt.Sprintf("crash-%d-%d", a, i)
			deadline := time.Now().Add(60 * time.Second)
			for {
				r, err := testenv.Send(base, testenv.Request{Path: "/v1/tickets", Token: token, Key: key,
					Body: fmt.Sprintf(`{"customer_id":"c-%d","title":"t %d"}`, a, i)})
				if err == nil && r.Status == 201 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s never completed after the restart: %+v %v", key, r.Status, err)
				}
				time.Sleep(200 * time.Millisecond)
			}
		}
	}
	if n := testenv.Count(t, pool, "ticket", ""); n != agents*perAgent+1 { // and the metrics-table one
		t.Fatalf("%d tickets for %d intents", n, agents*perAgent+1)
	}
	if n := testenv.Count(t, pool, "idempotency_record", "status = 'PROCESSING'"); n != 0 {
		t.Fatalf("%d intents still PROCESSING", n)
	}
	_ = second.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-second.Done:
	case <-time.After(30 * time.Second):
		t.Fatal("dev did not stop on SIGTERM")
	}
}

func readEnvFile(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			out[k] = v
		}
	}
	return out
}

// serve is gateway and worker in one process against an existing Temporal
// and PostgreSQL: it answers a ticket, a replay and a conflict.
func TestServeRunsGatewayAndWorkerInOneProcess(t *testing.T) {
	_, dbURL := testenv.Pool(t)
	dbURL = withPoolParams(dbURL) // as the README recommends
	ts := temporaltest.NewServer(temporaltest.WithT(t))
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	pprofAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	srv := startChild(t, dbURL, "gateway listening", "serve", "--temporal-address", ts.GetFrontendHostPort(),
		"--namespace", ts.GetDefaultNamespace(), "--http-addr", addr, "--bootstrap-tokens", "acme:tok-serve-test-0123456789",
		"--metrics-addr", metricsAddr, "--pprof-addr", pprofAddr)
	srv.WaitUp(t, time.Minute)
	base := "http://" + addr
	req := testenv.Request{Path: "/v1/tickets", Token: "tok-serve-test-0123456789", Key: "serve-1", Body: `{"customer_id":"c","title":"t"}`}
	first := testenv.Do(t, base, req)
	again := testenv.Do(t, base, req)
	if first.Status != 201 || again.Status != 201 || string(first.Body) != string(again.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("ticket and replay: %d %s / %d %s", first.Status, first.Body, again.Status, again.Body)
	}
	req.Body = `{"customer_id":"c","title":"other"}`
	if r := testenv.Do(t, base, req); r.Status != 422 {
		t.Fatalf("changed body: %d %s", r.Status, r.Body)
	}
	// Metrics and the profiler on their own addresses, not the gateway's.
	if r := testenv.Do(t, base, testenv.Request{Method: "GET", Path: "/metrics"}); r.Status != 404 {
		t.Fatalf("/metrics on the gateway: %d", r.Status)
	}
	// The side listeners are not the gateway: Send, which checks no contract.
	if r, err := testenv.Send("http://"+metricsAddr, testenv.Request{Method: "GET", Path: "/metrics"}); err != nil || r.Status != 200 ||
		!strings.Contains(string(r.Body), `idemflow_intents_total{biz_type="ticket.create",outcome="executed"} 1`) {
		t.Fatalf("metrics address: %v %d %s", err, r.Status, r.Body)
	}
	if r, err := testenv.Send("http://"+pprofAddr, testenv.Request{Method: "GET", Path: "/debug/pprof/"}); err != nil || r.Status != 200 {
		t.Fatalf("pprof address: %v %d", err, r.Status)
	}
	// argv holds the bootstrap token: never readable over HTTP.
	for _, path := range []string{"/debug/pprof/cmdline", "/debug/pprof/"} {
		if r, err := testenv.Send("http://"+pprofAddr, testenv.Request{Method: "GET", Path: path}); err != nil || strings.Contains(string(r.Body), "tok-serve-test") {
			t.Fatalf("%s shows argv: %v %d %s", path, err, r.Status, r.Body)
		}
	}
	// Its LISTEN connection (cross-process wake-ups) took the same URL.
	time.Sleep(1500 * time.Millisecond)
	if out := srv.Output(); strings.Contains(out, "unrecognized configuration parameter") || strings.Contains(out, "listen") && strings.Contains(out, "level=WARN") {
		t.Fatalf("serve with pool parameters in its URL:\n%s", out)
	}
	_ = srv.Cmd.Process.Signal(syscall.SIGTERM)
	// While the gateway drains (--shutdown-grace, 2s by default), /metrics
	// on its own address still answers: the drain is what it shows.
	time.Sleep(500 * time.Millisecond)
	if r, err := testenv.Send(base, req); err != nil || r.Status != 503 {
		t.Fatalf("the gateway is not draining: %v %d", err, r.Status)
	}
	if r, err := testenv.Send("http://"+metricsAddr, testenv.Request{Method: "GET", Path: "/metrics"}); err != nil || r.Status != 200 {
		t.Fatalf("the metrics address stopped before the gateway drained: %v", err)
	}
	select {
	case err := <-srv.Done:
		if err != nil {
			t.Fatalf("serve did not stop cleanly: %v\n%s", err, srv.Output())
		}
	case <-time.After(45 * time.Second):
		t.Fatal("serve did not stop on SIGTERM")
	}
	if !strings.Contains(srv.Output(), "gateway stopped") {
		t.Errorf("no final line says the gateway stopped:\n%s", srv.Output())
	}
}

// withPoolParams adds the pool parameters the README recommends to a URL.
func withPoolParams(dbURL string) string {
	if strings.Contains(dbURL, "?") {
		return dbURL + "&pool_max_conns=20"
	}
	return dbURL + "?pool_max_conns=20"
}

// Every command that opens a database connection of its own takes the
// URL the README documents, pool parameters and all.
func TestCommandsAcceptPoolParametersInTheDatabaseURL(t *testing.T) {
	_, dbURL := testenv.Pool(t)
	dbURL = withPoolParams(dbURL)
	ts := temporaltest.NewServer(temporaltest.WithT(t))
	for _, args := range [][]string{
		{"migrate", "--database-url", dbURL},
		{"token", "--database-url", dbURL, "--tenant", "acme"},
		{"audit", "--database-url", dbURL},
		{"inspect", "--database-url", dbURL, "--temporal-address", ts.GetFrontendHostPort(), "--namespace", ts.GetDefaultNamespace(), "acme", "k-1"},
	} {
		var out, errOut strings.Builder
		// inspect of a key never sent answers "nothing known" (exit 4)
		// once it has read the database: the URL was accepted.
		if code := cli.Run(t.Context(), args, &out, &errOut); code != 0 && (args[0] != "inspect" || code != cli.ExitNotFound) {
			t.Errorf("%s: exit %d: %s", args[0], code, errOut.String())
		}
	}
}

// dropTemporalDatabases drops, when the test ends, the databases dev makes
// for its embedded Temporal beside dbURL's.
func dropTemporalDatabases(t *testing.T, dbURL string) {
	pc, err := pgx.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	testenv.DropAtEnd(t, pc.Database+"_temporal", pc.Database+"_temporal_visibility")
}

// serve started as soon as Temporal's frontend answers, before its
// namespace exists (as a process manager or an init order may start it),
// waits for the namespace instead of exiting.
func TestServeWaitsForItsNamespace(t *testing.T) {
	_, dbURL := testenv.Pool(t)
	ts := temporaltest.NewServer(temporaltest.WithT(t))
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	srv := startChild(t, dbURL, "gateway listening", "serve", "--temporal-address", ts.GetFrontendHostPort(),
		"--namespace", "later", "--http-addr", addr, "--bootstrap-tokens", "acme:tok-later-test-0123456789")
	time.Sleep(3 * time.Second)
	select {
	case err := <-srv.Done:
		t.Fatalf("serve exited before its namespace existed: %v\n%s", err, srv.Output())
	default:
	}
	if _, err := ts.GetDefaultClient().WorkflowService().RegisterNamespace(t.Context(), &workflowservice.RegisterNamespaceRequest{
		Namespace: "later", WorkflowExecutionRetentionPeriod: durationpb.New(24 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	srv.WaitUp(t, time.Minute)
	r := testenv.Do(t, "http://"+addr, testenv.Request{Path: "/v1/tickets", Token: "tok-later-test-0123456789", Key: "later-1", Body: `{"customer_id":"c","title":"t"}`})
	if r.Status != 201 {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	if !strings.Contains(srv.Output(), "namespace not ready yet") {
		t.Errorf("no line said what it waited for:\n%s", srv.Output())
	}
}
