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
	// Duration of each case and target; Clients are the concurrencies
	// measured.
	Duration time.Duration
	Clients  []int
	// Rounds splits each target's Duration into slices taken in turn with
	// the other targets of its case (default 4; see compare).
	Rounds int
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
	// Account, when set, accounts for every slice's cost on this machine
	// and in PostgreSQL (see accountant), reported per request, and, with
	// MetricsURL (idemflow's /metrics), the time its requests spent in
	// each stage.
	Account    bool
	MetricsURL string
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
	// the case it is compared with; zero for reference rows. RatioLow and
	// RatioHigh are the lowest and highest of the rounds' own ratios: how
	// far the machine's noise moved it during the run.
	Ratio               float64
	RatioLow, RatioHigh float64
	RatioTo             string
	// SQL and RPCs are the round trips to PostgreSQL and the Temporal
	// RPCs per request, where Counted.
	SQL, RPCs float64
	Counted   bool
	// Account is what its requests cost the machine and PostgreSQL, where
	// the run accounted for it.
	Account *Account
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

// compare measures targets side by side at one concurrency. Each is
// first warmed up, unmeasured (new connections, the pool's growth, the
// tail of the case before); then each runs rounds slices of d/rounds, the
// targets taken in turn and in reverse order every other round (A B, B A,
// A B, …). Whatever the machine does meanwhile (a checkpoint, a vacuum,
// the server's background tasks) falls on every target alike, not on
// whichever one a single slice each happened to be measuring: three runs
// of one build gave a new ticket at 64 clients 0.78x, 0.94x and 0.99x
// the bare workflow that way. The first row's ratio is to the second's.
func compare(ctx context.Context, bc string, targets []target, clients, rounds int, d time.Duration, acct *accountant, tick func()) []Row {
	rounds = max(rounds, 1)
	slice := d / time.Duration(rounds)
	warm := min(time.Second, slice)
	// Each client's requests are numbered across the slices, so that a
	// key built from the number is new in every slice.
	next := make([][]int, len(targets))
	run := func(i int, d time.Duration) sample {
		t, seq := targets[i], next[i]
		return load(ctx, clients, d, func(ctx context.Context, c int) (int, error) {
			n := seq[c]
			seq[c]++
			return t.do(ctx, clientID(clients, c), n)
		})
	}
	for i := range targets {
		next[i] = make([]int, clients)
		run(i, warm)
		tick()
	}
	samples := make([][]sample, len(targets))
	order := make([]int, len(targets))
	for r := range rounds {
		for k := range order {
			order[k] = k
		}
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, i := range order {
			sql0, rpcs0 := targets[i].roundTrips()
			end := acct.measure(ctx)
			s := run(i, slice)
			s.usage = end()
			sql1, rpcs1 := targets[i].roundTrips()
			s.sql, s.rpcs = sql1-sql0, rpcs1-rpcs0
			samples[i] = append(samples[i], s)
			tick()
		}
	}
	rows := make([]Row, len(targets))
	for i, t := range targets {
		row := Row{Case: bc, Target: t.name, Clients: clients, Stats: merge(samples[i])}
		if (t.sql != nil || t.rpcs != nil) && row.Requests > 0 {
			var sql, rpcs int
			for _, s := range samples[i] {
				sql, rpcs = sql+s.sql, rpcs+s.rpcs
			}
			row.Counted = true
			row.SQL, row.RPCs = float64(sql)/float64(row.Requests), float64(rpcs)/float64(row.Requests)
		}
		if acct != nil {
			var u usage
			for _, s := range samples[i] {
				u = u.add(s.usage)
			}
			row.Account = account(u, row.Requests, acct.gatewayPID > 0)
		}
		rows[i] = row
	}
	if len(rows) > 1 && rows[1].Throughput > 0 {
		rows[0].Ratio, rows[0].RatioTo = rows[0].Throughput/rows[1].Throughput, targets[1].name
		for r := range rounds {
			ours, theirs := samples[0][r].throughput(), samples[1][r].throughput()
			if theirs <= 0 {
				continue
			}
			q := ours / theirs
			if rows[0].RatioLow == 0 || q < rows[0].RatioLow {
				rows[0].RatioLow = q
			}
			rows[0].RatioHigh = max(rows[0].RatioHigh, q)
		}
	}
	return rows
}

// roundTrips are the target's counted round trips so far.
func (t target) roundTrips() (sql, rpcs int) {
	if t.sql != nil {
		sql = t.sql.Total()
	}
	if t.rpcs != nil {
		rpcs = t.rpcs.Total()
	}
	return sql, rpcs
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
	var acct *accountant
	if cfg.Account {
		if acct, err = newAccountant(ctx, pool, cfg.GatewayPID); err != nil {
			return Report{}, err
		}
		acct.metricsURL = cfg.MetricsURL
		defer acct.close(context.WithoutCancel(ctx))
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

	rounds := cfg.Rounds
	if rounds <= 0 {
		rounds = 4
	}
	steps := 0
	for _, bc := range cases {
		steps += len(cfg.Clients) * (1 + len(bc.references)) * (1 + rounds)
	}
	bar := progress.New(cfg.Progress, "bench", steps)
	tick := func() { bar.Add(1) }

	rep := Report{Links: cfg.Links}
	for _, bc := range cases {
		for _, clients := range cfg.Clients {
			if bc.prepare != nil {
				if err := bc.prepare(ctx, clients); err != nil {
					return rep, fmt.Errorf("bench: prepare %s: %w", bc.name, err)
				}
			}
			rep.Rows = append(rep.Rows, compare(ctx, bc.name, append([]target{bc.idemflow}, bc.references...), clients, rounds, cfg.Duration, acct, tick)...)
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
	Requests int
	Errors   int // transport errors and unexpected statuses (5xx)
	Accepted int // 202: the intent was still running after the wait
	Statuses map[int]int
	// Throughput is answers per second while the load ran: those that
	// arrived within the slices, over the slices' length. The answers
	// to requests still open when a slice ended (each is measured to
	// its end) count in the latencies, not here: while they drain, fewer
	// clients are sending, and a slower target would be charged for it.
	Throughput float64
	P50, P99   time.Duration
	P999       time.Duration
}

// sample is what one slice of load gave.
type sample struct {
	statuses                   map[int]int
	errors, accepted, inWindow int
	lat                        []time.Duration
	window, elapsed            time.Duration
	sql, rpcs                  int
	usage                      usage
}

// merge sums slices into one case's numbers.
func merge(samples []sample) Stats {
	st := Stats{Statuses: map[int]int{}}
	var all sample
	for _, s := range samples {
		for code, n := range s.statuses {
			st.Statuses[code] += n
		}
		st.Errors += s.errors
		st.Accepted += s.accepted
		all.lat = append(all.lat, s.lat...)
		all.inWindow += s.inWindow
		all.window += s.window
		all.elapsed += s.elapsed
	}
	st.Requests = len(all.lat)
	if st.Requests == 0 {
		return st
	}
	slices.Sort(all.lat)
	st.P50, st.P99, st.P999 = quantile(all.lat, 0.50), quantile(all.lat, 0.99), quantile(all.lat, 0.999)
	st.Throughput = all.throughput()
	return st
}

// throughput is the answers within the slice over its length.
func (s sample) throughput() float64 {
	switch {
	case s.inWindow > 0:
		return float64(s.inWindow) / s.window.Seconds()
	case len(s.lat) > 0:
		// Not one answer within the slice (a loaded machine, a short
		// run): each client's first request was still measured.
		return float64(len(s.lat)) / s.elapsed.Seconds()
	}
	return 0
}

// load runs clients concurrent loops of do for d, each call one request.
// Each client's requests begun before d ends are measured to their end,
// and each client measures at least one: on a loaded machine a case gives
// a slow number, never none.
func load(ctx context.Context, clients int, d time.Duration, do func(ctx context.Context, client int) (int, error)) sample {
	start := time.Now()
	deadline := start.Add(d)
	var mu sync.Mutex
	s := sample{statuses: map[int]int{}, window: d}
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ctx.Err() == nil && (n == 0 || time.Now().Before(deadline)); n++ {
				t0 := time.Now()
				status, err := do(ctx, c)
				end := time.Now()
				if ctx.Err() != nil {
					return // the run was stopped: not counted
				}
				mu.Lock()
				s.statuses[status]++
				switch {
				case err != nil || status >= 500:
					s.errors++
				case status == http.StatusAccepted:
					s.accepted++
				}
				if !end.After(deadline) {
					s.inWindow++
				}
				s.lat = append(s.lat, end.Sub(t0))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	s.elapsed = time.Since(start)
	return s
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
			ratio = fmt.Sprintf("%.2fx %s (rounds %.2f-%.2f)", row.Ratio, row.RatioTo, row.RatioLow, row.RatioHigh)
		}
		sql, rpcs := "-", "-"
		if row.Counted {
			sql, rpcs = fmt.Sprintf("%.2f", row.SQL), fmt.Sprintf("%.2f", row.RPCs)
		}
		fmt.Fprintf(w, "%-26s %7d  %-24s %9.0f %9s %9s %9s %6d %6d %5s %5s  %s\n",
			row.Case, row.Clients, row.Target, row.Throughput, ms(row.P50), ms(row.P99), ms(row.P999), row.Accepted, row.Errors, sql, rpcs, ratio)
	}
	fmt.Fprintln(w, "ratio: throughput over the reference's; each case runs its targets in turn, rounds of slices after a warm-up, and (rounds a-b) are the lowest and highest round's own ratio")
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
	r.printAccounts(w)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond)) }

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }
