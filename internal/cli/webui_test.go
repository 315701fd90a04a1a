//go:build !nodev

package cli_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemflow/idemflow/internal/tooling/testenv"
	"go.temporal.io/sdk/client"
)

// chromium runs Debian's Chromium headless with the flags that keep it off
// the network (scripts/test.sh installs it), and returns what it printed.
func chromium(t *testing.T, args ...string) string {
	t.Helper()
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("the Web UI test needs Debian's chromium (scripts/test.sh installs it): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + t.TempDir(), "--window-size=1500,1000", "--virtual-time-budget=20000"}
	out, err := exec.CommandContext(ctx, bin, append(base, args...)...).Output()
	if err != nil {
		t.Fatalf("chromium %v: %v", args, err)
	}
	return string(out)
}

// The operator's way in: headless Chromium opens the Web UI that
// 'idemflow dev' serves, filtered by the IdempotencyKey of an intent this
// test created, and finds its workflow; the run's page shows its summary
// and the agent's answer as JSON. Screenshots of both are kept in artifacts/ at the repository's
// root (CI keeps them).
func TestWebUIFindsAnIntentByItsKey(t *testing.T) {
	_, dbURL := testenv.Pool(t)
	dropTemporalDatabases(t, dbURL)
	dir := t.TempDir()
	uiPort := testenv.FreePort(t)
	dev := startDev(t, dbURL, "--data-dir", dir, "--http-addr", fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)),
		"--temporal-port", fmt.Sprint(testenv.FreePort(t)), "--ui-port", fmt.Sprint(uiPort), "--reconcile-interval", "1m")
	dev.WaitUp(t, 2*time.Minute)
	env := readEnvFile(t, filepath.Join(dir, "dev.env"))
	key := fmt.Sprintf("ui-test-%d", time.Now().UnixNano())
	if r := testenv.Do(t, env["IDEMFLOW_URL"], testenv.Request{Path: "/v1/tickets", Token: env["IDEMFLOW_TOKEN"], Key: key,
		Body: `{"customer_id":"c-ui","title":"Find me in the Web UI"}`}); r.Status != 201 {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	wid := "ticket/demo/" + key
	ui := env["IDEMFLOW_UI_URL"]
	artifacts, _ := filepath.Abs("../../artifacts")
	if err := os.MkdirAll(artifacts, 0o755); err != nil {
		t.Fatal(err)
	}
	list := ui + "/namespaces/default/workflows?query=" + url.QueryEscape(fmt.Sprintf(`IdempotencyKey="%s"`, key))
	var dom string
	for attempt := 0; attempt < 5; attempt++ { // visibility is eventually consistent
		if dom = chromium(t, "--dump-dom", list); strings.Contains(dom, wid) {
			break
		}
		time.Sleep(2 * time.Second)
	}
	if !strings.Contains(dom, wid) {
		t.Fatalf("the workflow list filtered by IdempotencyKey does not show %s (%d bytes of DOM)", wid, len(dom))
	}
	shot := filepath.Join(artifacts, "webui-list-by-key.png")
	chromium(t, "--screenshot="+shot, list)
	tc, err := client.Dial(client.Options{HostPort: env["TEMPORAL_ADDRESS"], Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	desc, err := tc.DescribeWorkflowExecution(context.Background(), wid, "")
	if err != nil {
		t.Fatal(err)
	}
	// The run's page shows its summary, and the agent's answer as JSON
	// rather than base64.
	page := ui + "/namespaces/default/workflows/" + url.PathEscape(wid) + "/" + desc.GetWorkflowExecutionInfo().GetExecution().GetRunId() + "/history"
	dom = chromium(t, "--dump-dom", page)
	if !strings.Contains(dom, "ticket for c-ui: Find me in the Web UI") {
		t.Errorf("the run's page does not show its summary (%d bytes of DOM)", len(dom))
	}
	if !strings.Contains(dom, "ticket_id") || strings.Contains(dom, `"body":"ey`) {
		t.Errorf("the run's page does not show the answer as JSON (%d bytes of DOM)", len(dom))
	}
	chromium(t, "--screenshot="+filepath.Join(artifacts, "webui-workflow.png"), page)
	if fi, err := os.Stat(shot); err != nil || fi.Size() < 10000 {
		t.Fatalf("screenshot %s: %v", shot, err)
	}
	t.Logf("screenshots in %s", artifacts)
}
