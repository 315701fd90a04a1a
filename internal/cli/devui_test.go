//go:build !nodev

package cli_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemflow/idemflow/internal/tooling/testenv"
)

// --ui-port 0 is what -h says, no Web UI: dev comes up, says there is
// none, writes no UI address, and answers a request. It ended with
// "temporal ui: not answering on http://127.0.0.1:0".
func TestDevWithUIPortZeroServesNoUI(t *testing.T) {
	dbURL := testenv.Database(t)
	dir := t.TempDir()
	dev := startDev(t, dbURL, "--data-dir", dir, "--temporal-store", "sqlite", "--http-addr", fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)),
		"--temporal-port", fmt.Sprint(testenv.FreePort(t)), "--ui-port", "0")
	dev.WaitUp(t, 2*time.Minute)
	if out := dev.Output(); !strings.Contains(out, "temporal ui  (none: --ui-port 0)") {
		t.Fatalf("the banner does not say there is no UI:\n%s", out)
	}
	env := readEnvFile(t, dir+"/dev.env")
	if v, ok := env["IDEMFLOW_UI_URL"]; !ok || v != "" {
		t.Fatalf("IDEMFLOW_UI_URL=%q (present %v), want empty", v, ok)
	}
	r, err := testenv.Send(env["IDEMFLOW_URL"], testenv.Request{Path: "/v1/tickets", Token: env["IDEMFLOW_TOKEN"], Key: "ui-0",
		Body: `{"customer_id":"c","title":"t"}`})
	if err != nil || r.Status != http.StatusCreated {
		t.Fatalf("a ticket: %d %s %v", r.Status, r.Body, err)
	}
}
