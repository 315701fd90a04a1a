//go:build !nodev

package cli_test

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemflow/idemflow/internal/tooling/testenv"
)

// Kubernetes, compose and a process manager start processes in any order:
// 'idemflow temporal' on a fresh database and serve come up whichever
// starts first, with no restart by hand, and serve answers an intent.
// serve started first polls the frontend as soon as it listens, before
// its namespace exists: Temporal then remembers the namespace as missing
// for a moment, and temporal's own registration of its search attributes
// must wait that out, not exit.
func TestServeAndTemporalComeUpInAnyOrder(t *testing.T) {
	for _, c := range []struct {
		name       string
		serveFirst bool
		gap        time.Duration
	}{
		{"serve first, temporal connected to at once", true, 0},
		{"temporal first, serve at once", false, 0},
		{"serve first, temporal 3 s later", true, 3 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, dbURL := testenv.Pool(t)
			dropTemporalDatabases(t, dbURL)
			temporalAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(testenv.FreePort(t)))
			_, port, _ := net.SplitHostPort(temporalAddr)
			httpAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
			token := "tok-start-order-0123456789"
			startTemporal := func() *child {
				return startChild(t, dbURL, "temporal server running", "temporal", "--temporal-port", port, "--ui-port", "0",
					"--data-dir", t.TempDir())
			}
			startServe := func() *child {
				return startChild(t, dbURL, "gateway listening", "serve", "--temporal-address", temporalAddr,
					"--http-addr", httpAddr, "--bootstrap-tokens", "acme:"+token)
			}
			var temporal, serve *child
			if c.serveFirst {
				serve = startServe()
				time.Sleep(c.gap)
				temporal = startTemporal()
			} else {
				temporal = startTemporal()
				time.Sleep(c.gap)
				serve = startServe()
			}
			temporal.WaitUp(t, 3*time.Minute)
			serve.WaitUp(t, 3*time.Minute)
			r := testenv.Do(t, "http://"+httpAddr, testenv.Request{Path: "/v1/tickets", Token: token, Key: "start-order-1", Body: `{"customer_id":"c","title":"t"}`})
			if r.Status != 201 {
				t.Fatalf("%d %s", r.Status, r.Body)
			}
			// Intents carry their search attributes (the Web UI finds them
			// by key) whichever process registered them.
			if out := serve.Output(); strings.Contains(out, "search attributes not registered") {
				t.Errorf("serve started without its search attributes:\n%s", out)
			}
		})
	}
}

// Every role, started before what it needs: serve, a gateway, a worker,
// the Schedule's job and MCP over HTTP on a database nothing was migrated
// on, with no Temporal yet; then the migrations, then Temporal. Each waits
// (saying what for) and comes up, with no restart by hand; the gateway,
// serve and MCP then answer, and Temporal SIGKILLed and started again
// under them is served through.
func TestEveryRoleComesUpWhateverStartsFirst(t *testing.T) {
	dbURL := testenv.EmptyDatabase(t)
	dropTemporalDatabases(t, dbURL)
	temporalAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(testenv.FreePort(t)))
	_, port, _ := net.SplitHostPort(temporalAddr)
	token := "tok-every-role-0123456789"
	serveAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	gatewayAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	mcpAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	workerMetrics := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	roles := []struct {
		name, ready string
		args        []string
	}{
		{"serve", "gateway listening", []string{"serve", "--temporal-address", temporalAddr, "--http-addr", serveAddr, "--bootstrap-tokens", "acme:" + token}},
		{"gateway", "gateway listening", []string{"gateway", "--temporal-address", temporalAddr, "--http-addr", gatewayAddr}},
		{"worker", "worker running", []string{"worker", "--temporal-address", temporalAddr, "--metrics-addr", workerMetrics}},
		{"schedule apply", "reconcile schedule", []string{"schedule", "apply", "--temporal-address", temporalAddr}},
		{"mcp", "MCP server listening", []string{"mcp", "--http", mcpAddr, "--url", "http://" + serveAddr}},
	}
	children := map[string]*child{}
	for _, r := range roles {
		children[r.name] = startChild(t, dbURL, r.ready, r.args...)
	}
	time.Sleep(3 * time.Second)
	for name, c := range children {
		select {
		case err := <-c.Done:
			t.Fatalf("%s exited before PostgreSQL's migrations and Temporal were there: %v\n%s", name, err, c.Output())
		default:
		}
	}
	migrate := startChild(t, dbURL, "\x00", "migrate")
	if err := <-migrate.Done; err != nil {
		t.Fatalf("migrate: %v\n%s", err, migrate.Output())
	}
	temporal := startChild(t, dbURL, "temporal server running", "temporal", "--temporal-port", port, "--ui-port", "0", "--data-dir", t.TempDir())
	temporal.WaitUp(t, 3*time.Minute)
	for _, r := range roles {
		if r.name == "schedule apply" {
			continue // a job: it ends once the schedule is applied (below)
		}
		children[r.name].WaitUp(t, 3*time.Minute)
	}
	select {
	case err := <-children["schedule apply"].Done:
		// Its last lines may still be on their way from the pipe.
		out := children["schedule apply"].Output()
		for end := time.Now().Add(5 * time.Second); !strings.Contains(out, "reconcile schedule") && time.Now().Before(end); {
			time.Sleep(50 * time.Millisecond)
			out = children["schedule apply"].Output()
		}
		if err != nil || !strings.Contains(out, "reconcile schedule") {
			t.Fatalf("schedule apply: %v\n%s", err, out)
		}
	case <-time.After(3 * time.Minute):
		t.Fatalf("schedule apply did not end:\n%s", children["schedule apply"].Output())
	}
	for _, want := range []struct{ role, line string }{
		{"serve", "the database lacks migrations"},
		{"worker", "Temporal not reachable yet"},
	} {
		if !strings.Contains(children[want.role].Output(), want.line) {
			t.Errorf("%s never said what it waited for (%q):\n%s", want.role, want.line, children[want.role].Output())
		}
	}
	ticket := func(base, key string) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for {
			r, err := testenv.Send(base, testenv.Request{Path: "/v1/tickets", Token: token, Key: key, Body: `{"customer_id":"c","title":"t"}`})
			if err == nil && r.Status == http.StatusCreated {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s at %s: %v %d %s", key, base, err, r.Status, r.Body)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	ticket("http://"+serveAddr, "every-role-serve")
	ticket("http://"+gatewayAddr, "every-role-gateway")
	if resp, err := http.Get("http://" + mcpAddr + "/healthz"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("mcp's health: %v %v", err, resp)
	}
	mcp := testenv.DialMCP(t, "http://"+mcpAddr+"/", token)
	if _, rpcErr := mcp.Call("tools/list", map[string]any{}); rpcErr != nil {
		t.Fatalf("mcp tools/list: %v", rpcErr)
	}

	// Temporal restarted under them: SIGKILLed, and started again.
	if err := temporal.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-temporal.Done
	again := startChild(t, dbURL, "temporal server running", "temporal", "--temporal-port", port, "--ui-port", "0", "--data-dir", t.TempDir())
	again.WaitUp(t, 3*time.Minute)
	ticket("http://"+serveAddr, "every-role-after-restart")
	ticket("http://"+gatewayAddr, "every-role-gateway-after-restart")
	for _, name := range []string{"serve", "gateway", "worker", "mcp"} {
		select {
		case err := <-children[name].Done:
			t.Errorf("%s exited across Temporal's restart: %v\n%s", name, err, children[name].Output())
		default:
		}
	}
}
