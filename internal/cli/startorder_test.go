//go:build !nodev

package cli_test

import (
	"fmt"
	"net"
	"strconv"
	"strings"
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
