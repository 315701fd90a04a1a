package bench

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// A PostgreSQL process is charged to the database its title names, and
// the server's own processes to none.
func TestTitleDatabase(t *testing.T) {
	for title, want := range map[string]string{
		"postgres: postgres idemflow_temporal 127.0.0.1(44384) idle":   "idemflow_temporal",
		"postgres: app idemflow [local] INSERT":                        "idemflow",
		"postgres: alice shop ::1(5678) idle in transaction":           "shop",
		"postgres: walwriter ":                                         "",
		"postgres: autovacuum worker idemflow":                         "",
		"postgres: logical replication launcher ":                      "",
		"/usr/lib/postgresql/15/bin/postgres -D /tmp/pg -p 54329 -c x": "",
	} {
		if got := titleDatabase(title); got != want {
			t.Errorf("titleDatabase(%q) = %q, want %q", title, got, want)
		}
	}
}

// The accounting sums a target's slices, divides by its requests, and,
// where the machine was busy throughout, sets the ratio its CPU per
// request predicts beside the measured one.
func TestAccountsAddUpPerRequest(t *testing.T) {
	ms := time.Millisecond
	slice := func(busy, gateway time.Duration, db time.Duration) usage {
		return usage{busy: busy, total: busy + busy/49, cores: 2, gateway: gateway, postgres: db + ms,
			backends: map[string]time.Duration{"idemflow": db, "": ms},
			dbs:      map[string]dbUsage{"idemflow": {calls: 90, commits: 20, exec: 4 * ms, walBytes: 4096}},
			waits:    map[string]int{"IO:WALSync": 10, "CPU": 5}, samples: 10, xacts: 30,
			stages: map[string]stageUsage{"claim": {seconds: 0.02, count: 10}},
			pool:   map[string]float64{"acquire_count": 30, "acquire_duration_ns": 3e6, "empty_acquire": 1, "empty_acquire_wait_time_ns": 2e6}}
	}
	var ours, theirs usage
	for range 2 {
		ours = ours.add(slice(110*ms, 60*ms, 12*ms))
		theirs = theirs.add(slice(90*ms, 50*ms, 0))
	}
	a, b := account(ours, 20, true), account(theirs, 20, true)
	if a.CPU != 11*ms || a.Gateway != 6*ms || a.Xacts != 3 {
		t.Fatalf("per request: CPU %s, gateway %s, xacts %.1f; want 11ms, 6ms, 3", a.CPU, a.Gateway, a.Xacts)
	}
	if len(a.Databases) != 1 || a.Databases[0].Name != "idemflow" || a.Databases[0].CPU != 1200*time.Microsecond ||
		a.Databases[0].Statements != 9 || a.Databases[0].Commits != 2 || a.PostgresOwn != 100*time.Microsecond {
		t.Fatalf("databases %+v, own %s", a.Databases, a.PostgresOwn)
	}
	if p := a.Pool; p == nil || p.Acquires != 3 || p.Acquire != 300*time.Microsecond || p.Waited != 0.1 || p.Wait != 200*time.Microsecond {
		t.Fatalf("pool per request %+v, want 3 acquires taking 0.3ms, 0.1 waited for 0.2ms", p)
	}
	if len(a.Waits) != 2 || a.Waits[0].What != "IO:WALSync" || a.Waits[0].N != 1 || a.Active != 1.5 {
		t.Fatalf("waits %+v, active %.1f", a.Waits, a.Active)
	}
	rep := Report{Rows: []Row{
		{Case: "ticket", Target: "idemflow", Clients: 64, Ratio: 0.8, RatioTo: "bare", Account: a},
		{Case: "ticket", Target: "bare", Clients: 64, Account: b},
	}}
	var out bytes.Buffer
	rep.printAccounts(&out)
	for _, want := range []string{"bare's CPU per request over idemflow's predicts 0.82x; measured 0.80x",
		"claim 2.00ms (x1.00), pool: 3.00 acquires taking 0.30ms, 0.10 waited for a connection, 0.20ms"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the accounting does not say %q:\n%s", want, out.String())
		}
	}
}
