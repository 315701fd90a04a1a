package cli

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/idemflow/idemflow/httptool"
	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/internal/audit"
	"github.com/idemflow/idemflow/internal/metrics"
	"github.com/idemflow/idemflow/internal/pgurl"
	"github.com/idemflow/idemflow/internal/registry"
	"github.com/idemflow/idemflow/internal/replication"
	"github.com/idemflow/idemflow/internal/schedule"
	"github.com/idemflow/idemflow/internal/service"
	"github.com/idemflow/idemflow/internal/tenant"
	"github.com/idemflow/idemflow/internal/tooling/roundtrip"
	"github.com/idemflow/idemflow/internal/tracing"
	"github.com/idemflow/idemflow/migrations"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/contrib/envconfig"
	sdklog "go.temporal.io/sdk/log"
)

// common settings of the commands that talk to PostgreSQL and Temporal.
type common struct {
	databaseURL string
	temporal    string
	namespace   string
	retention   durationFlag
	tls         temporalTLS
	// devPool bounds the pool when the URL sets no pool_max_conns, as a
	// dev stack needs (0: pgxpool's default, the larger of 4 and the
	// CPUs, which on a laptop is 16).
	devPool int32
	// sql and rpcs, when set, count the process's round trips to
	// PostgreSQL and Temporal (bench's own replica).
	sql  *roundtrip.SQL
	rpcs *roundtrip.RPCs
}

func (c *common) register(fs *flag.FlagSet) {
	c.registerTemporal(fs)
	fs.StringVar(&c.databaseURL, "database-url", "", "PostgreSQL URL (env DATABASE_URL)")
	c.registerRetention(fs)
}

// registerTemporal registers the settings that reach a Temporal server.
// What they leave unset comes from Temporal's own client configuration
// (resolveTemporal): the variables and TOML profiles the Temporal CLI and
// its samples read.
func (c *common) registerTemporal(fs *flag.FlagSet) {
	fs.StringVar(&c.temporal, "temporal-address", "", "Temporal frontend host:port; default: the Temporal CLI profile's, else 127.0.0.1:7233 (env TEMPORAL_ADDRESS)")
	c.tls.register(fs)
	fs.StringVar(&c.namespace, "namespace", "", "Temporal namespace; default: the Temporal CLI profile's, else default (env TEMPORAL_NAMESPACE)")
}

func (c *common) registerNamespace(fs *flag.FlagSet) {
	fs.StringVar(&c.namespace, "namespace", "default", "Temporal namespace (env TEMPORAL_NAMESPACE)")
}

// resolveTemporal fills the Temporal settings the flags (and their
// variables, and a dev stack's dev.env) left unset from Temporal's client
// configuration, as the Temporal CLI does: the TOML profile
// (TEMPORAL_CONFIG_FILE, TEMPORAL_PROFILE) and the TEMPORAL_* variables
// (TEMPORAL_API_KEY, TEMPORAL_TLS_CLIENT_CERT_PATH, …). A flag always wins;
// TLS comes from the profile only when no --temporal-tls* flag or API key
// is given.
func (c *common) resolveTemporal() error {
	profile, err := envconfig.LoadClientConfigProfile(envconfig.LoadClientConfigProfileOptions{EnvLookup: nonEmptyEnv{}})
	if err != nil {
		return fmt.Errorf("%w: Temporal client configuration: %w", errUsage, err)
	}
	c.temporal = cmp.Or(c.temporal, profile.Address, "127.0.0.1:7233")
	c.namespace = cmp.Or(c.namespace, profile.Namespace, "default")
	if !c.tls.given() {
		c.tls.profile = &profile
	}
	return nil
}

func (c *common) registerRetention(fs *flag.FlagSet) {
	c.retention = durationFlag(idem.DefaultRetention)
	fs.Var(&c.retention, "record-retention", "how long finished idempotency records are kept, e.g. 7d or 48h (env IDEMFLOW_RECORD_RETENTION)")
}

// registerLocal registers the settings that do not name a Temporal server,
// for dev, whose Temporal is embedded.
func (c *common) registerLocal(fs *flag.FlagSet) {
	fs.StringVar(&c.databaseURL, "database-url", "", "PostgreSQL URL (env DATABASE_URL)")
	c.registerNamespace(fs)
	c.registerRetention(fs)
}

// durationFlag is a time.Duration that also accepts whole days ("7d").
type durationFlag time.Duration

func (d *durationFlag) String() string { return time.Duration(*d).String() }
func (d *durationFlag) Set(s string) error {
	v, err := parseDuration(s)
	if err != nil {
		return err
	}
	*d = durationFlag(v)
	return nil
}

func parseDuration(s string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil || days < 0 {
			return 0, fmt.Errorf("bad duration %q", s)
		}
		return time.Duration(days) * 24 * time.Hour, nil
	}
	return time.ParseDuration(s)
}

// deps are a running process's connections and the service assembled on
// them (service.New).
type deps struct {
	*service.Service
	Tenants   *tenant.Store
	namespace string
}

func openDeps(ctx context.Context, logger *slog.Logger, set *registry.Set, tools *httptool.Set, c common) (*deps, error) {
	if c.databaseURL == "" {
		return nil, fmt.Errorf("%w: DATABASE_URL (or --database-url) is required", errUsage)
	}
	tr, err := tracing.FromEnv(ctx, lookupEnv, "idemflow")
	if err != nil {
		return nil, fmt.Errorf("%w: tracing: %w", errUsage, err)
	}
	interceptors, err := tr.Interceptors()
	if err != nil {
		return nil, err
	}
	poolCfg, err := pgurl.ParsePoolConfig(c.databaseURL)
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	if c.devPool > 0 && !strings.Contains(c.databaseURL, "pool_max_conns") {
		poolCfg.MaxConns = min(poolCfg.MaxConns, c.devPool)
	}
	tr.Pool(poolCfg)
	if c.sql != nil {
		c.sql.Pool(poolCfg)
	}
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	if err := waitDatabase(ctx, logger, pool, set.Schemas()); err != nil {
		pool.Close()
		return nil, err
	}
	if err := audit.RequireConstraints(ctx, pool, set.Guards()); err != nil {
		pool.Close()
		return nil, err
	}
	if pgurl.AnyHost(poolCfg.ConnConfig) {
		logger.Warn("the database URL names several hosts and lets a connection stay on any of them: one may reach a standby, where every write fails; add target_session_attrs=read-write (docs/production.md)")
	}
	reg := metrics.New()
	reg.WatchPool(pool)
	reportReplication(ctx, logger, pool, reg)
	reg.WatchCommits(logger, replication.CommitsBlocked(pool))
	base := client.Options{MetricsHandler: reg.SDK, Interceptors: interceptors}
	if c.rpcs != nil {
		c.rpcs.Client(&base)
	}
	tc, err := dialTemporal(ctx, logger, c.temporal, c.namespace, c.tls, base)
	if err != nil {
		pool.Close()
		return nil, err
	}
	// A server started alongside may answer before its namespace exists
	// (dev and 'idemflow temporal' create it a moment after listening):
	// that is not ready yet, within the same bound as a server that does
	// not answer.
	if err := waitNamespace(ctx, logger, tc, c.namespace); err != nil {
		tc.Close()
		pool.Close()
		return nil, err
	}
	// Every role registers the search attributes (idempotently), so that
	// whichever starts first, intents carry them from their first run.
	searchable := true
	if err := schedule.EnsureSearchAttributes(ctx, tc, c.namespace); err != nil {
		searchable = false
		logger.Warn("search attributes not registered: intents start without them and the Web UI cannot filter them by key; "+
			"register them on the namespace (README, Operations)", "error", err)
	}
	return &deps{
		Service: service.New(service.Config{
			Pool: pool, Temporal: tc, Set: set, Tools: tools, Logger: logger, Metrics: reg, Tracing: tr,
			Retention: idem.Retention{Default: time.Duration(c.retention)}, Searchable: searchable,
		}),
		Tenants:   tenant.NewStore(pool),
		namespace: c.namespace,
	}, nil
}

// reportReplication tells the operator, at start, whether a commit
// idemflow acknowledges survives a failover to a standby, and records it
// (idemflow_database_failover_safe): a warning when standbys exist and a
// promotion could lose acknowledged answers, never a refusal to start.
func reportReplication(ctx context.Context, logger *slog.Logger, q replication.Querier, reg *metrics.Registry) {
	r, err := replication.Check(ctx, q)
	if err != nil {
		logger.Warn("database replication could not be read: whether an acknowledged answer survives a failover is unknown", "error", err)
		reg.Replication(false, 0, 0)
		return
	}
	var sync int
	for _, s := range r.Standbys {
		if s.Synchronous() {
			sync++
		}
	}
	reg.Replication(r.Safe(), sync, len(r.Standbys)-sync)
	if b := r.Blocked(); b != "" {
		logger.Error(b, "replication", r.Summary())
	}
	if w := r.Warning(); w != "" {
		logger.Warn(w, "replication", r.Summary())
		return
	}
	logger.Info("database replication", "summary", r.Summary(), "failover_safe", r.Safe())
}

// dialTemporal connects a client; base carries what a process adds (its
// metrics handler, its tracing interceptors).
func dialTemporal(ctx context.Context, logger *slog.Logger, hostPort, namespace string, conn temporalTLS, base client.Options) (client.Client, error) {
	sdkLogger := slog.New(&levelFloor{Handler: logger.Handler(), floor: slog.LevelWarn}).With("component", "temporal-sdk")
	opts := client.Options{HostPort: hostPort, Namespace: namespace, Logger: sdklog.NewStructuredLogger(sdkLogger),
		MetricsHandler: base.MetricsHandler, Interceptors: base.Interceptors}
	opts.ConnectionOptions.DialOptions = base.ConnectionOptions.DialOptions
	if err := conn.apply(&opts); err != nil {
		return nil, err
	}
	// A server starting alongside (compose, Kubernetes, or dev) may not
	// listen yet: a role waits for it as long as for its namespace.
	deadline := time.Now().Add(temporalReadyWait)
	for attempt := 1; ; attempt++ {
		c, err := client.DialContext(ctx, opts)
		if err == nil {
			return c, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("connect to Temporal at %s (not ready within %v?): %w", hostPort, temporalReadyWait, err)
		}
		if attempt%10 == 1 {
			logger.Warn("Temporal not reachable yet; retrying", "address", hostPort, "attempt", attempt, "error", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// waitDatabase waits, up to temporalReadyWait, until PostgreSQL answers
// and holds every migration this binary knows: a process manager may start
// a role before the database, or before the migrations' job (a Helm
// hook, compose's migrate) has run. A role never migrates by itself: two
// releases' roles starting together must not race to change the schema.
func waitDatabase(ctx context.Context, logger *slog.Logger, pool *pgxpool.Pool, schemas []migrations.Schema) error {
	deadline := time.Now().Add(temporalReadyWait)
	for attempt := 1; ; attempt++ {
		err := pool.Ping(ctx)
		pending := 0
		if err == nil {
			if pending, err = migrations.Pending(ctx, pool, schemas...); err == nil && pending == 0 {
				return nil
			}
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("reach database (not ready within %v?): %w", temporalReadyWait, err)
			}
			return fmt.Errorf("the database lacks %d migration(s) after %v: run 'idemflow migrate' (docs/operations.md)", pending, temporalReadyWait)
		}
		if err != nil {
			logger.Warn("PostgreSQL not reachable yet; retrying", "attempt", attempt, "error", err)
		} else {
			logger.Warn("the database lacks migrations: waiting for 'idemflow migrate'", "pending", pending, "attempt", attempt)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// waitNamespace waits, up to temporalReadyWait, until namespace exists.
func waitNamespace(ctx context.Context, logger *slog.Logger, tc client.Client, namespace string) error {
	deadline := time.Now().Add(temporalReadyWait)
	for attempt := 1; ; attempt++ {
		callCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
		_, err := tc.WorkflowService().DescribeNamespace(callCtx, &workflowservice.DescribeNamespaceRequest{Namespace: namespace})
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || !notReady(err) || time.Now().After(deadline) {
			return fmt.Errorf("namespace %s on Temporal (not ready within %v?): %w", namespace, temporalReadyWait, err)
		}
		logger.Warn("Temporal namespace not ready yet; retrying", "namespace", namespace, "attempt", attempt, "error", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func (d *deps) Close() {
	d.Temporal.Close()
	_ = d.Metrics.Close()
	d.Pool.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := d.Tracing.Shutdown(ctx); err != nil {
		d.Logger.Warn("flush traces", "error", err)
	}
}

// levelFloor drops records below floor: the SDK logs every poll at info.
type levelFloor struct {
	slog.Handler
	floor slog.Level
}

func (h *levelFloor) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.floor && h.Handler.Enabled(ctx, l)
}
func (h *levelFloor) WithAttrs(a []slog.Attr) slog.Handler {
	return &levelFloor{Handler: h.Handler.WithAttrs(a), floor: h.floor}
}
func (h *levelFloor) WithGroup(n string) slog.Handler {
	return &levelFloor{Handler: h.Handler.WithGroup(n), floor: h.floor}
}

func connect(ctx context.Context, dbURL string) (*pgx.Conn, error) {
	conn, err := pgurl.Connect(ctx, dbURL)
	if err != nil {
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	return conn, nil
}

// idemStore is a record store over q with default retention, for commands
// that only read.
func idemStore(q idem.Querier) *idem.Store { return idem.NewStore(q, idem.Retention{}, nil) }

// nonEmptyEnv is the process environment as envconfig reads it, with
// empty variables left out (lookupEnv's rule): an empty TEMPORAL_ADDRESS is
// unset here too, not an address that overrides the profile's.
type nonEmptyEnv struct{}

func (nonEmptyEnv) Environ() []string {
	var out []string
	for _, kv := range os.Environ() {
		if _, v, _ := strings.Cut(kv, "="); strings.TrimSpace(v) != "" {
			out = append(out, kv)
		}
	}
	return out
}

func (nonEmptyEnv) LookupEnv(key string) (string, bool) { return lookupEnv(key) }
