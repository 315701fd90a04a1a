//go:build !nodev

package cli_test

import (
	"fmt"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemflow/idemflow/internal/tooling/devserver"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
	"github.com/idemflow/idemflow/starter"
	"github.com/idemflow/idemflow/worker"
	"go.temporal.io/server/temporaltest"
)

// sigtermBound is how long a role may take to exit on SIGTERM whatever
// PostgreSQL does, as docs/operations.md says: --shutdown-grace (1 s
// here), the requests it holds (each statement bounded as the claim is),
// the worker's drain, and for dev its Temporal server's stop; a margin
// for the machine.
func sigtermBound(role string) time.Duration {
	d := time.Second + starter.DefaultClaimTimeout + worker.StopTimeout + 5*time.Second
	if role == "dev" {
		d += devserver.StopTimeout
	}
	return d
}

// A database whose commits wait for a synchronous standby that is not
// there held 'dev' for 20 s after SIGTERM (issue #55). serve, and dev
// with its Temporal store on the same database, with requests waiting on
// claims that never commit, exit within the documented bound.
func TestSIGTERMEndsTheRolesWithinTheirBoundWhileCommitsAreBlocked(t *testing.T) {
	for _, role := range []string{"serve", "dev"} {
		t.Run(role, func(t *testing.T) { testSIGTERMWhileBlocked(t, role) })
	}
}

func testSIGTERMWhileBlocked(t *testing.T, role string) {
	primary := testenv.PrivatePostgres(t)
	dbURL := testenv.DatabaseWith(t, testenv.Setup{Server: primary.AdminURL})
	set := testenv.SynchronousStandbys(t, primary.AdminURL)
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	base, tok := "http://"+addr, "tok-blocked-test-0123456789"
	var srv *child
	if role == "serve" {
		ts := temporaltest.NewServer(temporaltest.WithT(t))
		srv = startChild(t, dbURL, "gateway listening", "serve", "--temporal-address", ts.GetFrontendHostPort(),
			"--namespace", ts.GetDefaultNamespace(), "--http-addr", addr, "--bootstrap-tokens", "acme:"+tok, "--shutdown-grace", "1s")
		srv.WaitUp(t, time.Minute)
	} else {
		dir := t.TempDir()
		srv = startDev(t, dbURL, "--data-dir", dir, "--http-addr", addr, "--temporal-store", "postgres",
			"--temporal-port", fmt.Sprint(testenv.FreePort(t)), "--ui-port", fmt.Sprint(testenv.FreePort(t)), "--shutdown-grace", "1s")
		srv.WaitUp(t, 2*time.Minute)
		tok = readEnvFile(t, filepath.Join(dir, "dev.env"))["IDEMFLOW_TOKEN"]
	}
	ticket := func(key string) (testenv.Response, error) {
		return testenv.Send(base, testenv.Request{Path: "/v1/tickets", Token: tok, Key: key,
			Body: `{"customer_id":"c-1","title":"` + key + `"}`, Header: map[string]string{"Prefer": "wait=60"}})
	}
	if r, err := ticket("before"); err != nil || r.Status != 201 {
		t.Fatalf("before the block: %d %v", r.Status, err)
	}

	set("*")
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = ticket(fmt.Sprintf("blocked-%d", i))
		}()
	}
	time.Sleep(time.Second)
	signalled := time.Now()
	if err := srv.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-srv.Done:
		t.Logf("%s exited (%v) %s after SIGTERM", role, err, time.Since(signalled).Round(time.Millisecond))
	case <-time.After(sigtermBound(role)):
		// SIGQUIT: Go prints every goroutine's stack, which shows what
		// the shutdown waits for.
		_ = srv.Cmd.Process.Signal(syscall.SIGQUIT)
		<-srv.Done
		t.Fatalf("%s still running %s after SIGTERM, commits blocked:\n%s", role, sigtermBound(role), srv.Output())
	}
	wg.Wait()
}
