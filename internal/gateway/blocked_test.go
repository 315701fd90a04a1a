package gateway_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemflow/idemflow/internal/audit"
	"github.com/idemflow/idemflow/internal/metrics"
	"github.com/idemflow/idemflow/internal/replication"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
)

// A database that waits for a synchronous standby that is not there (a
// promoted standby that kept synchronous_standby_names) answers pings but
// commits nothing: every claim hung while /readyz said 200, audit said
// healthy and the metrics said nothing (issue #55). All three now say
// what is wrong.
func TestReadinessAndAuditSayWhenCommitsWaitForAMissingStandby(t *testing.T) {
	ctx := context.Background()
	primary := testenv.PrivatePostgres(t)
	s := testenv.NewStack(t, testenv.Options{Database: testenv.Setup{Server: primary.AdminURL}})
	// After the stack: commits work again before its own cleanup needs
	// them.
	set := testenv.SynchronousStandbys(t, primary.AdminURL)
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
	// The gauge every role exports (cli's openDeps), read at each scrape.
	reg := metrics.New()
	reg.WatchCommits(s.Logger, replication.CommitsBlocked(s.Pool))
	gauge := func() string {
		t.Helper()
		rec := httptest.NewRecorder()
		reg.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		for _, l := range strings.Split(rec.Body.String(), "\n") {
			if strings.HasPrefix(l, "idemflow_database_commits_blocked ") {
				return l
			}
		}
		return "(absent)\n" + rec.Body.String()
	}
	if g := gauge(); g != "idemflow_database_commits_blocked 0" {
		t.Fatalf("the gauge before: %s", g)
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
	if g := gauge(); g != "idemflow_database_commits_blocked 1" {
		t.Fatalf("the gauge while no commit can finish: %s", g)
	}
	rep, err := audit.Run(ctx, s.Pool, s.Records, s.Gateway.Set.Guards(), 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Healthy() || !strings.Contains(rep.Replication.Blocked(), "commits wait for a synchronous standby that is not there") {
		t.Fatalf("audit while no commit can finish: healthy %v, blocked %q", rep.Healthy(), rep.Replication.Blocked())
	}

	// An intent sent meanwhile gets an answer within the claim's bound,
	// and its text does not say nothing was recorded: the claim may have
	// committed locally. Once commits work again, its retry under the
	// same key is served, once.
	s.Gateway.Starter.ClaimTimeout = 2 * time.Second
	body := `{"customer_id":"c-blocked","title":"Printer on fire"}`
	started := time.Now()
	r := s.Do(testenv.Request{Path: "/v1/tickets", Token: s.Tokens[testenv.TenantA], Key: "blocked-1", Body: body})
	took := time.Since(started)
	if r.Status != http.StatusServiceUnavailable || took > 10*time.Second || !strings.Contains(string(r.Body), "may have been recorded") ||
		strings.Contains(string(r.Body), "nothing was executed") {
		t.Fatalf("an intent while no commit can finish: %d after %s: %s", r.Status, took.Round(time.Millisecond), r.Body)
	}
	set("")
	var again testenv.Response
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		again = s.Do(testenv.Request{Path: "/v1/tickets", Token: s.Tokens[testenv.TenantA], Key: "blocked-1", Body: body})
		if again.Status != http.StatusServiceUnavailable || time.Now().After(deadline) {
			break
		}
	}
	if again.Status != http.StatusCreated {
		t.Fatalf("the retry once commits work: %d %s", again.Status, again.Body)
	}
	if n := testenv.Count(t, s.Pool, "ticket", "customer_id = $1", "c-blocked"); n != 1 {
		t.Fatalf("%d tickets for one intent", n)
	}
	t.Logf("blocked: 503 after %s (%s); the retry once commits work: %d", took.Round(time.Millisecond), r.Body, again.Status)
}
