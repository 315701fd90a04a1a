// Package bench measures idemflow through its real gateway beside two
// references run in the same process, on the same machine, against the same
// Temporal server and PostgreSQL, by the same load generator: a bare
// Temporal workflow (eager start, one no-op local activity) and a
// PostgreSQL-only Idempotency-Key implementation (claim,
// execute, complete; a replay locks the key's row, as a typical middleware
// does). Absolute numbers depend on the machine; the ratios are what it
// reports on.
package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/idemflow/idemflow/internal/ops/orders"
	"github.com/idemflow/idemflow/internal/ops/tickets"
	"github.com/idemflow/idemflow/internal/tooling/progress"
	"github.com/idemflow/idemflow/internal/tooling/roundtrip"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"
)

// Config says what to measure and where.
type Config struct {
	// URL and Token reach idemflow's gateway; TenantID is the token's.
	URL, Token, TenantID string
	// DatabaseURL is idemflow's database: the PostgreSQL reference keeps
	// its tables in a schema of its own there, and orders are restocked.
	DatabaseURL string
	// Temporal is a client of the server idemflow runs on; the workflow
	// reference runs its own worker on its own task queue through it.
	Temporal client.Client
	// Duration of each case; Clients are the concurrencies measured.
	Duration time.Duration
	Clients  []int
	// GatewayPID, when known, is the gateway's process, for its peak RSS.
	GatewayPID int
	// Progress, when set, shows a progress bar there.
	Progress io.Writer
	// Links, when set, are the delayed links the run goes through, as
	// the report states them.
	Links []Link
	// SQL and RPCs, when set, count idemflow's round trips to PostgreSQL
	// (its pool, at the wire) and its Temporal RPCs: its rows then report
	// them per request. They can be counted only on a replica in this
	// process (Links).
	SQL  *roundtrip.SQL
	RPCs *roundtrip.RPCs
	// RefRPCs, when set, counts the RPCs of Temporal, the client the
	// workflow reference runs on, so that its rows report them too. The
	// PostgreSQL reference's round trips are always counted.
	RefRPCs *roundtrip.RPCs
}

// Link is a delayed link to a dependency: the round trip it was asked to
// add, and the one measured through it.
type Link struct {
	Name            string
	Asked, Measured time.Duration
}

// Row is one measured case.
type Row struct {
	Case    string // what was sent
	Target  string // idemflow, or a reference
	Clients int
	Stats
	// Ratio is the idemflow row's throughput over the reference's, for
	// the case it is compared with; zero for reference rows.
	Ratio   float64
	RatioTo string
	// SQL and RPCs are the round trips to PostgreSQL and the Temporal
	// RPCs per request, where Counted.
	SQL, RPCs float64
	Counted   bool
}

// Report is a whole run.
type Report struct {
	Rows []Row
	// PeakRSS in bytes: this process (load generator and references), and
	// the gateway's where its PID was known.
	PeakRSS, GatewayPeakRSS int64
	// Links are the delayed links of the run, if any.
	Links []Link
}

// target is something the load generator can call: one call per intent.
type target struct {
	name string
	do   func(ctx context.Context, client, n int) (int, error)
	// sql and rpcs count the target's round trips, where they can be; a
	// target counted by one of them makes none of the other kind.
	sql  *roundtrip.SQL
	rpcs *roundtrip.RPCs
}

// clientID names client c of a run with clients concurrent ones, in keys
// and bodies: a case run again with more clients must not replay the keys
// of its run with fewer.
func clientID(clients, c int) int { return clients<<20 | c }

// measure runs t's load, with its round trips per request where counted.
func (t target) measure(ctx context.Context, bc string, clients int, d time.Duration, tick func()) Row {
	total := func() (sql, rpcs int) {
		if t.sql != nil {
			sql = t.sql.Total()
		}
		if t.rpcs != nil {
			rpcs = t.rpcs.Total()
		}
		return sql, rpcs
	}
	sql0, rpcs0 := total()
	row := Row{Case: bc, Target: t.name, Clients: clients, Stats: load(ctx, clients, d, func(ctx context.Context, c, n int) (int, error) {
		return t.do(ctx, clientID(clients, c), n)
	}, tick)}
	sql1, rpcs1 := total()
	if (t.sql != nil || t.rpcs != nil) && row.Requests > 0 {
		row.Counted = true
		row.SQL, row.RPCs = float64(sql1-sql0)/float64(row.Requests), float64(rpcs1-rpcs0)/float64(row.Requests)
	}
	return row
}

// Run measures every case and returns the report.
func Run(ctx context.Context, cfg Config) (Report, error) {
	if cfg.Duration <= 0 {
		cfg.Duration = 10 * time.Second
	}
	if len(cfg.Clients) == 0 {
		cfg.Clients = []int{1, 64}
	}
	poolCfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return Report{}, fmt.Errorf("bench: database: %w", err)
	}
	// The PostgreSQL reference's round trips; the restock is not one.
	refSQL := &roundtrip.SQL{}
	refSQL.Pool(poolCfg)
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return Report{}, fmt.Errorf("bench: database: %w", err)
	}
	defer pool.Close()
	pgRef, err := newPGReference(ctx, pool)
	if err != nil {
		return Report{}, err
	}
	wfRef, err := newWorkflowReference(cfg.Temporal)
	if err != nil {
		return Report{}, err
	}
	defer wfRef.stop()
	refs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/pg":
			pgRef.ServeHTTP(w, r)
		default:
			wfRef.ServeHTTP(w, r)
		}
	}))
	defer refs.Close()

	run := uuid.NewString()[:8]
	post := newPoster()
	ticket := func(c, n int) string {
		return fmt.Sprintf(`{"customer_id":"bench-%d","title":"bench ticket %d"}`, c, n)
	}
	newKey := func(prefix string, c, n int) string { return fmt.Sprintf("bench-%s-%s-%d-%d", run, prefix, c, n) }
	idemflow := func(path string, key func(c, n int) string, body func(c, n int) string) target {
		return target{name: "idemflow", sql: cfg.SQL, rpcs: cfg.RPCs, do: func(ctx context.Context, c, n int) (int, error) {
			return post(ctx, cfg.URL+path, cfg.Token, key(c, n), body(c, n))
		}}
	}
	ref := func(name, path string, key, body func(c, n int) string) target {
		t := target{name: name, do: func(ctx context.Context, c, n int) (int, error) {
			return post(ctx, refs.URL+path, "", key(c, n), body(c, n))
		}}
		// Each reference uses one of the two: no RPC to Temporal from the
		// PostgreSQL one, no SQL from the workflow's.
		if path == "/pg" {
			t.sql = refSQL
		} else {
			t.rpcs = cfg.RefRPCs
		}
		return t
	}
	fixedTicket := func(c, _ int) string { return ticket(c, 0) }
	replayKey := func(prefix string) func(c, n int) string {
		return func(c, _ int) string { return newKey(prefix, c, 0) }
	}
	type benchCase struct {
		name     string
		idemflow target
		// references are measured beside it; the ratio is to the first.
		references []target
		prepare    func(ctx context.Context, clients int) error
	}
	bare := ref("bare Temporal workflow", "/workflow", func(c, n int) string { return newKey("wf", c, n) }, ticket)
	pgNew := ref("PostgreSQL only", "/pg", func(c, n int) string { return newKey("pg", c, n) }, ticket)
	pgReplay := ref("PostgreSQL only", "/pg", replayKey("pg-replay"), fixedTicket)
	cases := []benchCase{
		{name: "ticket, new key", idemflow: idemflow(tickets.Create.Route, func(c, n int) string { return newKey("t", c, n) }, ticket), references: []target{bare, pgNew}},
		{name: "ticket, replay", idemflow: idemflow(tickets.Create.Route, replayKey("t-replay"), fixedTicket), references: []target{pgReplay},
			prepare: func(ctx context.Context, clients int) error {
				for c := range clients {
					c := clientID(clients, c)
					if _, err := post(ctx, cfg.URL+tickets.Create.Route, cfg.Token, newKey("t-replay", c, 0), ticket(c, 0)); err != nil {
						return err
					}
					if _, err := post(ctx, refs.URL+"/pg", "", newKey("pg-replay", c, 0), ticket(c, 0)); err != nil {
						return err
					}
				}
				return nil
			}},
		{name: "order, new key", idemflow: idemflow(orders.Create.Route, func(c, n int) string { return newKey("o", c, n) },
			func(c, _ int) string {
				return fmt.Sprintf(`{"customer_id":"bench-%d","items":[{"sku":"SKU-CABLE","quantity":1}]}`, c)
			}), references: []target{bare},
			prepare: func(ctx context.Context, _ int) error {
				return orders.Restock(ctx, pool, cfg.TenantID, "SKU-CABLE", 1_000_000)
			}},
		{name: "ticket, key reused (422)", idemflow: idemflow(tickets.Create.Route, replayKey("t-replay"),
			func(c, _ int) string { return ticket(c, 1) })},
	}

	steps := 0
	for _, bc := range cases {
		steps += len(cfg.Clients) * (1 + len(bc.references))
	}
	bar := progress.New(cfg.Progress, "bench", steps*int(cfg.Duration/time.Second))
	tick := func() { bar.Add(1) }

	rep := Report{Links: cfg.Links}
	for _, bc := range cases {
		for _, clients := range cfg.Clients {
			if bc.prepare != nil {
				if err := bc.prepare(ctx, clients); err != nil {
					return rep, fmt.Errorf("bench: prepare %s: %w", bc.name, err)
				}
			}
			row := bc.idemflow.measure(ctx, bc.name, clients, cfg.Duration, tick)
			var refRows []Row
			for i, ref := range bc.references {
				refRow := ref.measure(ctx, bc.name, clients, cfg.Duration, tick)
				if i == 0 && refRow.Throughput > 0 {
					row.Ratio, row.RatioTo = row.Throughput/refRow.Throughput, ref.name
				}
				refRows = append(refRows, refRow)
			}
			rep.Rows = append(append(rep.Rows, row), refRows...)
			if ctx.Err() != nil {
				return rep, ctx.Err()
			}
		}
	}
	bar.Finish()
	rep.PeakRSS = peakRSS(os.Getpid())
	if cfg.GatewayPID > 0 {
		rep.GatewayPeakRSS = peakRSS(cfg.GatewayPID)
	}
	return rep, nil
}

// Stats are one case's numbers.
type Stats struct {
	Requests   int
	Errors     int // transport errors and unexpected statuses (5xx)
	Accepted   int // 202: the intent was still running after the wait
	Statuses   map[int]int
	Throughput float64 // answered requests per second
	P50, P99   time.Duration
	P999       time.Duration
}

// load runs clients concurrent loops of do for d, each call one request.
// load runs clients for d. Each client's requests begun before d ends are
// measured to their end, and each client measures at least one: on a
// loaded machine a case gives a slow number, never none.
func load(ctx context.Context, clients int, d time.Duration, do func(ctx context.Context, client, n int) (int, error), tick func()) Stats {
	deadline := time.Now().Add(d)
	var mu sync.Mutex
	var lat []time.Duration
	st := Stats{Statuses: map[int]int{}}
	start := time.Now()
	stopTick := make(chan struct{})
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				tick()
			case <-stopTick:
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ctx.Err() == nil && (n == 0 || time.Now().Before(deadline)); n++ {
				t0 := time.Now()
				status, err := do(ctx, c, n)
				took := time.Since(t0)
				if ctx.Err() != nil {
					return // the run was stopped: not counted
				}
				mu.Lock()
				st.Requests++
				st.Statuses[status]++
				switch {
				case err != nil || status >= 500:
					st.Errors++
				case status == http.StatusAccepted:
					st.Accepted++
				}
				lat = append(lat, took)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(stopTick)
	elapsed := time.Since(start)
	slices.Sort(lat)
	if len(lat) > 0 {
		st.P50, st.P99, st.P999 = quantile(lat, 0.50), quantile(lat, 0.99), quantile(lat, 0.999)
		st.Throughput = float64(len(lat)) / elapsed.Seconds()
	}
	return st
}

// newPoster returns the load generator's POST: one intent, its status.
func newPoster() func(ctx context.Context, url, token, key, body string) (int, error) {
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: 70 * time.Second}
	return func(ctx context.Context, url, token, key, body string) (int, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
		if err != nil {
			return 0, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(q * float64(len(sorted)-1))
	return sorted[i]
}

// peakRSS reads a process's high-water resident set size (Linux), 0 where
// it cannot.
func peakRSS(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// Print writes the report as a table.
func (r Report) Print(w io.Writer) {
	for _, l := range r.Links {
		fmt.Fprintf(w, "link to %s: asked +%s per round trip, measured +%s (idemflow's serve replica in this process and the references both go through it)\n",
			l.Name, ms(l.Asked), ms(l.Measured))
	}
	fmt.Fprintf(w, "%-26s %7s  %-24s %9s %9s %9s %9s %6s %6s %5s %5s  %s\n",
		"case", "clients", "target", "req/s", "p50", "p99", "p99.9", "202", "errors", "SQL", "RPC", "ratio")
	for _, row := range r.Rows {
		ratio := ""
		if row.RatioTo != "" {
			ratio = fmt.Sprintf("%.2fx %s", row.Ratio, row.RatioTo)
		}
		sql, rpcs := "-", "-"
		if row.Counted {
			sql, rpcs = fmt.Sprintf("%.2f", row.SQL), fmt.Sprintf("%.2f", row.RPCs)
		}
		fmt.Fprintf(w, "%-26s %7d  %-24s %9.0f %9s %9s %9s %6d %6d %5s %5s  %s\n",
			row.Case, row.Clients, row.Target, row.Throughput, ms(row.P50), ms(row.P99), ms(row.P999), row.Accepted, row.Errors, sql, rpcs, ratio)
	}
	fmt.Fprintln(w, "SQL, RPC: round trips to PostgreSQL (at the wire) and Temporal RPCs (long polls left out) per request, where counted (-: idemflow in another process; see --pg-latency)")
	what := "load generator and references"
	if len(r.Links) > 0 {
		what = "load generator, references and idemflow's replica"
	}
	fmt.Fprintf(w, "peak RSS: bench process (%s) %s", what, mib(r.PeakRSS))
	if r.GatewayPeakRSS > 0 {
		fmt.Fprintf(w, ", idemflow process %s", mib(r.GatewayPeakRSS))
	}
	fmt.Fprintln(w)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond)) }

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }
