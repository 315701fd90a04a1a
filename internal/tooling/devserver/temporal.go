// Package devserver runs idemflow's development stack in one process: an
// embedded Temporal server (on PostgreSQL, or SQLite in a data directory),
// the Temporal Web UI from its embedded assets, and (when no PostgreSQL is
// reachable) a private PostgreSQL started from the installed binaries.
package devserver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/idemflow/idemflow/internal/schedule"
	"github.com/jackc/pgx/v5"
	enumspb "go.temporal.io/api/enums/v1"
	namespacepb "go.temporal.io/api/namespace/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/server/common/cluster"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/dynamicconfig"
	"go.temporal.io/server/common/log"
	"go.temporal.io/server/common/metrics"
	persistencesql "go.temporal.io/server/common/persistence/sql"
	"go.temporal.io/server/common/persistence/sql/sqlplugin"
	sqliteplugin "go.temporal.io/server/common/persistence/sql/sqlplugin/sqlite"
	"go.temporal.io/server/common/resolver"
	sqliteschema "go.temporal.io/server/schema/sqlite"
	"go.temporal.io/server/temporal"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TemporalConfig configures the embedded Temporal server.
type TemporalConfig struct {
	// DataDir holds the SQLite file (temporal.db) and the server log.
	DataDir string
	// IP and Port of the frontend (gRPC). Port 0 picks a free port.
	IP   string
	Port int
	// Namespace is created if missing.
	Namespace string
	// Retention of closed workflows in Namespace. It is set explicitly at
	// every start: the guarantee past it rests on PostgreSQL alone.
	Retention time.Duration
	// SearchAttributes to register in Namespace. Until they are, and
	// for a minute after this start added any, the server reads search
	// attributes from its store on every read (see dynamicClient);
	// with none, it always does.
	SearchAttributes map[string]enumspb.IndexedValueType
	// Postgres, when set, is a URL of the PostgreSQL server that keeps
	// Temporal's data, in databases PostgresDatabase and
	// PostgresDatabase_visibility (made if missing); otherwise it is kept
	// in SQLite in DataDir.
	Postgres         string
	PostgresDatabase string
	// HistoryCache bounds the history service's cache of workflows'
	// mutable state, in workflows; 0 leaves Temporal's default of
	// 128,000, which closed intents fill at about 30 KB each.
	HistoryCache int
	// Stderr also receives the server's fatal errors (default
	// os.Stderr): Temporal ends the process after logging one, and its
	// log is a file in DataDir. A listener whose port was taken since it
	// was picked is not one: the start picks the ports again, and says so
	// here.
	Stderr io.Writer

	// Reserved are ports the caller binds once the server is up (dev's
	// gateway, metrics, profiler and Web UI). The server's own listeners never pick them:
	// a port dev was told to serve on must still be free when it gets
	// there.
	Reserved []int

	// pickPort picks the ports the server's listeners bind (FreePort;
	// a test's own in tests).
	pickPort func() (int, error)
}

// DefaultHistoryCache is the embedded server's history cache, in
// workflows: a dev box's worth, where an intent's run needs only its own
// while it runs (README, Memory). It is a count, not Temporal's size-based
// bound: that one weighs a workflow by its serialized size, several times
// smaller than what it holds in memory, so a bound in bytes held about
// eight times as much as it said.
const DefaultHistoryCache = 2000

// Temporal is a running embedded Temporal server.
type Temporal struct {
	server   temporal.Server
	HostPort string
	cfg      TemporalConfig
	lock     *os.File  // the data directory's lock, held while it runs
	pgLock   *pgx.Conn // with Postgres: the database's advisory lock
	dc       *dynamicClient
}

// StartTemporal starts the server and ensures the namespace and its
// retention. A second start on the same DataDir keeps every workflow.
func StartTemporal(ctx context.Context, cfg TemporalConfig) (*Temporal, error) {
	if cfg.IP == "" {
		cfg.IP = "127.0.0.1"
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "default"
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("temporal: data dir: %w", err)
	}
	if cfg.pickPort == nil {
		cfg.pickPort = FreePort
	}
	picks := newPortPicker(cfg.pickPort, append([]int{cfg.Port}, cfg.Reserved...))
	pickedFrontend := cfg.Port == 0
	if pickedFrontend {
		p, err := picks.next()
		if err != nil {
			return nil, err
		}
		cfg.Port = p
	}
	if err := portFree(cfg.IP, cfg.Port); err != nil {
		return nil, fmt.Errorf("temporal: frontend port: %w", err)
	}
	lock, err := lockDir(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	started := false
	defer func() {
		if !started {
			lock.Close()
		}
	}()
	var persistence config.Persistence
	var pgLock *pgx.Conn
	if cfg.Postgres != "" {
		main, visibility, l, err := pgStores(ctx, cfg.Postgres, cfg.PostgresDatabase)
		if err != nil {
			return nil, err
		}
		pgLock = l
		defer func() {
			if !started {
				releasePgLock(context.Background(), pgLock)
			}
		}()
		persistence = config.Persistence{
			DefaultStore:    "postgres",
			VisibilityStore: "postgres-visibility",
			// More than one shard lets history work on several workflows
			// at once; a database keeps the count it was made with.
			NumHistoryShards: 4,
			DataStores: map[string]config.DataStore{
				"postgres": {SQL: main}, "postgres-visibility": {SQL: visibility},
			},
		}
	} else {
		sqlCfg, err := sqliteStore(cfg)
		if err != nil {
			return nil, err
		}
		persistence = config.Persistence{
			DefaultStore:     sqliteplugin.PluginName,
			VisibilityStore:  sqliteplugin.PluginName,
			NumHistoryShards: 1,
			DataStores:       map[string]config.DataStore{sqliteplugin.PluginName: {SQL: sqlCfg}},
		}
	}
	if err := forgetMembers(ctx, persistence.DataStores[persistence.DefaultStore].SQL); err != nil {
		return nil, err
	}

	stderr := cmp.Or[io.Writer](cfg.Stderr, os.Stderr)
	logger := log.NewZapLogger(sayFatal(log.BuildZapLogger(log.Config{
		Level: "warn", OutputFile: filepath.Join(cfg.DataDir, "temporal-server.log"),
	}), stderr).WithOptions(zap.WithFatalHook(bindHook{})))
	var srv temporal.Server
	dc := &dynamicClient{static: dynamicConfig(cfg)}
	dc.forceSearchAttributeReadsUntil.Store(math.MaxInt64)
	for pick := 1; ; pick++ {
		serverCfg, err := liteConfig(cfg, persistence, picks)
		if err != nil {
			return nil, err
		}
		srv, err = startServer(
			temporal.WithConfig(serverCfg),
			temporal.ForServices(temporal.DefaultServices),
			temporal.WithLogger(logger),
			temporal.WithDynamicConfigClient(dc),
		)
		var taken portTaken
		if !errors.As(err, &taken) || pick == maxPortPicks {
			if err != nil {
				return nil, err
			}
			break
		}
		if !pickedFrontend && taken.port == cfg.Port {
			return nil, err // the caller's port: not ours to change
		}
		fmt.Fprintf(stderr, "temporal: %v, taken since it was picked; picking the ports again (%d of %d)\n", taken, pick+1, maxPortPicks)
		if pickedFrontend {
			if cfg.Port, err = picks.next(); err != nil {
				return nil, err
			}
		}
	}
	t := &Temporal{server: srv, HostPort: net.JoinHostPort(cfg.IP, strconv.Itoa(cfg.Port)), cfg: cfg, lock: lock, pgLock: pgLock, dc: dc}
	if err := t.ensureNamespace(ctx); err != nil {
		_ = srv.Stop()
		return nil, err
	}
	if err := t.ensureSearchAttributes(ctx); err != nil {
		_ = srv.Stop()
		return nil, err
	}
	started = true
	return t, nil
}

// maxPortPicks bounds the starts with newly picked ports.
const maxPortPicks = 5

// portTaken is a listener Temporal could not bind because its port was in
// use: a port FreePort found free that another process took before the
// server bound it. bindHook raises it as a panic where Temporal would end
// the process, and startServer returns it, so that StartTemporal picks the
// ports again.
type portTaken struct {
	port int
	err  error
}

func (p portTaken) Error() string { return p.err.Error() }

// bindHook is the embedded server's fatal hook. Temporal logs a listener
// it cannot bind as fatal, and zap then ends the process; for a port in
// use this hook panics with portTaken instead, for startServer to recover.
// Every other fatal entry still ends the process, as zap's default does:
// the hook must not return, or Temporal would go on without its listener.
type bindHook struct{}

func (bindHook) OnWrite(_ *zapcore.CheckedEntry, fields []zapcore.Field) {
	for _, f := range fields {
		err, ok := f.Interface.(error)
		if !ok || !errors.Is(err, syscall.EADDRINUSE) {
			continue
		}
		var op *net.OpError
		if errors.As(err, &op) {
			if a, ok := op.Addr.(*net.TCPAddr); ok {
				panic(portTaken{port: a.Port, err: err})
			}
		}
		panic(portTaken{err: err})
	}
	os.Exit(1)
}

// startServer makes and starts a server, and returns portTaken when one
// of its listeners found its port in use. Temporal binds them while it
// builds and starts its services, in this goroutine, so the panic comes
// here; what was started before it is stopped, and what was only built
// keeps its listeners until the process ends (a few sockets, once).
func startServer(opts ...temporal.ServerOption) (srv temporal.Server, err error) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		taken, ok := r.(portTaken)
		if !ok {
			panic(r)
		}
		if srv != nil {
			stopAbandoned(srv)
		}
		srv, err = nil, taken
	}()
	srv, err = temporal.NewServer(opts...)
	if err != nil {
		return nil, fmt.Errorf("temporal: new server: %w", err)
	}
	if err := srv.Start(); err != nil {
		return nil, fmt.Errorf("temporal: start: %w", err)
	}
	return srv, nil
}

// stopAbandoned stops a server whose start failed part way, within a
// bound: it may not stop cleanly, and the next start must not wait on it.
func stopAbandoned(srv temporal.Server) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { _ = recover() }()
		_ = srv.Stop()
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
}

// sayFatal tees l's fatal entries (and panics) to w, so that the reason a
// server ended the process is said where it was run, not only in its log.
func sayFatal(l *zap.Logger, w io.Writer) *zap.Logger {
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	enc.StacktraceKey = "" // the server's own stack: in its log
	fatal := zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.AddSync(w), zapcore.DPanicLevel)
	return l.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core { return zapcore.NewTee(c, unlessPortTaken{fatal}) }))
}

// unlessPortTaken leaves out the entries bindHook turns into portTaken:
// the start picks its ports again and says so, and the process goes on.
type unlessPortTaken struct{ zapcore.Core }

func (u unlessPortTaken) Check(ent zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if u.Enabled(ent.Level) {
		return ce.AddCore(ent, u)
	}
	return ce
}

func (u unlessPortTaken) With(fields []zapcore.Field) zapcore.Core {
	return unlessPortTaken{u.Core.With(fields)}
}

func (u unlessPortTaken) Write(ent zapcore.Entry, fields []zapcore.Field) error {
	for _, f := range fields {
		if err, ok := f.Interface.(error); ok && errors.Is(err, syscall.EADDRINUSE) {
			return nil
		}
	}
	return u.Core.Write(ent, fields)
}

// searchAttributeCacheTTL is how long a copy of the search attributes
// that the server's services cached may be older than its store: Temporal
// refreshes it a minute after it read it (searchattribute's
// cacheRefreshInterval), and a second more is a margin.
const searchAttributeCacheTTL = 61 * time.Second

// dynamicClient is the embedded server's dynamic configuration: the static
// settings, and whether every read of the search attributes goes to the
// store. That setting is Temporal's for its tests: on for good, it made
// every workflow read them from PostgreSQL several times (4.7 to 7.3
// statements an intent, 1.3 to 1.7 ms of the machine's CPU of 10.4 to
// 12.6 with 64 clients, in idemflow bench), and is on only while search
// attributes added at run time could still be missing from a service's
// copy.
type dynamicClient struct {
	static dynamicconfig.StaticClient
	// forceSearchAttributeReadsUntil is a UnixNano; past it, the services
	// read their cached copy.
	forceSearchAttributeReadsUntil atomic.Int64
}

func (d *dynamicClient) GetValue(key dynamicconfig.Key) []dynamicconfig.ConstrainedValue {
	if key == dynamicconfig.ForceSearchAttributesCacheRefreshOnRead.Key() {
		return []dynamicconfig.ConstrainedValue{{Value: time.Now().UnixNano() < d.forceSearchAttributeReadsUntil.Load()}}
	}
	return d.static.GetValue(key)
}

// ForcesSearchAttributeReads says whether the server still reads the
// search attributes from its store on every read.
func (t *Temporal) ForcesSearchAttributeReads() bool {
	return time.Now().UnixNano() < t.dc.forceSearchAttributeReadsUntil.Load()
}

// ensureSearchAttributes registers the configured search attributes that
// the namespace lacks. Every read went to the store meanwhile, so that
// none is refused as unknown; from then on the services' cached copies
// serve, once a copy read before any was added has expired.
func (t *Temporal) ensureSearchAttributes(ctx context.Context) error {
	if len(t.cfg.SearchAttributes) == 0 {
		return nil
	}
	c, err := DialTemporal(ctx, t.HostPort, t.cfg.Namespace, 30*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	added, err := schedule.AddMissingSearchAttributes(ctx, c, t.cfg.Namespace, t.cfg.SearchAttributes)
	if err != nil {
		return fmt.Errorf("temporal: %w", err)
	}
	until := time.Now()
	if added > 0 {
		until = until.Add(searchAttributeCacheTTL)
	}
	t.dc.forceSearchAttributeReadsUntil.Store(until.UnixNano())
	return nil
}

// dynamicConfig is the embedded server's static dynamic configuration.
func dynamicConfig(cfg TemporalConfig) dynamicconfig.StaticClient {
	one := func(v any) []dynamicconfig.ConstrainedValue { return []dynamicconfig.ConstrainedValue{{Value: v}} }
	dc := dynamicconfig.StaticClient{}
	if cfg.HistoryCache > 0 {
		// Temporal's default holds the mutable state of 128,000
		// workflows, closed ones included, for an hour: a dev stack grew
		// about 30 KB per intent, to 3.6 GB after 83,000. An intent's run
		// is done with its own state in seconds.
		dc[dynamicconfig.HistoryCacheHostLevelMaxSize.Key()] = one(cfg.HistoryCache)
	}
	return dc
}

// sqliteStore is the SQLite database in DataDir, its schema set up on first
// use and the namespace created in it (the server does not create one).
func sqliteStore(cfg TemporalConfig) (*config.SQL, error) {
	dbPath := filepath.Join(cfg.DataDir, "temporal.db")
	sqlCfg := &config.SQL{
		PluginName:   sqliteplugin.PluginName,
		DatabaseName: dbPath,
		// The plugin passes these keys on as pragmas, verbatim: a key it
		// does not know (such as "_journal_mode") is silently ignored by
		// SQLite. WAL keeps readers (the UI, visibility) from blocking the
		// writer, and is what lets the plugin use more than one connection;
		// busy_timeout makes a second writer wait instead of failing.
		ConnectAttributes: map[string]string{
			"mode":         "rwc",
			"journal_mode": "wal",
			"synchronous":  "2",
			"busy_timeout": "10000",
		},
		MaxConns:     4,
		MaxIdleConns: 4,
	}
	if _, err := os.Stat(dbPath); errors.Is(err, os.ErrNotExist) {
		if err := sqliteschema.SetupSchema(sqlCfg); err != nil {
			return nil, fmt.Errorf("temporal: set up SQLite schema: %w", err)
		}
	}
	ns, err := sqliteschema.NewNamespaceConfig("active", cfg.Namespace, false, cfg.SearchAttributes)
	if err != nil {
		return nil, fmt.Errorf("temporal: namespace config: %w", err)
	}
	if cfg.Retention > 0 {
		ns.Detail.Config.Retention = durationpb.New(cfg.Retention)
	}
	if err := sqliteschema.CreateNamespaces(sqlCfg, ns); err != nil {
		return nil, fmt.Errorf("temporal: create namespace: %w", err)
	}
	return sqlCfg, nil
}

// lockDir takes an exclusive lock on the data directory, so that one
// process at a time runs a server on it; the lock goes with the process,
// however it ends.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "temporal.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("temporal: lock data dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("temporal: %s is in use by another idemflow dev: %w", dir, err)
	}
	return f, nil
}

// forgetMembers empties the cluster membership a previous run left. This
// process holds the data directory's lock, so no member listed there is
// alive; a killed process's entries would otherwise stay until they expire
// (minutes), and the new ring would wait on hosts that never answer before
// it can own its shards. Temporal's own persistence call does the delete.
func forgetMembers(ctx context.Context, sqlCfg *config.SQL) error {
	db, err := persistencesql.NewSQLDB(sqlplugin.DbKindMain, sqlCfg, resolver.NewNoopResolver(), log.NewNoopLogger(), metrics.NoopMetricsHandler)
	if err != nil {
		return fmt.Errorf("temporal: open persistence: %w", err)
	}
	defer db.Close()
	if _, err := db.PruneClusterMembership(ctx, &sqlplugin.PruneClusterMembershipFilter{
		PruneRecordsBefore: time.Now().Add(100 * 365 * 24 * time.Hour),
	}); err != nil {
		return fmt.Errorf("temporal: forget the previous run's cluster members: %w", err)
	}
	return nil
}

// ensureNamespace registers the namespace where it is missing (a new
// PostgreSQL store), and sets its retention on every start, so that a
// changed setting reaches an existing store. The server may take a moment
// to answer: it is retried for up to 30 s.
func (t *Temporal) ensureNamespace(ctx context.Context) error {
	nc, err := client.NewNamespaceClient(client.Options{HostPort: t.HostPort, Logger: SilentSDKLogger()})
	if err != nil {
		return fmt.Errorf("temporal: namespace client: %w", err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	retention := t.cfg.Retention
	if retention <= 0 {
		retention = 72 * time.Hour
	}
	for {
		err = nc.Register(ctx, &workflowservice.RegisterNamespaceRequest{
			Namespace: t.cfg.Namespace, WorkflowExecutionRetentionPeriod: durationpb.New(retention),
		})
		var exists *serviceerror.NamespaceAlreadyExists
		if errors.As(err, &exists) && t.cfg.Retention > 0 {
			err = nc.Update(ctx, &workflowservice.UpdateNamespaceRequest{
				Namespace: t.cfg.Namespace,
				Config:    &namespacepb.NamespaceConfig{WorkflowExecutionRetentionTtl: durationpb.New(t.cfg.Retention)},
			})
		} else if errors.As(err, &exists) {
			err = nil
		}
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("temporal: namespace %s: %w", t.cfg.Namespace, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// StopTimeout bounds Stop. A server whose PostgreSQL store stops
// committing (a synchronous standby that is not there) never finished
// stopping: its services write their state as they stop, and those
// commits wait for ever, so SIGTERM left dev running. Past the bound the
// server is left to end with the process, as after a crash, which its
// store survives.
const StopTimeout = 10 * time.Second

// Stop stops the server, within StopTimeout, and releases the data
// directory (and database).
func (t *Temporal) Stop() error {
	done := make(chan error, 1)
	go func() { done <- t.server.Stop() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(StopTimeout):
		err = fmt.Errorf("temporal: not stopped within %s (is its store committing?); it ends with the process", StopTimeout)
	}
	if t.pgLock != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		releasePgLock(ctx, t.pgLock)
		cancel()
	}
	t.lock.Close()
	return err
}

func liteConfig(cfg TemporalConfig, persistence config.Persistence, picks *portPicker) (*config.Config, error) {
	frontendAddr := net.JoinHostPort(cfg.IP, strconv.Itoa(cfg.Port))
	c := &config.Config{}
	c.Global.Membership = config.Membership{MaxJoinDuration: 30 * time.Second, BroadcastAddress: "127.0.0.1"}
	c.Persistence = persistence
	c.ClusterMetadata = &cluster.Config{
		EnableGlobalNamespace:    false,
		FailoverVersionIncrement: 10,
		MasterClusterName:        "active",
		CurrentClusterName:       "active",
		ClusterInformation: map[string]cluster.ClusterInformation{
			"active": {Enabled: true, InitialFailoverVersion: 1, RPCAddress: frontendAddr},
		},
	}
	c.DCRedirectionPolicy = config.DCRedirectionPolicy{Policy: "noop"}
	c.Services = map[string]config.Service{}
	for _, name := range []string{"frontend", "history", "matching", "worker"} {
		grpcPort := cfg.Port
		if name != "frontend" {
			p, err := picks.next()
			if err != nil {
				return nil, err
			}
			grpcPort = p
		}
		memberPort, err := picks.next()
		if err != nil {
			return nil, err
		}
		svc := config.Service{RPC: config.RPC{GRPCPort: grpcPort, MembershipPort: memberPort, BindOnLocalHost: true}}
		if name == "frontend" {
			svc.RPC.BindOnLocalHost = false
			svc.RPC.BindOnIP = cfg.IP
		}
		c.Services[name] = svc
	}
	c.Archival = config.Archival{
		History:    config.HistoryArchival{State: "disabled"},
		Visibility: config.VisibilityArchival{State: "disabled"},
	}
	c.NamespaceDefaults = config.NamespaceDefaults{Archival: config.ArchivalNamespaceDefaults{
		History:    config.HistoryArchivalNamespaceDefaults{State: "disabled"},
		Visibility: config.VisibilityArchivalNamespaceDefaults{State: "disabled"},
	}}
	c.PublicClient = config.PublicClient{HostPort: frontendAddr}
	return c, nil
}

// portPicker hands out the ports of one start's listeners. Each port it
// hands out is free when picked, as FreePort's are, and also one it never
// handed out before and not one the caller reserved: a port is free until
// its listener binds it, so a second pick within one start could return
// it again, and the start's own listeners would collide (the start then
// picks all its ports again), or take dev's gateway port before dev
// binds it.
type portPicker struct {
	pick func() (int, error)
	used map[int]bool
}

func newPortPicker(pick func() (int, error), reserved []int) *portPicker {
	p := &portPicker{pick: pick, used: map[int]bool{}}
	for _, port := range reserved {
		if port != 0 {
			p.used[port] = true
		}
	}
	return p
}

// next is a free port not handed out or reserved before.
func (p *portPicker) next() (int, error) {
	for range 100 {
		port, err := p.pick()
		if err != nil {
			return 0, err
		}
		if !p.used[port] {
			p.used[port] = true
			return port, nil
		}
	}
	return 0, errors.New("temporal: every port picked was one this start already uses")
}

// FreePort finds a free loopback port for a listener of Temporal's (its
// frontend, a service's gRPC or membership listener) or of a process a
// test starts. It is below the kernel's ephemeral range: a port found
// free by listening on :0 is an ephemeral one, which the kernel may hand
// to any outgoing connection before the server binds it, and Temporal's
// failed bind ends the process (TemporalConfig.Stderr says why). It is
// below 32768 too: Temporal keeps its ports in
// cluster_membership.rpc_port, a SMALLINT in PostgreSQL.
func FreePort() (int, error) {
	hi := min(32768, ephemeralLow())
	for range 200 {
		p := 10000 + rand.IntN(hi-10000)
		if portFree("127.0.0.1", p) == nil {
			return p, nil
		}
	}
	return 0, fmt.Errorf("temporal: no free port between 10000 and %d", hi)
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux;
// 32768 where it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	var low int
	if _, err := fmt.Sscan(string(b), &low); err != nil || low <= 10000 {
		return 32768
	}
	return low
}

func portFree(ip string, port int) error {
	l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("%s:%d is in use (another idemflow dev or Temporal?): %w", ip, port, err)
	}
	return l.Close()
}

// DialTemporal is the harness's one Temporal client dial (chaos's checks,
// against its own stack or a deployment): plain gRPC, the SDK's logs
// dropped, retried until the server answers or within passes, since a
// server starting alongside may need a moment.
func DialTemporal(ctx context.Context, hostPort, namespace string, within time.Duration) (client.Client, error) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for {
		c, err := client.DialContext(ctx, client.Options{HostPort: hostPort, Namespace: namespace, Logger: SilentSDKLogger()})
		if err == nil {
			return c, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("temporal at %s: %w", hostPort, err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// SilentSDKLogger is a Temporal SDK logger that drops every line: for the
// clients of the dev and test harness (start-up polling, chaos's checks),
// which report what matters themselves. One, for every such client.
func SilentSDKLogger() sdklog.Logger {
	return sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))
}
