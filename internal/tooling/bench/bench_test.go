package bench_test

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemflow/idemflow/internal/tooling/bench"
	"github.com/idemflow/idemflow/internal/tooling/roundtrip"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
)

// The tool itself: every case and reference runs through the real gateway,
// answers what the contract says, and the ratios and round trips are
// filled in. (No speed is asserted: that is what the printed ratios are
// for.) The stack and the workflow reference share one Temporal client
// here, and one RPC counter: the cases run one after the other, and each
// row counts what happened during its own.
func TestBenchMeasuresEveryCaseBesideItsReferences(t *testing.T) {
	sql, rpcs := &roundtrip.SQL{}, &roundtrip.RPCs{}
	s := testenv.NewStack(t, testenv.Options{Wire: sql, Client: rpcs.ClientOptions()})
	rep, err := bench.Run(context.Background(), bench.Config{
		URL: s.URL, Token: s.Tokens[testenv.TenantA], TenantID: testenv.TenantA, DatabaseURL: s.DatabaseURL,
		Temporal: s.Temporal, Duration: 500 * time.Millisecond, Clients: []int{1, 4}, Rounds: 2,
		SQL: sql, RPCs: rpcs, RefRPCs: rpcs, Account: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	rep.Print(&out)
	t.Log("\n" + out.String())
	dbName := s.Pool.Config().ConnConfig.Database
	want := map[string]int{}
	for _, row := range rep.Rows {
		want[row.Case+"/"+row.Target]++
		if row.Requests == 0 || row.Errors != 0 {
			t.Errorf("%s %s x%d: %d requests, %d errors %v", row.Case, row.Target, row.Clients, row.Requests, row.Errors, row.Statuses)
		}
		ok := 201
		if strings.Contains(row.Case, "422") {
			ok = 422
		}
		if row.Statuses[ok]+row.Statuses[202] != row.Requests {
			t.Errorf("%s %s x%d: statuses %v, want %d", row.Case, row.Target, row.Clients, row.Statuses, ok)
		}
		if row.Target == "idemflow" && !strings.Contains(row.Case, "422") && row.RatioTo == "" {
			t.Errorf("%s x%d has no ratio", row.Case, row.Clients)
		}
		// Round trips per request: a new ticket's two SQL (the claim and
		// one pipeline; a few preparations on new connections), its
		// start and its task's completion; the bare workflow's start,
		// completion and result (a history long poll); the PostgreSQL
		// reference's statements. A new key is new at every concurrency:
		// were the keys of the run with 1 client sent again with 4, a new
		// ticket would cost less than its two.
		var sqlIn, rpcsIn [2]float64
		switch row.Case + "/" + row.Target {
		case "ticket, new key/idemflow":
			sqlIn, rpcsIn = [2]float64{2, 2.5}, [2]float64{1.9, 2.5}
		case "ticket, new key/bare Temporal workflow":
			sqlIn, rpcsIn = [2]float64{0, 0}, [2]float64{3, 3.5}
		case "ticket, new key/PostgreSQL only":
			sqlIn, rpcsIn = [2]float64{1, 8}, [2]float64{0, 0}
		case "ticket, replay/idemflow":
			sqlIn, rpcsIn = [2]float64{0, 0.5}, [2]float64{0, 0}
		default:
			sqlIn, rpcsIn = [2]float64{0, 10}, [2]float64{0, 10}
		}
		// What a request cost: CPU, and PostgreSQL's writing
		// transactions (a new ticket's claim and step at least; a replay
		// none of its own, only what Temporal's server writes meanwhile),
		// and, where the server loads pg_stat_statements, the idemflow
		// database's statements.
		a := row.Account
		if a == nil || a.CPU <= 0 || a.Busy <= 0 {
			t.Errorf("%s %s x%d: account %+v", row.Case, row.Target, row.Clients, a)
		} else if key := row.Case + "/" + row.Target; key == "ticket, new key/idemflow" || key == "ticket, replay/idemflow" {
			xacts := [2]float64{2, 20}
			if key == "ticket, replay/idemflow" {
				xacts = [2]float64{0, 1}
			}
			if a.Xacts < xacts[0] || a.Xacts > xacts[1] {
				t.Errorf("%s x%d: %.2f writing transactions per request, want %v", key, row.Clients, a.Xacts, xacts)
			}
			if i := slices.IndexFunc(a.Databases, func(d bench.Database) bool { return d.Counted && d.Name == dbName }); i >= 0 {
				if st := a.Databases[i].Statements; key == "ticket, new key/idemflow" && st < 4 {
					t.Errorf("%s x%d: %.1f statements per request in %s, want the claim's and the step's", key, row.Clients, st, dbName)
				}
			} else {
				t.Logf("%s x%d: no statements counted in %s (the server does not load pg_stat_statements): %+v", key, row.Clients, dbName, a.Databases)
			}
		}
		if !row.Counted || row.SQL < sqlIn[0] || row.SQL > sqlIn[1] || row.RPCs < rpcsIn[0] || row.RPCs > rpcsIn[1] {
			t.Errorf("%s %s x%d: counted %v, %.2f SQL and %.2f RPCs per request, want SQL in %v and RPCs in %v",
				row.Case, row.Target, row.Clients, row.Counted, row.SQL, row.RPCs, sqlIn, rpcsIn)
		}
	}
	for _, k := range []string{"ticket, new key/idemflow", "ticket, new key/bare Temporal workflow", "ticket, new key/PostgreSQL only",
		"ticket, replay/idemflow", "ticket, replay/PostgreSQL only", "order, new key/idemflow", "ticket, key reused (422)/idemflow"} {
		if want[k] != 2 {
			t.Errorf("%s: %d rows, want one per client count", k, want[k])
		}
	}
	if rep.PeakRSS <= 0 || !strings.Contains(out.String(), "peak RSS") {
		t.Errorf("peak RSS %d", rep.PeakRSS)
	}
}

// A run through delayed links says so: each link's asked and measured
// round trip, and that the bench process holds idemflow's replica.
func TestAReportOverDelayedLinksStatesThem(t *testing.T) {
	rep := bench.Report{Links: []bench.Link{{Name: "PostgreSQL", Asked: 2 * time.Millisecond, Measured: 2350 * time.Microsecond}}, PeakRSS: 1 << 20}
	var out bytes.Buffer
	rep.Print(&out)
	for _, want := range []string{"link to PostgreSQL: asked +2.00ms per round trip, measured +2.35ms", "references and idemflow's replica) 1 MiB"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report lacks %q:\n%s", want, out.String())
		}
	}
}
