package bench_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemflow/idemflow/internal/bench"
	"github.com/idemflow/idemflow/internal/testenv"
)

// The tool itself: every case and reference runs through the real gateway,
// answers what the contract says, and the ratios are filled in. (No speed
// is asserted: that is what the printed ratios are for.)
func TestBenchMeasuresEveryCaseBesideItsReferences(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	rep, err := bench.Run(context.Background(), bench.Config{
		URL: s.URL, Token: s.Tokens[testenv.TenantA], TenantID: testenv.TenantA, DatabaseURL: s.DatabaseURL,
		Temporal: s.Temporal, Duration: 500 * time.Millisecond, Clients: []int{1, 4},
	})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	rep.Print(&out)
	t.Log("\n" + out.String())
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
