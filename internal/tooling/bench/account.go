package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idemflow/idemflow/internal/metrics"
	"github.com/idemflow/idemflow/starter"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// An accountant says what a slice of load cost, so that a ratio can be
// explained rather than only stated: the CPU the machine and each of its
// processes spent, the transactions and WAL PostgreSQL wrote, and what
// PostgreSQL's busy connections were waiting on. Throughput is bounded
// either by a resource every target shares (the CPU, when the machine is
// busy throughout: then a target's throughput is the cores over its CPU
// per intent) or by waits; the accounting shows which, and where.
//
// It reads Linux's /proc and PostgreSQL's own counters, so it describes
// this machine and the PostgreSQL server the bench reaches: when idemflow
// runs elsewhere, its CPU is not here to count.
type accountant struct {
	// db is the accountant's own connection, one at a time: its
	// process's CPU is left out of PostgreSQL's (pid).
	db  *pgx.Conn
	pid int
	// gatewayPID is idemflow's process (with the embedded Temporal server
	// under 'idemflow dev'); 0 when it is not on this machine.
	gatewayPID int
	// every is how often PostgreSQL's busy connections are sampled.
	every time.Duration
	// statements says pg_stat_statements can be read: each database's
	// statements, commits, time and WAL are then accounted for too.
	statements bool
	// metricsURL, when set, is idemflow's /metrics: the time its
	// requests spent in each stage (idemflow_intent_stage_seconds).
	metricsURL string
}

// newAccountant accounts through a connection of its own to the database
// pool reaches, reading pg_stat_statements where the server loads it (the
// dev stack's private server does), and creating its view in that database
// when the server loads it and the view is missing. close ends it.
func newAccountant(ctx context.Context, pool *pgxpool.Pool, gatewayPID int) (*accountant, error) {
	db, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, fmt.Errorf("bench: accountant's connection: %w", err)
	}
	a := &accountant{db: db, pid: int(db.PgConn().PID()), gatewayPID: gatewayPID, every: 50 * time.Millisecond}
	var loaded bool
	if db.QueryRow(ctx, `SELECT 'pg_stat_statements' = ANY(string_to_array(replace(current_setting('shared_preload_libraries'), ' ', ''), ','))`).
		Scan(&loaded) != nil || !loaded {
		return a, nil
	}
	if _, err := db.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		return a, nil
	}
	a.statements = true
	return a, nil
}

func (a *accountant) close(ctx context.Context) { _ = a.db.Close(ctx) }

// usage is what the machine and PostgreSQL had spent by one instant, or,
// as a difference, during a slice.
type usage struct {
	// busy and total are the machine's CPU time (all cores), busy and in
	// all; self, gateway and postgres are processes' CPU time: this one,
	// idemflow's, and PostgreSQL's (every process named postgres).
	busy, total, self, gateway, postgres time.Duration
	// idle (with iowait) and at are what a snapshot reads of the machine:
	// its busy and total time are worked out from them (see minus).
	idle  time.Duration
	at    time.Time
	cores int
	// xacts are PostgreSQL's transactions that wrote (each one takes a
	// transaction ID), in every database of the server; walBytes the WAL
	// it wrote.
	xacts, walBytes int64
	// waits counts, per sample, PostgreSQL's active connections by what
	// they waited on ("CPU" when nothing); samples is how many were taken.
	waits   map[string]int
	samples int
	// dbs are pg_stat_statements' sums per database, where read.
	dbs map[string]dbUsage
	// backends are the CPU time of PostgreSQL's processes by the database
	// they serve ("" for its own: the WAL writer, the checkpointer, …).
	backends map[string]time.Duration
	// stages are idemflow's idemflow_intent_stage_seconds, by stage: the
	// seconds and the count; pool its pool's pgxpool_* counters, by name.
	stages map[string]stageUsage
	pool   map[string]float64
}

// poolCounters are the pool's statistics bench reads (pgxpool_*, exported
// by metrics.Registry.WatchPool): acquires and their time, and those that
// waited for an empty pool and how long.
var poolCounters = []string{"acquire_count", "acquire_duration_ns", "empty_acquire", "empty_acquire_wait_time_ns"}

// stageNames are the starter's stages, in a submission's order.
var stageNames = []string{starter.StageClaim, starter.StageStart, starter.StageWait}

// stageUsage is one stage's seconds and count.
type stageUsage struct{ seconds, count float64 }

// dbUsage is what one database's statements did.
type dbUsage struct {
	calls, commits, walBytes int64
	exec                     time.Duration
}

// clockTick is the unit of /proc's CPU times: USER_HZ, 100 on every
// Linux architecture Go supports.
const clockTick = 10 * time.Millisecond

// measure starts accounting for a slice; the function it returns ends
// it and gives what the slice cost.
func (a *accountant) measure(ctx context.Context) func() usage {
	if a == nil {
		return func() usage { return usage{} }
	}
	before := a.snapshot(ctx)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	waits := map[string]int{}
	samples := 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(a.every)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if a.sampleWaits(ctx, waits) == nil {
					samples++
				}
			}
		}
	}()
	return func() usage {
		close(stop)
		wg.Wait()
		u := a.snapshot(ctx).minus(before)
		u.waits, u.samples = waits, samples
		return u
	}
}

// snapshot reads the counters now.
func (a *accountant) snapshot(ctx context.Context) usage {
	var u usage
	u.idle, u.cores = machineIdle()
	u.at = time.Now()
	u.self = processCPU(os.Getpid())
	if a.gatewayPID > 0 {
		u.gateway = processCPU(a.gatewayPID)
	}
	u.backends = postgresCPU(a.pid)
	for _, d := range u.backends {
		u.postgres += d
	}
	// The next transaction ID to be given out, and the WAL's end: both
	// exact at this instant, where pg_stat_database's counters reach
	// shared memory up to a second late.
	_ = a.db.QueryRow(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint,
		(pg_current_wal_lsn() - '0/0')::bigint`).Scan(&u.xacts, &u.walBytes)
	if a.statements {
		u.dbs = a.statementsByDatabase(ctx)
	}
	if a.metricsURL != "" {
		if v, _, err := readMetrics(ctx, a.metricsURL); err == nil {
			u.stages = map[string]stageUsage{}
			for _, name := range stageNames {
				series := `idemflow_intent_stage_seconds_%s{stage="` + name + `"}`
				u.stages[name] = stageUsage{seconds: v[fmt.Sprintf(series, "sum")], count: v[fmt.Sprintf(series, "count")]}
			}
			u.pool = map[string]float64{}
			for _, name := range poolCounters {
				u.pool[name] = v[`pgxpool_`+name+`{pool="`+metrics.PoolName+`"}`]
			}
		}
	}
	return u
}

// statementsByDatabase sums pg_stat_statements per database, the
// accountant's own statements aside. A statement's counters reach it as
// the statement ends.
func (a *accountant) statementsByDatabase(ctx context.Context) map[string]dbUsage {
	rows, err := a.db.Query(ctx, `SELECT d.datname, sum(s.calls)::bigint,
		coalesce(sum(s.calls) FILTER (WHERE upper(ltrim(s.query)) LIKE 'COMMIT%'), 0)::bigint,
		sum(s.wal_bytes)::bigint, sum(s.total_exec_time)::float8
		FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
		WHERE s.query NOT LIKE '%pg_stat_%' AND s.query NOT LIKE '%pg_current_%' AND s.query NOT LIKE '%shared_preload_libraries%'
		GROUP BY 1`)
	if err != nil {
		return nil
	}
	dbs := map[string]dbUsage{}
	var name string
	var d dbUsage
	var execMs float64
	if _, err := pgx.ForEachRow(rows, []any{&name, &d.calls, &d.commits, &d.walBytes, &execMs}, func() error {
		d.exec = time.Duration(execMs * float64(time.Millisecond))
		dbs[name] = d
		return nil
	}); err != nil {
		return nil
	}
	return dbs
}

// sampleWaits adds what PostgreSQL's active client connections (the
// sampler's own aside) wait on now.
func (a *accountant) sampleWaits(ctx context.Context, into map[string]int) error {
	rows, err := a.db.Query(ctx, `SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU'), count(*)
		FROM pg_stat_activity WHERE state = 'active' AND backend_type = 'client backend' AND pid <> pg_backend_pid()
		GROUP BY 1`)
	if err != nil {
		return err
	}
	var what string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&what, &n}, func() error {
		into[what] += n
		return nil
	})
	return err
}

func (u usage) minus(b usage) usage {
	// The kernel counts idle time exactly (as tickless CPUs sleep), and
	// busy time in ticks, which a lightly loaded machine's short bursts
	// slip between: what was not idle, of the cores' wall-clock time, was
	// busy.
	total := u.at.Sub(b.at) * time.Duration(u.cores)
	return usage{busy: total - (u.idle - b.idle), total: total, cores: u.cores, self: u.self - b.self, gateway: u.gateway - b.gateway,
		postgres: u.postgres - b.postgres, xacts: u.xacts - b.xacts, walBytes: u.walBytes - b.walBytes,
		// A process that started during the slice counts from 0.
		backends: diffed(u.backends, b.backends, func(x, y time.Duration) time.Duration { return x - y }),
		stages:   diffed(u.stages, b.stages, func(x, y stageUsage) stageUsage { return x.plus(y, -1) }),
		dbs:      diffed(u.dbs, b.dbs, func(x, y dbUsage) dbUsage { return x.plus(y, -1) }),
		pool:     diffed(u.pool, b.pool, func(x, y float64) float64 { return x - y }),
	}
}

// add sums two slices' usage.
func (u usage) add(o usage) usage {
	return usage{busy: u.busy + o.busy, total: u.total + o.total, cores: max(u.cores, o.cores), self: u.self + o.self, gateway: u.gateway + o.gateway,
		postgres: u.postgres + o.postgres, xacts: u.xacts + o.xacts, walBytes: u.walBytes + o.walBytes, samples: u.samples + o.samples,
		waits:    merged(u.waits, o.waits, func(x, y int) int { return x + y }),
		backends: merged(u.backends, o.backends, func(x, y time.Duration) time.Duration { return x + y }),
		stages:   merged(u.stages, o.stages, func(x, y stageUsage) stageUsage { return x.plus(y, 1) }),
		dbs:      merged(u.dbs, o.dbs, func(x, y dbUsage) dbUsage { return x.plus(y, 1) }),
		pool:     merged(u.pool, o.pool, func(x, y float64) float64 { return x + y }),
	}
}

func (x stageUsage) plus(y stageUsage, k float64) stageUsage {
	return stageUsage{seconds: x.seconds + k*y.seconds, count: x.count + k*y.count}
}

func (x dbUsage) plus(y dbUsage, k int64) dbUsage {
	return dbUsage{calls: x.calls + k*y.calls, commits: x.commits + k*y.commits, walBytes: x.walBytes + k*y.walBytes,
		exec: x.exec + time.Duration(k)*y.exec}
}

// merged is a and b key by key, each key's values combined by f (a
// missing one as zero); nil when both are.
func merged[V any](a, b map[string]V, f func(x, y V) V) map[string]V {
	if a == nil && b == nil {
		return nil
	}
	out := make(map[string]V, max(len(a), len(b)))
	for k, x := range a {
		out[k] = x
	}
	for k, y := range b {
		out[k] = f(out[k], y)
	}
	return out
}

// diffed is sub(a's, b's) for each key of a (b's missing as zero); nil
// when either was not read.
func diffed[V any](a, b map[string]V, sub func(x, y V) V) map[string]V {
	if a == nil || b == nil {
		return nil
	}
	out := make(map[string]V, len(a))
	for k, x := range a {
		out[k] = sub(x, b[k])
	}
	return out
}

// machineIdle reads /proc/stat: every core's idle time (iowait
// included), and how many cores it lists.
func machineIdle() (idle time.Duration, cores int) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		fields := strings.Fields(line)
		switch {
		case len(fields) > 5 && fields[0] == "cpu":
			// user nice system idle iowait …
			for _, f := range fields[4:6] {
				n, _ := strconv.ParseInt(f, 10, 64)
				idle += time.Duration(n) * clockTick
			}
		case len(fields) > 0 && strings.HasPrefix(fields[0], "cpu"):
			cores++
		}
	}
	return idle, cores
}

// processCPU is a process's user and system time, 0 when it cannot be
// read.
func processCPU(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command may hold spaces and parentheses: the fields start
	// after its last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * clockTick
}

// postgresCPU sums processCPU over the running processes named postgres,
// by the database each serves: a connection's process titles itself
// "postgres: user database host …"; the server's own processes (the
// postmaster, the WAL writer, the checkpointer, autovacuum) go under "".
// A process that exited meanwhile takes its time with it: PostgreSQL's
// connections live as long as their pools keep them. The process of
// connection except (the accountant's) is left out.
func postgresCPU(except int) map[string]time.Duration {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	byDB := map[string]time.Duration{}
	for _, d := range dirs {
		comm, err := os.ReadFile(filepath.Join(d, "comm"))
		if err != nil || strings.TrimSpace(string(comm)) != "postgres" {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(d))
		if pid != except {
			byDB[backendDatabase(pid)] += processCPU(pid)
		}
	}
	return byDB
}

// backendDatabase is the database a PostgreSQL connection's process
// serves, from its title; "" for the server's own processes.
func backendDatabase(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return ""
	}
	return titleDatabase(strings.TrimRight(string(b), "\x00"))
}

// titleDatabase reads a PostgreSQL process title: a connection's is
// "postgres: user database host(port) state…" (host "[local]" over a
// socket); the server's own processes ("postgres: walwriter") have no
// host field, and give "".
func titleDatabase(title string) string {
	rest, ok := strings.CutPrefix(title, "postgres: ")
	if !ok {
		return ""
	}
	f := strings.Fields(rest)
	if len(f) < 3 || !strings.Contains(f[2], "(") && f[2] != "[local]" {
		return ""
	}
	return f[1]
}

// Account is what a row's requests cost, per request, where measured.
type Account struct {
	// CPU is the machine's CPU time per request (all its processes), and
	// Busy how many of its Cores were busy on average.
	CPU         time.Duration
	Busy        float64
	Cores       int
	Self        time.Duration // this process's (load generator and references)
	Gateway     time.Duration // idemflow's process, where it is on this machine
	Postgres    time.Duration // PostgreSQL's processes
	Xacts       float64       // PostgreSQL transactions that wrote, per request
	WALBytes    float64       // WAL written per request
	Active      float64       // PostgreSQL's active connections, on average
	Waits       []Wait        // what they waited on, the most first
	GatewayHere bool
	// PostgresOwn is the CPU time of PostgreSQL's own processes (the WAL
	// writer, the checkpointer, autovacuum): Postgres less its
	// connections'.
	PostgresOwn time.Duration
	// Databases are pg_stat_statements' per database, per request, the
	// busiest first, where it was read.
	Databases []Database
	// Stages are the time idemflow's requests spent in each of the
	// starter's stages, in order, where its /metrics was read.
	Stages []Stage
	// Pool is what its PostgreSQL pool did per request, where read.
	Pool *Pool
}

// Pool is a pool's acquires per request, the time they took, and those
// that found the pool empty and waited, with the time they waited.
type Pool struct {
	Acquires, Waited float64
	Acquire, Wait    time.Duration
}

// Stage is the time requests spent in one stage: Mean over those that
// went through it (Count per request).
type Stage struct {
	Name  string
	Mean  time.Duration
	Count float64
}

// Database is what one database's connections did per request.
type Database struct {
	Name string
	// CPU is its connections' processes' CPU time.
	CPU time.Duration
	// Statements, Commits, Exec (the time executing them) and WALBytes
	// are pg_stat_statements', where it was read (Counted).
	Statements, Commits float64
	Exec                time.Duration
	WALBytes            float64
	Counted             bool
}

// Wait is how many of PostgreSQL's connections waited on What, on
// average.
type Wait struct {
	What string
	N    float64
}

// account turns a row's summed usage into its account.
func account(u usage, requests int, gatewayHere bool) *Account {
	if requests == 0 || u.total <= 0 {
		return nil
	}
	per := func(d time.Duration) time.Duration { return d / time.Duration(requests) }
	cores := max(1, u.cores)
	acc := &Account{
		CPU: per(u.busy), Busy: float64(u.busy) / float64(u.total) * float64(cores), Cores: cores,
		Self: per(u.self), Gateway: per(u.gateway), Postgres: per(u.postgres),
		Xacts: float64(u.xacts) / float64(requests), WALBytes: float64(u.walBytes) / float64(requests),
		GatewayHere: gatewayHere,
	}
	acc.PostgresOwn = per(u.backends[""])
	if p := u.pool; p != nil && p["acquire_count"] > 0 {
		r := float64(requests)
		acc.Pool = &Pool{Acquires: p["acquire_count"] / r, Waited: p["empty_acquire"] / r,
			Acquire: time.Duration(p["acquire_duration_ns"] / r), Wait: time.Duration(p["empty_acquire_wait_time_ns"] / r)}
	}
	for _, name := range stageNames {
		if st, ok := u.stages[name]; ok && st.count > 0 {
			acc.Stages = append(acc.Stages, Stage{Name: name, Mean: time.Duration(st.seconds / st.count * float64(time.Second)),
				Count: st.count / float64(requests)})
		}
	}
	r := float64(requests)
	names := map[string]bool{}
	for name := range u.backends {
		names[name] = name != ""
	}
	for name := range u.dbs {
		names[name] = true
	}
	for name, ok := range names {
		d, counted := u.dbs[name]
		if !ok || d.calls <= 0 && u.backends[name] < time.Millisecond {
			continue // idle, or the server's own processes
		}
		acc.Databases = append(acc.Databases, Database{Name: name, CPU: per(u.backends[name]), Counted: counted,
			Statements: float64(d.calls) / r, Commits: float64(d.commits) / r, Exec: per(d.exec), WALBytes: float64(d.walBytes) / r})
	}
	slices.SortFunc(acc.Databases, func(a, b Database) int { return cmp.Or(cmp.Compare(b.CPU, a.CPU), strings.Compare(a.Name, b.Name)) })
	if u.samples > 0 {
		for what, n := range u.waits {
			w := Wait{What: what, N: float64(n) / float64(u.samples)}
			acc.Active += w.N
			acc.Waits = append(acc.Waits, w)
		}
		slices.SortFunc(acc.Waits, func(a, b Wait) int {
			switch {
			case a.N > b.N:
				return -1
			case a.N < b.N:
				return 1
			}
			return strings.Compare(a.What, b.What)
		})
	}
	return acc
}

// printAccounts writes the rows' accounts, and, where the CPU was the
// bound, the ratio it predicts beside the measured one: when the machine
// was busy throughout, a target's throughput is its busy cores over its
// CPU per request, and the two ratios agree.
func (r Report) printAccounts(w io.Writer) {
	if !slices.ContainsFunc(r.Rows, func(row Row) bool { return row.Account != nil }) {
		return
	}
	fmt.Fprintf(w, "\naccounting, per request (this machine's /proc; PostgreSQL's counters):\n")
	fmt.Fprintf(w, "%-26s %7s  %-24s %8s %6s %8s %8s %8s %8s %6s %7s  %s\n",
		"case", "clients", "target", "CPU", "busy", "bench", "idemflow", "postgres", "other", "xacts", "WAL", "PostgreSQL connections active (waiting on)")
	for i, row := range r.Rows {
		a := row.Account
		if a == nil {
			continue
		}
		gw := "-"
		other := a.CPU - a.Self - a.Postgres
		if a.GatewayHere {
			gw = ms(a.Gateway)
			other -= a.Gateway
		}
		var waits []string
		for _, wt := range a.Waits {
			if wt.N >= 0.05 {
				waits = append(waits, fmt.Sprintf("%s %.1f", wt.What, wt.N))
			}
		}
		fmt.Fprintf(w, "%-26s %7d  %-24s %8s %5.2f/%d %8s %8s %8s %8s %6.1f %6.1fK  %.1f (%s)\n",
			row.Case, row.Clients, row.Target, ms(a.CPU), a.Busy, a.Cores, ms(a.Self), gw, ms(a.Postgres), ms(other),
			a.Xacts, a.WALBytes/1024, a.Active, strings.Join(waits, ", "))
		if row.RatioTo == "" || i+1 >= len(r.Rows) || r.Rows[i+1].Account == nil {
			continue
		}
		ref := r.Rows[i+1].Account
		if a.Busy >= 0.9*float64(a.Cores) && ref.Busy >= 0.9*float64(ref.Cores) && a.CPU > 0 {
			fmt.Fprintf(w, "%46s CPU-bound (both busy >= 90%%): %s's CPU per request over idemflow's predicts %.2fx; measured %.2fx\n",
				"", row.RatioTo, float64(ref.CPU)/float64(a.CPU), row.Ratio)
		}
	}
	fmt.Fprintln(w, "CPU: the machine's, every process, per request; busy: cores busy on average; bench: this process (load generator, references); idemflow: its process (with the embedded Temporal server under 'idemflow dev'); postgres: every postgres process; other: the rest")
	fmt.Fprintln(w, "xacts, WAL: PostgreSQL transactions that wrote (all databases: idemflow's and Temporal's) and WAL bytes, per request; connections active: sampled, on average, CPU when waiting on nothing")
	fmt.Fprintf(w, "\nPostgreSQL per request, by database: its connections' CPU; with pg_stat_statements, statements, commits, time executing them, WAL\n")
	for _, row := range r.Rows {
		if row.Account == nil {
			continue
		}
		dbs := []string{"own processes " + ms(row.Account.PostgresOwn)}
		for _, d := range row.Account.Databases {
			db := fmt.Sprintf("%s %s", d.Name, ms(d.CPU))
			if d.Counted {
				db += fmt.Sprintf(" (%.1f st, %.1f commits, %s, %.1fK)", d.Statements, d.Commits, ms(d.Exec), d.WALBytes/1024)
			}
			dbs = append(dbs, db)
		}
		fmt.Fprintf(w, "%-26s %7d  %-24s %s\n", row.Case, row.Clients, row.Target, strings.Join(dbs, "; "))
	}
	if !slices.ContainsFunc(r.Rows, func(row Row) bool { return row.Account != nil && len(row.Account.Stages) > 0 }) {
		return
	}
	fmt.Fprintf(w, "\nidemflow's requests by stage (its /metrics): the mean time in each, and how many of a request's went through it; its PostgreSQL pool per request\n")
	for _, row := range r.Rows {
		if row.Account == nil || len(row.Account.Stages) == 0 || row.Target != "idemflow" {
			continue
		}
		var stages []string
		for _, st := range row.Account.Stages {
			stages = append(stages, fmt.Sprintf("%s %s (x%.2f)", st.Name, ms(st.Mean), st.Count))
		}
		if p := row.Account.Pool; p != nil {
			stages = append(stages, fmt.Sprintf("pool: %.2f acquires taking %s, %.2f waited for a connection, %s", p.Acquires, ms(p.Acquire), p.Waited, ms(p.Wait)))
		}
		fmt.Fprintf(w, "%-26s %7d  %-24s %s\n", row.Case, row.Clients, row.Target, strings.Join(stages, ", "))
	}
}
