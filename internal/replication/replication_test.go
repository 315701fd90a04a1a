package replication_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemflow/idemflow/internal/pgurl"
	"github.com/idemflow/idemflow/internal/replication"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
	"github.com/jackc/pgx/v5"
)

// A real primary, then a real streaming standby of it (pg_basebackup):
// alone, the primary gets no warning (nothing could be promoted); with an
// asynchronous standby it gets one that names it; once
// synchronous_standby_names names the standby, commits survive its
// promotion and the warning goes; a session whose synchronous_commit is
// local does not wait for it, and is warned again.
func TestTheFailoverWarningFollowsTheStandbys(t *testing.T) {
	ctx := context.Background()
	primary := testenv.PrivatePostgres(t)
	conn, err := pgurl.Connect(ctx, primary.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	check := func(what string) replication.Report {
		t.Helper()
		r, err := replication.Check(ctx, conn)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %s; safe %v; warning %q", what, r.Summary(), r.Safe(), r.Warning())
		return r
	}

	if r := check("alone"); r.Safe() || r.Warning() != "" || len(r.Standbys) != 0 {
		t.Fatalf("a primary without standbys: %+v", r)
	}

	testenv.Standby(t, primary, "standby1")
	r := waitFor(t, check, "an asynchronous standby", func(r replication.Report) bool { return len(r.Standbys) == 1 && r.Standbys[0].State == "streaming" })
	if r.Safe() || !strings.Contains(r.Warning(), "no standby is synchronous") || !strings.Contains(r.Warning(), "standby1 (async)") {
		t.Fatalf("an asynchronous standby: safe %v, warning %q", r.Safe(), r.Warning())
	}

	for _, sql := range []string{`ALTER SYSTEM SET synchronous_standby_names = 'standby1'`, `SELECT pg_reload_conf()`} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	// A new session reads the reloaded settings.
	_ = conn.Close(ctx)
	if conn, err = pgurl.Connect(ctx, primary.AdminURL); err != nil {
		t.Fatal(err)
	}
	r = waitFor(t, check, "a synchronous standby", func(r replication.Report) bool { return len(r.Standbys) == 1 && r.Standbys[0].Sync == "sync" })
	if !r.Safe() || r.Warning() != "" {
		t.Fatalf("a synchronous standby: safe %v, warning %q", r.Safe(), r.Warning())
	}

	if _, err := conn.Exec(ctx, `SET synchronous_commit = local`); err != nil {
		t.Fatal(err)
	}
	if r := check("synchronous_commit local"); r.Safe() || !strings.Contains(r.Warning(), "synchronous_commit is local") {
		t.Fatalf("commits that do not wait: safe %v, warning %q", r.Safe(), r.Warning())
	}
}

func waitFor(t *testing.T, check func(string) replication.Report, what string, ok func(replication.Report) bool) replication.Report {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		r := check(what)
		if ok(r) {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: never seen: %+v", what, r)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// A primary that waits for a synchronous standby that is not there (a
// promoted standby that kept the old primary's synchronous_standby_names)
// cannot commit: Blocked says so, on a real server, and a session that
// does not wait (synchronous_commit local) or a server that names no
// standby is not blocked (issue #55: readiness and audit said healthy
// while every claim hung in SyncRep).
func TestBlockedSaysCommitsWaitForAStandbyThatIsNotThere(t *testing.T) {
	ctx := context.Background()
	primary := testenv.PrivatePostgres(t)
	connect := func() *pgx.Conn {
		t.Helper()
		conn, err := pgurl.Connect(ctx, primary.AdminURL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close(context.Background()) })
		return conn
	}
	conn := connect()
	r, err := replication.Check(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	if b := r.Blocked(); b != "" {
		t.Fatalf("a primary that names no standby: blocked %q", b)
	}
	for _, sql := range []string{`ALTER SYSTEM SET synchronous_standby_names = '*'`, `SELECT pg_reload_conf()`} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	conn = connect() // a new session reads the reloaded setting
	if r, err = replication.Check(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if b := r.Blocked(); !strings.Contains(b, "commits wait for a synchronous standby that is not there") {
		t.Fatalf("synchronous_standby_names '*' and no standby: blocked %q (%s)", b, r.Summary())
	}
	// It is true: a commit waits.
	wait, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := conn.Exec(wait, `CREATE TABLE blocked_probe (n int)`); err == nil {
		t.Fatal("a commit finished, though no synchronous standby is attached")
	}
	conn = connect()
	if _, err := conn.Exec(ctx, `SET synchronous_commit = local`); err != nil {
		t.Fatal(err)
	}
	if r, err = replication.Check(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if b := r.Blocked(); b != "" {
		t.Fatalf("a session with synchronous_commit local: blocked %q", b)
	}
}
