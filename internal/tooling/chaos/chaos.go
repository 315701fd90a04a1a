// Package chaos proves the guarantee under faults. Its one job: run many
// agents against a real idemflow deployment while it kills and restarts
// every part (workers, gateways, Temporal, PostgreSQL) and drops or delays
// answers on the wire, then check from PostgreSQL and Temporal that no
// intent was duplicated, lost or left stuck. A naive client runs beside the
// idemflow one under the same faults, so that a run also shows the checks
// can see duplicates.
package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemflow/idemflow/internal/ops/orders"
	"github.com/idemflow/idemflow/internal/refundapi"
	"github.com/idemflow/idemflow/internal/registry"
	"github.com/idemflow/idemflow/internal/tenant"
	"github.com/idemflow/idemflow/internal/tooling/devserver"
	"github.com/idemflow/idemflow/internal/tooling/patroni"
	"github.com/idemflow/idemflow/internal/tooling/tcpproxy"
	"github.com/idemflow/idemflow/migrations"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"
)

// Kind names a fault.
type Kind string

// The faults. Reply, latency, burst, reuse and abandon faults have a rate
// (a share of requests, connections or intents); process faults are
// injected in turn every FaultEvery, and their value is a weight.
const (
	DropReply    Kind = "drop-reply"    // the gateway acted; its answer is discarded on the wire
	DelayReply   Kind = "delay-reply"   // the answer is held past the client's timeout
	Latency      Kind = "latency"       // added latency on the links to PostgreSQL and Temporal
	Burst        Kind = "burst"         // 2 to 20 concurrent sends of one intent
	Reuse        Kind = "reuse-changed" // the key of a finished intent sent again with changed parameters
	Abandon      Kind = "abandon"       // an agent hangs up milliseconds after sending and never retries (it died)
	KillWorker   Kind = "kill-worker"   // SIGKILL of a worker process, restarted by its supervisor
	KillGateway  Kind = "kill-gateway"  // SIGKILL of a gateway process, restarted
	PGTerminate  Kind = "pg-terminate"  // every backend of idemflow's database terminated
	PGRestart    Kind = "pg-restart"    // PostgreSQL stopped as by a power cut, then started
	KillTemporal Kind = "kill-temporal" // SIGKILL of the Temporal server, restarted
	// PGFailover: the primary and all its backends SIGKILLed under load,
	// its streaming standby promoted, the address every process and
	// Temporal reach PostgreSQL at moved to it (a virtual IP), and the old
	// primary rebuilt from the new one as its standby (a fresh base
	// backup). Off by default: it needs a standby, and Config.Replication
	// says how that is fed.
	PGFailover Kind = "pg-failover"
	// DownstreamFault: the HTTP tools' downstream drops the connection
	// after committing, answers past the tool's timeout, or fails with a
	// 503 (a share of its POSTs).
	DownstreamFault Kind = "downstream"
)

// Kinds lists every fault, request faults first.
func Kinds() []Kind {
	return []Kind{DropReply, DelayReply, Latency, Burst, Reuse, Abandon, DownstreamFault, KillWorker, KillGateway, PGTerminate, PGRestart, PGFailover, KillTemporal}
}

// processKinds are injected by the scheduler rather than per request.
var processKinds = map[Kind]bool{KillWorker: true, KillGateway: true, PGTerminate: true, PGRestart: true, PGFailover: true, KillTemporal: true}

// localOnly faults need processes this run started.
var localOnly = map[Kind]bool{DownstreamFault: true, KillWorker: true, KillGateway: true, PGRestart: true, PGFailover: true, KillTemporal: true, Latency: true}

// targetFaults touch a deployment chaos did not start (its database's
// backends): against one, they run only when Config.TargetFaults names
// them.
var targetFaults = map[Kind]bool{PGTerminate: true}

// The topologies a local stack can have.
const (
	// TopologyServe runs Gateways processes of 'idemflow serve' (gateway
	// and worker in one process: eager start, the in-process wake-up and
	// the answer cache), the default deployment. kill-worker and
	// kill-gateway both kill one of them.
	TopologyServe = "serve"
	// TopologySplit runs Gateways 'idemflow gateway' and Workers
	// 'idemflow worker' processes.
	TopologySplit = "split"
)

// How a run with pg-failover feeds its standby (Config.Replication).
const (
	// ReplicationSync: synchronous_standby_names names the standby, so a
	// commit is acknowledged only once the standby has flushed it
	// (synchronous_commit on). A promoted standby is made synchronous
	// again at once, before it has a standby of its own: its commits wait
	// for the rebuilt one, and none is acknowledged from one machine.
	ReplicationSync = "sync"
	// ReplicationAsync: the standby streams what it can. The control: a
	// failover loses the commits the standby had not received, and the
	// checks must name them.
	ReplicationAsync = "async"
)

// Where a local run's PostgreSQL runs (Config.Cluster).
const (
	// ClusterOwn: a private primary and its streaming standby; pg-failover
	// promotes the standby with pg_ctl and moves an address to it.
	ClusterOwn = "own"
	// ClusterPatroni: a Patroni cluster from Debian's packages (three
	// members, etcd, HAProxy routing to the leader by Patroni's checks);
	// pg-failover SIGKILLs the leader, Patroni elects another, and the
	// killed member rejoins as a standby. Replication sync is Patroni's
	// synchronous_mode_strict.
	ClusterPatroni = "patroni"
)

// standbyName is the application name the standby reports to its primary
// (what synchronous_standby_names names).
const standbyName = "standby"

// DefaultFaults switch every fault on, but pg-failover, which needs a
// standby.
func DefaultFaults() map[Kind]float64 {
	return map[Kind]float64{
		DropReply: 0.10, DelayReply: 0.05, Latency: 0.2, Burst: 0.05, Reuse: 0.05, Abandon: 0.02, DownstreamFault: 0.3,
		KillWorker: 3, KillGateway: 2, PGTerminate: 2, PGRestart: 1, KillTemporal: 1,
	}
}

// ParseFaults reads "kind=rate,..." over the defaults; "none" clears them
// first, and "kind=0" switches one off.
func ParseFaults(s string) (map[Kind]float64, error) {
	m := DefaultFaults()
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if part == "none" {
			m = map[Kind]float64{}
			continue
		}
		name, val, ok := strings.Cut(part, "=")
		known := false
		for _, k := range Kinds() {
			known = known || Kind(name) == k
		}
		if !ok || !known {
			return nil, fmt.Errorf("fault %q: want kind=rate with kind one of %v", part, Kinds())
		}
		v, err := strconv.ParseFloat(val, 64)
		if err != nil || v < 0 || (!processKinds[Kind(name)] && v > 1) {
			return nil, fmt.Errorf("fault %q: a rate is 0 to 1 (a process fault's weight is 0 or more)", part)
		}
		m[Kind(name)] = v
	}
	return m, nil
}

// Config is one chaos run.
type Config struct {
	// Exe is the idemflow binary that runs the local stack's processes, and
	// Env is added to their environment.
	Exe string
	Env []string
	// Dir keeps the private PostgreSQL, the processes' logs and the agents'
	// intent stores. Empty: a temporary directory, removed after a clean run.
	Dir string

	// Jobs is how many agent tasks the idemflow client runs: a ticket, or an
	// order with its payment and a cancel, refund or fulfilment, each step
	// an intent. NaiveJobs is the control's (default Jobs/4, at least 20).
	// With Jobs set, the first round of process faults is paced by the
	// jobs done, not by the clock, so a run means the same on a slow
	// machine as on a fast one.
	Jobs, NaiveJobs int
	// Duration budgets the whole run: start-up, load and checks. The load
	// gets what start-up left, less CheckTime; alone, both clients run
	// that long; with Jobs, it is the time bound and Report.CutShort says
	// whether it ended the load before the jobs were done. A budget that
	// leaves under MinLoad of load is an error before anything starts.
	Duration time.Duration
	// Topology of the local stack: TopologyServe (default) or TopologySplit.
	Topology string
	// Agents run at once, per client.
	Agents int
	// Gateways and Workers are the local stack's processes.
	Gateways, Workers int
	// Faults: see Kind. FaultEvery is the pause between process faults.
	Faults     map[Kind]float64
	FaultEvery time.Duration
	// AttemptTimeout is the agents' per-attempt timeout; delayed answers are
	// held past it.
	AttemptTimeout time.Duration
	// ProcessingTimeout (the reconcile horizon) and ReconcileInterval are
	// given to the workers: short, so a run can wait them out.
	ProcessingTimeout, ReconcileInterval time.Duration
	Seed                                 uint64
	// Replication is how a run with pg-failover feeds its standby:
	// ReplicationSync (the default) or ReplicationAsync. ReplicationLag
	// is the round trip added to the link the standby streams over: how
	// far an asynchronous standby trails, and so what a failover loses.
	Replication    string
	ReplicationLag time.Duration
	// Cluster is where a local run's PostgreSQL runs: ClusterOwn (the
	// default) or ClusterPatroni.
	Cluster string

	// URL, DatabaseURL and TemporalAddress point the run at an existing
	// deployment instead of a local stack. DatabaseURL is needed for the
	// checks (and tenants); only faults on the run's own wire and agents
	// run, plus those TargetFaults names explicitly (pg-terminate).
	URL, DatabaseURL, TemporalAddress, Namespace string
	TargetFaults                                 []Kind

	Out, Progress io.Writer
	Logger        *slog.Logger
}

func (c *Config) defaults() {
	if c.Jobs == 0 && c.Duration == 0 {
		c.Jobs = 200
	}
	if c.NaiveJobs == 0 && c.Jobs > 0 {
		c.NaiveJobs = max(c.Jobs/4, 20)
	}
	if c.Agents == 0 {
		c.Agents = 16
	}
	if c.Gateways == 0 {
		c.Gateways = 2
	}
	if c.Workers == 0 {
		c.Workers = 2
	}
	if c.Topology == "" {
		c.Topology = TopologyServe
	}
	if c.Faults == nil {
		c.Faults = DefaultFaults()
	}
	if c.FaultEvery == 0 {
		c.FaultEvery = 3 * time.Second
	}
	if c.AttemptTimeout == 0 {
		c.AttemptTimeout = 3 * time.Second
	}
	if c.ProcessingTimeout == 0 {
		c.ProcessingTimeout = 35 * time.Second
	}
	if c.ReconcileInterval == 0 {
		c.ReconcileInterval = 2 * time.Second
	}
	if c.Namespace == "" {
		c.Namespace = "default"
	}
	if c.Replication == "" {
		c.Replication = ReplicationSync
	}
	if c.Cluster == "" {
		c.Cluster = ClusterOwn
	}
	if c.Seed == 0 {
		c.Seed = uint64(time.Now().UnixNano())
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// local is true when the run starts its own stack.
func (c *Config) local() bool { return c.URL == "" }

// run is one chaos run's state.
type run struct {
	// set is the operations of the processes chaos runs (registry.New).
	set    *registry.Set
	cfg    Config
	log    *slog.Logger
	dir    string
	admin  *pgxpool.Pool // direct to idemflow's database, for setup and checks
	dbName string
	tc     client.Client // nil without Temporal

	pg *devserver.Postgres
	// With pg-failover: the standby, the address every process reaches
	// PostgreSQL at (a virtual IP, moved to the new primary at each
	// failover), the link the standby streams over, and when each
	// failover killed a primary.
	standby *devserver.Postgres
	// cluster replaces pg, standby and vip with ClusterPatroni.
	cluster           *patroni.Cluster
	vip               *tcpproxy.Proxy
	replLink          *tcpproxy.Proxy
	failovers         []failover
	pgGen             int
	temporal          *process
	workers, gateways []*process
	gatewayProxies    []*Proxy
	// downstream is the HTTP tools' downstream of a local run (nil
	// against a deployment chaos did not start: its tools are unknown).
	downstream   *refundapi.Server
	downstreamLn net.Listener
	linkProxies  []*Proxy
	directURLs   []string // gateways without a proxy, for the final replays
	procWG       sync.WaitGroup
	stopProcs    context.CancelFunc
	faultMu      sync.Mutex
	faults       map[Kind]int
	killedInTx   atomic.Int64
	tenants      [2]string // idemflow client's, naive client's
	tokens       [2]string
	initialStock map[string]int // sku -> units, idemflow tenant
	ports        ports
	rng          *rand.Rand
	rngMu        sync.Mutex
	startedAt    time.Time
	// jobsDone paces the first round of process faults.
	jobsDone atomic.Int64
	// fail ends the run early with its cause: a component that cannot
	// start.
	fail context.CancelCauseFunc
}

func (r *run) count(k Kind, n int) {
	r.faultMu.Lock()
	r.faults[k] += n
	r.faultMu.Unlock()
}

func (r *run) float() float64 {
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	return r.rng.Float64()
}

func (r *run) intN(n int) int {
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	return r.rng.IntN(n)
}

// Run runs the agents under faults, checks, prints the report to cfg.Out
// and returns it. An error is returned only when the run could not be made;
// violations are in the report (Report.OK).
// MinLoad is the least load a Duration budget must leave.
const MinLoad = 5 * time.Second

// CheckTime is what a run keeps of its Duration budget for after the load:
// the reconcile horizon waited out, two reconcile rounds, and the checks.
func (c Config) CheckTime() time.Duration {
	c.defaults()
	return c.ProcessingTimeout + 2*c.ReconcileInterval + 10*time.Second
}

// startupGuess is what a local stack's start-up is budgeted at, to refuse
// a Duration that cannot hold a run at all before starting it.
const startupGuess = 15 * time.Second

// CheckBudget refuses a Duration that cannot hold a start-up, MinLoad of
// load and the checks.
func (c Config) CheckBudget() error {
	if c.Duration <= 0 {
		return nil
	}
	need := c.CheckTime() + MinLoad
	if c.local() {
		need += startupGuess
	}
	if c.Duration < need {
		return fmt.Errorf("chaos: a --duration of %v cannot hold a run: start-up, at least %v of load, and %v of checks "+
			"(the %v reconcile horizon waited out): give at least %v, or a shorter --processing-timeout",
			c.Duration, MinLoad, c.CheckTime(), c.ProcessingTimeout, need.Round(time.Second))
	}
	return nil
}

func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg.defaults()
	if err := cfg.CheckBudget(); err != nil {
		return nil, err
	}
	if cfg.Replication != ReplicationSync && cfg.Replication != ReplicationAsync {
		return nil, fmt.Errorf("chaos: replication %q: want %s or %s", cfg.Replication, ReplicationSync, ReplicationAsync)
	}
	if cfg.Topology != TopologyServe && cfg.Topology != TopologySplit {
		return nil, fmt.Errorf("chaos: topology %q: want %s or %s", cfg.Topology, TopologyServe, TopologySplit)
	}
	if cfg.Cluster != ClusterOwn && cfg.Cluster != ClusterPatroni {
		return nil, fmt.Errorf("chaos: cluster %q: want %s or %s", cfg.Cluster, ClusterOwn, ClusterPatroni)
	}
	if cfg.Cluster == ClusterPatroni && (!cfg.local() || cfg.Faults[PGRestart] > 0) {
		return nil, fmt.Errorf("chaos: a Patroni cluster is the local stack's, and restarts its own members: " +
			"run it without --url, and without pg-restart (pg-failover SIGKILLs its leader)")
	}
	if cfg.local() && len(cfg.TargetFaults) > 0 {
		return nil, errors.New("chaos: target faults name what may be done to a deployment given by URL; a local stack has every fault")
	}
	set, err := registry.New()
	if err != nil {
		return nil, err
	}
	r := &run{cfg: cfg, set: set, log: cfg.Logger, faults: map[Kind]int{}, rng: rand.New(rand.NewPCG(cfg.Seed, 7))}
	r.startedAt = time.Now()
	ctx, r.fail = context.WithCancelCause(ctx)
	defer r.fail(nil)
	rep, err := r.run(ctx)
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) && !errors.Is(cause, context.DeadlineExceeded) {
		return nil, fmt.Errorf("chaos: %w", cause)
	}
	return rep, err
}

func (r *run) run(ctx context.Context) (*Report, error) {
	cfg := r.cfg
	dir := cfg.Dir
	cleanup := false
	if dir == "" {
		d, err := os.MkdirTemp("", "idemflow-chaos-")
		if err != nil {
			return nil, err
		}
		dir, cleanup = d, true
	}
	r.dir = dir
	if !cfg.local() {
		allowed := map[Kind]bool{}
		for _, k := range cfg.TargetFaults {
			if !targetFaults[k] {
				return nil, fmt.Errorf("chaos: %s cannot be done to a deployment chaos did not start", k)
			}
			allowed[k] = true
		}
		for k := range cfg.Faults {
			if localOnly[k] || (targetFaults[k] && !allowed[k]) {
				delete(r.cfg.Faults, k)
			}
		}
	}
	defer r.close()
	if err := r.up(ctx); err != nil {
		return nil, fmt.Errorf("chaos: start the stack (logs in %s): %w", filepath.Join(dir, "logs"), err)
	}
	if err := r.setupTenants(ctx); err != nil {
		return nil, err
	}
	rep := newReport(r)
	rep.External = !cfg.local()
	target := fmt.Sprintf("%d gateways, %d workers, stack in %s", len(r.gateways), len(r.workers), dir)
	if cfg.Topology == TopologyServe {
		target = fmt.Sprintf("%d serve processes, stack in %s", len(r.gateways), dir)
	}
	if !cfg.local() {
		target = "the deployment at " + cfg.URL
	}
	var on []string
	for _, k := range Kinds() {
		if r.cfg.Faults[k] > 0 {
			on = append(on, string(k))
		}
	}
	fmt.Fprintf(cfg.Out, "chaos: %d+%d agents, seed %d, %s; faults: %s\n", cfg.Agents, cfg.Agents, cfg.Seed, target, strings.Join(on, ", "))

	var until time.Time
	var loadFor time.Duration
	if cfg.Duration > 0 {
		// The budget is the whole run's: the load ends in time for the
		// checks.
		until = r.startedAt.Add(cfg.Duration - cfg.CheckTime())
		if loadFor = time.Until(until); loadFor < MinLoad {
			return nil, fmt.Errorf("chaos: start-up took %v of the %v budget, leaving %v of load (at least %v needed) before %v of checks",
				time.Since(r.startedAt).Round(time.Second), cfg.Duration, max(loadFor, 0).Round(time.Second), MinLoad, cfg.CheckTime())
		}
	}
	// Faults run while the agents do; both stop when the agents are done.
	r.setWireFaults(true)
	faultCtx, stopFaults := context.WithCancel(ctx)
	faultsDone := make(chan struct{})
	go func() { defer close(faultsDone); r.injectFaults(faultCtx) }()
	bar := newBar(cfg.Progress, cfg.Jobs+cfg.NaiveJobs, loadFor)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); r.runAgents(ctx, rep.Client.stats, false, cfg.Jobs, until, bar) }()
	go func() { defer wg.Done(); r.runAgents(ctx, rep.Naive.stats, true, cfg.NaiveJobs, until, bar) }()
	wg.Wait()
	bar.finish()
	rep.Client.fold()
	rep.Naive.fold()
	rep.foldViolations()
	stopFaults()
	<-faultsDone
	r.setWireFaults(false)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	rep.CutShort = cfg.Jobs > 0 && rep.Client.Jobs < cfg.Jobs
	r.faultMu.Lock()
	for k, n := range r.faults {
		rep.Faults[k] = n
	}
	r.faultMu.Unlock()
	for _, p := range r.gatewayProxies {
		rep.Faults[DropReply] += int(p.dropped.Load())
		rep.Faults[DelayReply] += int(p.delayed.Load())
	}
	for _, p := range r.linkProxies {
		rep.Faults[Latency] += int(p.slowed.Load())
	}
	if r.downstream != nil {
		for _, n := range r.downstream.Faulted() {
			rep.Faults[DownstreamFault] += n
		}
	}
	rep.KilledInTx = int(r.killedInTx.Load())
	rep.Cluster, rep.Replication, rep.ReplicationLag = cfg.Cluster, cfg.Replication, cfg.ReplicationLag
	r.faultMu.Lock()
	rep.Failovers = len(r.failovers)
	for _, f := range r.failovers {
		rep.StandbyBehind = max(rep.StandbyBehind, f.behind)
		rep.Promoted, rep.Rebuilt = max(rep.Promoted, f.promoted), max(rep.Rebuilt, f.rebuilt)
	}
	r.faultMu.Unlock()
	rep.LoadTime = time.Since(r.startedAt)

	if err := r.waitHealthy(ctx); err != nil {
		return nil, err
	}
	if err := r.check(ctx, rep); err != nil {
		return nil, err
	}
	rep.Total = time.Since(r.startedAt)
	rep.print(cfg.Out)
	if rep.OK() && cleanup {
		r.close()
		_ = os.RemoveAll(dir)
	}
	return rep, nil
}

// up starts the local stack, or connects to the given deployment.
func (r *run) up(ctx context.Context) error {
	cfg := r.cfg
	if err := os.MkdirAll(filepath.Join(r.dir, "logs"), 0o755); err != nil {
		return err
	}
	if !cfg.local() {
		if cfg.DatabaseURL == "" {
			return errors.New("an existing deployment (--url) needs --database-url, to set up tenants and check")
		}
		u, err := url.Parse(cfg.URL)
		if err != nil {
			return fmt.Errorf("--url: %w", err)
		}
		host := u.Host
		if u.Port() == "" {
			host += map[string]string{"https": ":443"}[u.Scheme] + map[string]string{"http": ":80"}[u.Scheme]
		}
		p, err := NewProxy(host, cfg.Seed)
		if err != nil {
			return err
		}
		r.gatewayProxies = append(r.gatewayProxies, p)
		r.directURLs = []string{strings.TrimRight(cfg.URL, "/")}
		if r.admin, err = openAdmin(ctx, cfg.DatabaseURL); err != nil {
			return err
		}
		r.dbName = r.admin.Config().ConnConfig.Database
		if cfg.TemporalAddress != "" {
			if r.tc, err = devserver.DialTemporal(ctx, cfg.TemporalAddress, cfg.Namespace, 10*time.Second); err != nil {
				return err
			}
		}
		return nil
	}
	if cfg.Exe == "" {
		return errors.New("the local stack needs the idemflow binary (Config.Exe)")
	}
	r.dbName = "idemflow"
	adminURL, pgAddr, err := r.startPostgres(ctx)
	if err != nil {
		return err
	}
	dbURL, err := devserver.EnsureDatabase(ctx, adminURL, r.dbName)
	if err != nil {
		return err
	}
	// As 'idemflow migrate' does for the processes chaos runs: the
	// built-ins, with their own migrations (HTTP tools have none).
	if _, _, err := migrations.MigrateURL(ctx, dbURL, r.set.Schemas()...); err != nil {
		return err
	}
	if cfg.Faults[PGFailover] > 0 && r.cluster == nil {
		if err := r.startReplication(ctx); err != nil {
			return err
		}
		// Everyone, Temporal and the checks too, reaches the primary
		// where production would: at an address that moves.
		pgAddr = r.vip.Addr
		if dbURL, err = withHost(dbURL, pgAddr); err != nil {
			return err
		}
	}
	if r.admin, err = openAdmin(ctx, dbURL); err != nil {
		return err
	}
	pgProxy, err := NewProxy(pgAddr, cfg.Seed+1)
	if err != nil {
		return err
	}
	r.linkProxies = append(r.linkProxies, pgProxy)

	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r.stopProcs = cancel
	tPort, err := r.ports.port()
	if err != nil {
		return err
	}
	tAddr := "127.0.0.1:" + strconv.Itoa(tPort)
	// Temporal reaches PostgreSQL directly: the latency under test is
	// idemflow's.
	r.temporal = r.spawn(pctx, "temporal", []string{"temporal", "--database-url", dbURL,
		"--temporal-port", strconv.Itoa(tPort), "--namespace", cfg.Namespace, "--data-dir", r.dir}, 500*time.Millisecond, 2*time.Second)
	dialCtx, cancelDial := context.WithTimeout(ctx, 3*time.Minute)
	err = waitDial(dialCtx, tAddr)
	cancelDial()
	if err != nil {
		return fmt.Errorf("temporal did not come up: %w\n%s", err, r.temporal.tail())
	}
	tProxy, err := NewProxy(tAddr, cfg.Seed+2)
	if err != nil {
		return err
	}
	r.linkProxies = append(r.linkProxies, tProxy)
	if r.tc, err = devserver.DialTemporal(ctx, tAddr, cfg.Namespace, 2*time.Minute); err != nil {
		return fmt.Errorf("%w\n%s", err, r.temporal.tail())
	}

	viaProxy := func(app string) string {
		u, _ := url.Parse(dbURL)
		u.Host = pgProxy.Addr
		q := u.Query()
		q.Set("application_name", app)
		u.RawQuery = q.Encode()
		return u.String()
	}
	toolsFile, err := r.startDownstream(ctx)
	if err != nil {
		return err
	}
	r.cfg.Env = append(r.cfg.Env, "CHAOS_BILLING_TOKEN="+downstreamToken)
	common := []string{"--temporal-address", tProxy.Addr, "--namespace", cfg.Namespace, "--tools", toolsFile}
	workerFlags := []string{"--processing-timeout", cfg.ProcessingTimeout.String(), "--reconcile-interval", cfg.ReconcileInterval.String()}
	if cfg.Topology == TopologySplit {
		for i := range cfg.Workers {
			name := fmt.Sprintf("chaos-worker-%d", i+1)
			r.workers = append(r.workers, r.spawn(pctx, name, append(append([]string{"worker", "--database-url", viaProxy(name)},
				workerFlags...), common...), 200*time.Millisecond, 1500*time.Millisecond))
		}
	}
	for i := range cfg.Gateways {
		role, name := "gateway", fmt.Sprintf("chaos-gateway-%d", i+1)
		args := common
		if cfg.Topology == TopologyServe {
			role, name = "serve", fmt.Sprintf("chaos-serve-%d", i+1)
			args = append(append([]string{}, workerFlags...), common...)
		}
		addr, err := r.ports.addr()
		if err != nil {
			return err
		}
		g := r.spawn(pctx, name, append([]string{role, "--database-url", viaProxy(name), "--http-addr", addr}, args...),
			200*time.Millisecond, 1500*time.Millisecond)
		r.gateways = append(r.gateways, g)
		if cfg.Topology == TopologyServe {
			r.workers = append(r.workers, g) // a serve process is a worker too
		}
		p, err := NewProxy(addr, cfg.Seed+10+uint64(i))
		if err != nil {
			return err
		}
		r.gatewayProxies = append(r.gatewayProxies, p)
		r.directURLs = append(r.directURLs, "http://"+addr)
	}
	return r.waitHealthy(ctx)
}

// spawn starts a supervised process whose restarts come after a pause
// between lo and hi.
func (r *run) spawn(ctx context.Context, name string, args []string, lo, hi time.Duration) *process {
	p := &process{name: name, exe: r.cfg.Exe, args: args, env: childEnv(r.cfg.Env), log: filepath.Join(r.dir, "logs", name+".log"), done: make(chan struct{}),
		down:      func() time.Duration { return lo + time.Duration(r.intN(int(hi-lo)+1)) },
		cannotRun: r.fail}
	r.procWG.Add(1)
	go func() { defer r.procWG.Done(); p.run(ctx, r.log) }()
	return p
}

// setWireFaults switches the proxies' faults on or off.
func (r *run) setWireFaults(on bool) {
	f := r.cfg.Faults
	for _, p := range r.gatewayProxies {
		if on {
			p.SetReplyFaults(f[DropReply], f[DelayReply], r.cfg.AttemptTimeout+time.Second)
		} else {
			p.SetReplyFaults(0, 0, 0)
		}
	}
	for _, p := range r.linkProxies {
		if on {
			p.SetLatency(f[Latency], 20*time.Millisecond)
		} else {
			p.SetLatency(0, 0)
		}
	}
}

// setupTenants makes the two clients' tenants, tokens and catalogs.
func (r *run) setupTenants(ctx context.Context) error {
	suffix := strconv.FormatUint(r.cfg.Seed%1_000_000_007, 36) + strconv.FormatInt(time.Now().Unix()%100000, 36)
	ts := tenant.NewStore(r.admin)
	for i, prefix := range []string{"chaos-", "naive-"} {
		id := prefix + suffix
		tok, err := tenant.NewToken()
		if err != nil {
			return err
		}
		if err := ts.Ensure(ctx, id, "chaos run "+suffix); err != nil {
			return err
		}
		if err := ts.AddToken(ctx, id, tok, "chaos"); err != nil {
			return err
		}
		if err := r.set.Seed(ctx, r.admin, id); err != nil {
			return err
		}
		for _, sku := range skus {
			if err := orders.Restock(ctx, r.admin, id, sku, 100000); err != nil {
				return err
			}
		}
		r.tenants[i], r.tokens[i] = id, tok
	}
	var err error
	r.initialStock, err = orders.Stock(ctx, r.admin, r.tenants[0])
	return err
}

var skus = []string{"SKU-CABLE", "SKU-MOUSE", "SKU-KEYBOARD"}

// injectFaults kills and restarts parts until ctx ends: first every
// enabled kind once (so a short run sees them all), then at random by
// weight.
func (r *run) injectFaults(ctx context.Context) {
	kinds := processFaults(r.cfg.Faults)
	if len(kinds) == 0 {
		return
	}
	total := 0.0
	for _, k := range kinds {
		total += r.cfg.Faults[k]
	}
	queue := firstRound(kinds)
	for i := range queue {
		j := i + r.intN(len(queue)-i)
		queue[i], queue[j] = queue[j], queue[i]
	}
	first := len(queue)
	for {
		if len(queue) > 0 && r.cfg.Jobs > 0 {
			// The first round is paced by the work done: fault i of n
			// comes after (i+1)/(n+1) of the jobs, on any machine.
			at := int64((first - len(queue) + 1) * (r.cfg.Jobs + r.cfg.NaiveJobs) / (first + 1))
			if !r.waitJobs(ctx, at) {
				return
			}
		} else {
			wait := r.cfg.FaultEvery/2 + time.Duration(r.intN(int(r.cfg.FaultEvery)+1))
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
		var k Kind
		if len(queue) > 0 {
			k, queue = queue[0], queue[1:]
		} else {
			x := r.float() * total
			for _, c := range kinds {
				if x -= r.cfg.Faults[c]; x <= 0 || c == kinds[len(kinds)-1] {
					k = c
					break
				}
			}
		}
		if err := r.inject(ctx, k); err != nil && (ctx.Err() == nil || k == PGFailover) {
			r.log.Warn("chaos: inject", "fault", k, "error", err)
			if k == PGFailover {
				// Without its standby the stack is not what the run
				// claims to test: end it, saying why.
				r.fail(fmt.Errorf("%s: %w", k, err))
				return
			}
		}
	}
}

// firstRound is the process faults a run injects before it picks them at
// random: every enabled kind once, so that a short run sees them all, and
// a failover twice, over and back, so that the rebuilt old primary is
// promoted in its turn. A run bounded by jobs paces this round by the
// jobs done and reaches its random faults only in its last share of them:
// a second failover there was luck (two in some runs of the failover test,
// whose check wants at least two).
func firstRound(kinds []Kind) []Kind {
	var round []Kind
	for _, k := range kinds {
		round = append(round, k)
		if k == PGFailover {
			round = append(round, k)
		}
	}
	return round
}

// processFaults are the process faults faults enables, in Kinds' order.
func processFaults(faults map[Kind]float64) []Kind {
	var kinds []Kind
	for _, k := range Kinds() {
		if processKinds[k] && faults[k] > 0 {
			kinds = append(kinds, k)
		}
	}
	return kinds
}

// waitJobs waits until n jobs are done; false when ctx ended first.
func (r *run) waitJobs(ctx context.Context, n int64) bool {
	for r.jobsDone.Load() < n {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(50 * time.Millisecond):
		}
	}
	return true
}

func (r *run) inject(ctx context.Context, k Kind) error {
	switch k {
	case KillWorker:
		// From a random one, the first that runs: one still restarting
		// after an earlier kill (in the serve topology a kill of either
		// role) cannot be killed, and the fault would be lost.
		for i, start := 0, r.intN(len(r.workers)); i < len(r.workers); i++ {
			p := r.workers[(start+i)%len(r.workers)]
			// Was it inside a business transaction? Its backends say so.
			var busy int
			_ = r.admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1
				AND state IN ('active', 'idle in transaction')`, p.name).Scan(&busy)
			if p.Kill() {
				r.count(k, 1)
				if busy > 0 {
					r.killedInTx.Add(1)
				}
				break
			}
		}
	case KillGateway:
		for i, start := 0, r.intN(len(r.gateways)); i < len(r.gateways); i++ {
			if r.gateways[(start+i)%len(r.gateways)].Kill() {
				r.count(k, 1)
				break
			}
		}
	case KillTemporal:
		if r.temporal.Kill() {
			r.count(k, 1)
		}
	case PGTerminate:
		var n int
		if err := r.admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = $1 AND pid <> pg_backend_pid() AND backend_type = 'client backend'
			AND application_name <> 'chaos-checker'`, r.dbName).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			r.count(k, 1)
		}
	case PGRestart:
		if err := r.pg.Crash(ctx); err != nil {
			return err
		}
		r.admin.Reset() // its connections died with the server
		r.count(k, 1)
	case PGFailover:
		failover := r.failover
		switch {
		case r.cluster != nil:
			failover = r.patroniFailover
		case r.standby == nil:
			return errors.New("no standby to promote: the last rebuild failed")
		}
		// A failover is finished even when the load ends meanwhile: a
		// synchronous primary left without its rebuilt standby would
		// hold every commit of the checks.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Minute)
		defer cancel()
		if err := failover(fctx); err != nil {
			return err
		}
		r.count(k, 1)
	}
	return nil
}

// waitHealthy waits until every gateway is ready again.
func (r *run) waitHealthy(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	for _, u := range r.directURLs {
		if err := waitReady(ctx, u+"/readyz"); err != nil {
			tail := ""
			for _, g := range r.gateways {
				tail += "\n" + g.name + ":\n" + g.tail()
			}
			return fmt.Errorf("gateway %s not ready: %w%s%s", u, err, tail, r.postgresState())
		}
	}
	return nil
}

// postgresState says whether the run's private PostgreSQL takes a
// connection, with the end of its log: a gateway that is not ready
// names it as a dependency, and this tells which side failed.
func (r *run) postgresState() string {
	if r.pg == nil {
		return ""
	}
	dial := "takes connections"
	if c, err := net.DialTimeout("tcp", r.pg.Addr(), 5*time.Second); err != nil {
		dial = "takes no connection: " + err.Error()
	} else {
		_ = c.Close()
	}
	return fmt.Sprintf("\nPostgreSQL at %s %s; its log ends:\n%s", r.pg.Addr(), dial, tailOf(r.pg.LogPath()))
}

func (r *run) close() {
	for _, p := range r.gatewayProxies {
		_ = p.Close()
	}
	if r.downstreamLn != nil {
		_ = r.downstreamLn.Close()
	}
	r.gatewayProxies = nil
	if r.stopProcs != nil {
		var wg sync.WaitGroup
		seen := map[*process]bool{}
		for _, p := range append(append([]*process{}, r.gateways...), r.workers...) {
			if seen[p] {
				continue // a serve process is both
			}
			seen[p] = true
			wg.Add(1)
			go func() { defer wg.Done(); p.Stop(10 * time.Second) }()
		}
		wg.Wait()
		if r.temporal != nil {
			r.temporal.Stop(10 * time.Second)
		}
		r.stopProcs()
		r.procWG.Wait()
		r.stopProcs = nil
	}
	for _, p := range r.linkProxies {
		_ = p.Close()
	}
	r.linkProxies = nil
	if r.tc != nil {
		r.tc.Close()
		r.tc = nil
	}
	if r.admin != nil {
		r.admin.Close()
		r.admin = nil
	}
	for _, p := range []*tcpproxy.Proxy{r.vip, r.replLink} {
		if p != nil {
			_ = p.Close()
		}
	}
	r.vip, r.replLink = nil, nil
	for _, pg := range []*devserver.Postgres{r.standby, r.pg} {
		if pg != nil {
			if err := pg.Stop(context.Background()); err != nil {
				r.log.Warn("chaos: stop PostgreSQL", "error", err)
			}
		}
	}
	r.pg, r.standby = nil, nil
	if r.cluster != nil {
		r.cluster.Stop()
		r.cluster = nil
	}
}
