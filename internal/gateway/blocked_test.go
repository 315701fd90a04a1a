package gateway_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemflow/idemflow/internal/audit"
	"github.com/idemflow/idemflow/internal/pgurl"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
)

// A database that waits for a synchronous standby that is not there (a
// promoted standby that kept synchronous_standby_names) answers pings but
// commits nothing: every claim hung while /readyz said 200 and audit
// said healthy (issue #55). Both now say what is wrong.
func TestReadinessAndAuditSayWhenCommitsWaitForAMissingStandby(t *testing.T) {
	ctx := context.Background()
	primary := testenv.PrivatePostgres(t)
	s := testenv.NewStack(t, testenv.Options{Database: testenv.Setup{Server: primary.AdminURL}})
	admin, err := pgurl.Connect(ctx, primary.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	set := func(names string) {
		t.Helper()
		for _, sql := range []string{`ALTER SYSTEM SET synchronous_standby_names = '` + names + `'`, `SELECT pg_reload_conf()`} {
			if _, err := admin.Exec(ctx, sql); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Cleanups run last first: commits work again before the stack's own
	// cleanup needs them.
	t.Cleanup(func() { set(""); _ = admin.Close(context.Background()) })
	ready := func() (int, string) {
		t.Helper()
		resp, err := http.Get(s.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := ready(); code != http.StatusOK {
		t.Fatalf("readyz before: %d %s", code, body)
	}

	set("*")
	var code int
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if code, _ = ready(); code != http.StatusOK || time.Now().After(deadline) {
			break
		}
	}
	if code != http.StatusServiceUnavailable {
		t.Fatalf("readyz while no commit can finish: %d, want 503", code)
	}
	rep, err := audit.Run(ctx, s.Pool, s.Records, s.Gateway.Set.Guards(), 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Healthy() || !strings.Contains(rep.Replication.Blocked(), "commits wait for a synchronous standby that is not there") {
		t.Fatalf("audit while no commit can finish: healthy %v, blocked %q", rep.Healthy(), rep.Replication.Blocked())
	}
}
