package gateway_test

import (
	"bytes"
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/idemflow/idemflow/internal/pgurl"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
)

// A deployment without an address that moves names its primary and its
// standby in one multi-host URL with target_session_attrs=read-write, as
// docs/production.md says (pgx's support). Here the standby comes first in
// the URL, and the stack writes to the primary all the same. The primary
// is SIGKILLed with every backend and its synchronous standby promoted.
// Nothing is restarted: the stack's pools find the new primary from the
// same URL, a new intent is served, and the first intent's replay is its
// first answer, byte for byte.
func TestAMultiHostURLReachesThePromotedStandbyWithoutARestart(t *testing.T) {
	ctx := context.Background()
	primary := testenv.PrivatePostgres(t)
	standby := testenv.Standby(t, primary, "standby")
	conn, err := pgurl.Connect(ctx, primary.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	// remote_apply: the database the stack makes exists on the standby
	// when its creation returns. pgx tries no further host after one
	// that says the database does not exist (3D000), so with the standby
	// named first, a creation only flushed there failed the migration.
	for _, sql := range []string{`ALTER SYSTEM SET synchronous_standby_names = 'standby'`,
		`ALTER SYSTEM SET synchronous_commit = 'remote_apply'`, `SELECT pg_reload_conf()`} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(60 * time.Second); ; {
		var sync bool
		_ = conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_replication WHERE application_name = 'standby' AND sync_state = 'sync')`).Scan(&sync)
		if sync {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the standby never became synchronous")
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = conn.Close(ctx)

	u, err := url.Parse(primary.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = standby.Addr() + "," + primary.Addr()
	q := u.Query()
	q.Set("target_session_attrs", "read-write")
	u.RawQuery = q.Encode()
	s := testenv.NewStack(t, testenv.Options{Database: testenv.Setup{Server: u.String()}})
	tok := s.Tokens[testenv.TenantA]
	ticket := func(key, title string) testenv.Request {
		return testenv.Request{Method: "POST", Path: "/v1/tickets", Key: key, Token: tok, Body: `{"customer_id":"c-1","title":"` + title + `"}`}
	}
	first := s.Do(ticket("multi-1", "before"))
	if first.Status != 201 {
		t.Fatalf("before the failover: %d %s", first.Status, first.Body)
	}

	if err := primary.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	var second testenv.Response
	for deadline := time.Now().Add(60 * time.Second); ; {
		second, err = testenv.Send(s.URL, ticket("multi-2", "after"))
		if err == nil && second.Status == 201 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no intent served within 60 s of the promotion: %d %s %v", second.Status, second.Body, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	replay := s.Do(ticket("multi-1", "before"))
	if replay.Status != 201 || replay.Header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(replay.Body, first.Body) {
		t.Fatalf("the first intent's replay on the new primary: %d replayed %q\n%s\nwant its first answer\n%s",
			replay.Status, replay.Header.Get("Idempotent-Replayed"), replay.Body, first.Body)
	}
	if n := testenv.Count(t, s.Pool, "ticket", ""); n != 2 {
		t.Fatalf("%d tickets on the new primary, want 2", n)
	}
}
