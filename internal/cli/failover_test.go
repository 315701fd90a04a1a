package cli

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/idemflow/idemflow/internal/metrics"
	"github.com/idemflow/idemflow/internal/pgurl"
	"github.com/idemflow/idemflow/internal/replication"
	"github.com/idemflow/idemflow/internal/tooling/devserver"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
)

// The operator is told, at every role's start and in 'idemflow audit',
// whether a commit idemflow acknowledged survives a failover: a real
// primary with a real asynchronous standby (pg_basebackup) gets a warning
// in the log, a 0 in idemflow_database_failover_safe and a WARNING line in
// an audit that still passes; once the standby is synchronous, none of
// them.
func TestStartAndAuditSayWhetherAFailoverKeepsAcknowledgedAnswers(t *testing.T) {
	ctx := context.Background()
	primary := testenv.PrivatePostgres(t)
	testenv.Standby(t, primary, "standby1")
	url, err := devserver.EnsureDatabase(ctx, primary.AdminURL, "idemflow")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if code := Run(ctx, []string{"migrate", "--database-url", url}, &out, &out); code != 0 {
		t.Fatalf("migrate: exit %d\n%s", code, &out)
	}

	start := func(want func(replication.Report) bool) (log string, safe, sync, async float64) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			conn, err := pgurl.Connect(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			r, err := replication.Check(ctx, conn)
			if err != nil {
				t.Fatal(err)
			}
			if want(r) {
				var buf bytes.Buffer
				reg := metrics.New()
				reportReplication(ctx, slog.New(slog.NewTextHandler(&buf, nil)), conn, reg)
				_ = conn.Close(ctx)
				return buf.String(), gauge(t, reg, "idemflow_database_failover_safe", ""), gauge(t, reg, "idemflow_database_standbys", "sync"), gauge(t, reg, "idemflow_database_standbys", "async")
			}
			_ = conn.Close(ctx)
			if time.Now().After(deadline) {
				t.Fatalf("the standby never reached the state the test waits for: %+v", r)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	audit := func() string {
		t.Helper()
		var out bytes.Buffer
		if code := Run(ctx, []string{"audit", "--database-url", url}, &out, &out); code != 0 {
			t.Fatalf("audit: exit %d\n%s", code, &out)
		}
		return out.String()
	}

	log, safe, sync, async := start(func(r replication.Report) bool { return len(r.Standbys) == 1 && r.Standbys[0].State == "streaming" })
	a := audit()
	t.Logf("asynchronous standby: start logged %q; failover_safe %v, standbys sync %v async %v; audit:\n%s", log, safe, sync, async, a)
	if !strings.Contains(log, "level=WARN") || !strings.Contains(log, "a failover can lose answers idemflow acknowledged") {
		t.Errorf("the start did not warn: %s", log)
	}
	if safe != 0 || sync != 0 || async != 1 {
		t.Errorf("metrics: failover_safe %v, sync %v, async %v; want 0, 0, 1", safe, sync, async)
	}
	if !strings.Contains(a, "WARNING: a failover can lose answers") || !strings.Contains(a, "healthy") {
		t.Errorf("the audit did not warn, or failed for it:\n%s", a)
	}

	conn, err := pgurl.Connect(ctx, primary.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{`ALTER SYSTEM SET synchronous_standby_names = 'standby1'`, `SELECT pg_reload_conf()`} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	_ = conn.Close(ctx)
	log, safe, sync, async = start(func(r replication.Report) bool { return len(r.Standbys) == 1 && r.Standbys[0].Sync == "sync" })
	a = audit()
	t.Logf("synchronous standby: start logged %q; failover_safe %v, standbys sync %v async %v; audit:\n%s", log, safe, sync, async, a)
	if strings.Contains(log, "level=WARN") || safe != 1 || sync != 1 || async != 0 || strings.Contains(a, "WARNING") {
		t.Errorf("a synchronous standby still warned, or its metrics are wrong")
	}
}

func gauge(t *testing.T, reg *metrics.Registry, name, kind string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if kind == "" || (len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == kind) {
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("%s{%s} is not exported", name, kind)
	return 0
}
