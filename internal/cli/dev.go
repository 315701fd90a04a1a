//go:build !nodev

package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/internal/apperr"
	"github.com/idemflow/idemflow/internal/metrics"
	"github.com/idemflow/idemflow/internal/pgurl"
	"github.com/idemflow/idemflow/internal/registry"
	"github.com/idemflow/idemflow/internal/tenant"
	"github.com/idemflow/idemflow/internal/tooling/demo"
	"github.com/idemflow/idemflow/internal/tooling/devserver"
	"github.com/idemflow/idemflow/migrations"
	"github.com/idemflow/idemflow/workflows"
)

// devCommands are the development and proving tools: the commands that
// embed a Temporal server (dev, temporal) or start a private PostgreSQL
// (postgres), and chaos, bench and the demo, which drive a stack. They
// are built in by default, so that one binary serves development, and
// left out of the production build with -tags nodev, which then holds no
// go.temporal.io/server package (scripts/lint.sh checks it).
var devCommands = map[string]command{
	"bench":    {"measure the gateway beside a bare Temporal workflow and a PostgreSQL-only reference, as ratios", runBench},
	"chaos":    {"kill and restart every part while agents retry; check no intent is duplicated, lost or stuck", runChaos},
	"demo":     {"replay a lost-answer incident against a running gateway: idemflow's client beside a naive one", runDemo},
	"dev":      {"run the whole stack in one process: embedded Temporal and its Web UI, worker, gateway", runDev},
	"postgres": {"ensure a PostgreSQL server (reachable or private) and print its admin URL", runPostgres},
	"temporal": {"run the embedded Temporal server alone, on PostgreSQL, for a stack of separate processes (chaos, multi-process tests)", runTemporal},
}

// DemoTenant is the tenant dev creates when no bootstrap tokens are given.
const DemoTenant = "demo"

func runDev(ctx context.Context, env *Env, args []string) error {
	var c common
	var sched scheduleFlags
	var dm demoFlags
	fs := flags("dev", env)
	c.registerLocal(fs)
	sched.register(fs)
	dm.register(fs)
	var bindings bindingsFlag
	bindings.register(fs)
	withDemo := fs.Bool("demo", false, "once the stack is up, run the demo agent and print its report")
	var gw gatewayConfig
	gw.register(fs)
	var tf temporalFlags
	tf.register(fs, 8233)
	temporalPort, uiPort, dataDir, nsRetention := &tf.port, &tf.uiPort, &tf.dataDir, tf.retention
	var toolsFile string
	registerTools(fs, &toolsFile)
	store := fs.String("temporal-store", "", "where the embedded Temporal keeps its data: postgres (beside idemflow's database) or sqlite (in --data-dir); default postgres, or sqlite for a data dir that already has a temporal.db (env IDEMFLOW_TEMPORAL_STORE)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := env.useTools(toolsFile, true); err != nil {
		return err
	}
	log := env.Logger
	if err := sched.check(log, time.Duration(c.retention)); err != nil {
		return err
	}
	if err := gw.check(); err != nil {
		return err
	}
	if err := os.MkdirAll(*dataDir, 0o755); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	log, progress, requestLevel, closeLog, err := devConsole(env.Stderr, *dataDir)
	if err != nil {
		return err
	}
	defer closeLog()
	gw.requestLogLevel = requestLevel

	// PostgreSQL: DATABASE_URL, else a reachable local server, else a
	// private one from the installed binaries.
	var pg *devserver.Postgres
	if c.databaseURL == "" {
		var err error
		pg, err = devserver.EnsurePostgres(ctx, *dataDir, 0, log)
		if err != nil {
			return err
		}
		defer func() {
			if err := pg.Stop(context.WithoutCancel(ctx)); err != nil {
				log.Warn("stop private PostgreSQL", "error", err)
			}
		}()
		if c.databaseURL, err = devserver.EnsureDatabase(ctx, pg.AdminURL, "idemflow"); err != nil {
			return err
		}
	} else if created, err := devserver.EnsureDatabaseOf(ctx, c.databaseURL); err != nil {
		return err
	} else if created {
		// As for Temporal's two databases: dev makes what it needs.
		log.Info("created the database --database-url names", "database", databaseName(c.databaseURL))
	}
	applied, err := migrations.MigrateEach(ctx, c.databaseURL, env.Set.Schemas()...)
	if err != nil {
		return err
	}
	for _, a := range applied {
		if a.Name == "" {
			log.Info("database migrated", "from", a.From, "to", a.To)
		} else {
			log.Info("database migrated", "operation", a.Name, "from", a.From, "to", a.To)
		}
	}

	tcfg := devserver.TemporalConfig{
		DataDir:      filepath.Join(*dataDir, "temporal"),
		Port:         *temporalPort,
		Namespace:    c.namespace,
		Retention:    time.Duration(*nsRetention),
		HistoryCache: tf.historyCache,
		Stderr:       env.Stderr,
		// Registered before the worker and the gateway start.
		SearchAttributes: workflows.SearchAttributes(),
		// dev binds these once Temporal is up.
		Reserved: append(gw.ports(), *uiPort),
	}
	if err := chooseTemporalStore(log, &tcfg, *store, c.databaseURL); err != nil {
		return err
	}
	tsrv, stopTemporal, err := startTemporal(ctx, log, tcfg)
	if err != nil {
		return err
	}
	defer stopTemporal()
	c.temporal = tsrv.HostPort
	log.Info("temporal server running", "address", tsrv.HostPort, "namespace", c.namespace, "retention", time.Duration(*nsRetention),
		"store", map[bool]string{true: "postgres " + tcfg.PostgresDatabase, false: "sqlite"}[tcfg.Postgres != ""])

	// --ui-port 0 serves no Web UI (as -h says): the banner, the env file
	// and the demo then name none.
	uiURL, uiLine := "", "(none: --ui-port 0)"
	if *uiPort != 0 {
		ui, err := devserver.StartUI("127.0.0.1", *uiPort, tsrv.HostPort, c.namespace)
		if err != nil {
			return err
		}
		defer ui.Stop()
		uiURL = ui.URL
		uiLine = ui.URL + "/namespaces/" + c.namespace + "/workflows"
	}

	// A dev stack shares its server with others (a second stack, the
	// tests): it holds a handful of connections, not one per core.
	c.devPool = devPoolMaxConns
	d, err := openDeps(ctx, log, env.Set, env.Tools, c)
	if err != nil {
		return err
	}
	defer d.Close()
	token, tenantID, err := bootstrapTokens(ctx, d, bindings, *dataDir)
	if err != nil {
		return err
	}
	return runParts(ctx, log, d, roles{worker: true, gateway: true}, parts{databaseURL: c.databaseURL, temporal: c.temporal, sched: &sched, gw: gw, ready: func(addr net.Addr) {
		gw := "http://" + addr.String()
		writeDevEnv(*dataDir, gw, uiURL, tenantID, token, c.databaseURL, tsrv.HostPort, c.namespace, toolsFile)
		fmt.Fprintf(env.Stdout, `
idemflow dev is up (Ctrl-C stops it; data in %s)
  gateway      %s
  temporal     %s  namespace %s
  temporal ui  %s
  metrics      %s/metrics
  tenant       %s
  token        %s
%s`, *dataDir, gw, tsrv.HostPort, c.namespace, uiLine, gw, tenantID, token, tryIt(ctx, d.Set, d.Records, gw, token, tenantID, selfCommand()))
		if *withDemo {
			cfg := dm.cfg
			cfg.BaseURL, cfg.Token, cfg.Tenant, cfg.DatabaseURL = gw, token, tenantID, c.databaseURL
			cfg.UIURL, cfg.Namespace = uiURL, c.namespace
			cfg.StoreDir = filepath.Join(*dataDir, "demo-intents")
			cfg.Out, cfg.Progress = env.Stdout, progress
			go func() {
				fmt.Fprintln(env.Stdout, "\nrunning the demo agent...")
				if _, _, err := demo.Run(ctx, cfg); err != nil && ctx.Err() == nil {
					log.Error("demo", "error", err)
					return
				}
				fmt.Fprintln(env.Stdout, "\nThe stack keeps running; Ctrl-C stops it.")
			}()
		}
	}})
}

// tryIt is the banner's example: a curl of the first operation that
// declares an example request (op.Spec.Example), or nothing. Its key is
// the first demo-N the tenant has no intent under, so that "run twice"
// holds after a restart too (demo-1 then already replays); self is how
// this program is run from here (selfCommand).
func tryIt(ctx context.Context, set *registry.Set, records *idem.Store, gateway, token, tenantID, self string) string {
	route, body, ok := set.Example()
	if !ok {
		return ""
	}
	key := "demo-1"
	for n := 1; n <= 100; n++ {
		key = fmt.Sprintf("demo-%d", n)
		if _, err := records.Get(ctx, tenantID, key); errors.Is(err, apperr.ErrNotFound) {
			break
		}
	}
	return fmt.Sprintf(`
try it (run twice: the second answer is a replay):
  curl -i -X POST %s%s \
    -H 'Authorization: Bearer %s' \
    -H 'Idempotency-Key: %s' -H 'Content-Type: application/json' \
    -d '%s'
then find it: %s inspect %s %s, or IdempotencyKey="%s" in the Web UI's filter
`, gateway, route, token, key, body, self, tenantID, key, key)
}

// selfCommand is how a person runs this program from the current
// directory: "idemflow" when that is what PATH finds, else its path
// relative to here (bin/idemflow after scripts/run.sh), else its
// absolute path.
func selfCommand() string {
	exe, err := os.Executable()
	if err != nil {
		return "idemflow"
	}
	wd, _ := os.Getwd()
	return commandFor(exe, wd, exec.LookPath)
}

func commandFor(exe, wd string, lookPath func(string) (string, error)) string {
	if found, err := lookPath("idemflow"); err == nil {
		if a, b := resolved(found), resolved(exe); a == b {
			return "idemflow"
		}
	}
	if rel, err := filepath.Rel(wd, exe); err == nil && !strings.HasPrefix(rel, "..") {
		if !strings.Contains(rel, string(filepath.Separator)) {
			return "./" + rel
		}
		return rel
	}
	return exe
}

func resolved(path string) string {
	if p, err := filepath.EvalSymlinks(path); err == nil {
		return p
	}
	return path
}

// devPoolMaxConns bounds a dev stack's own pool, unless its URL sets
// pool_max_conns.
const devPoolMaxConns = 8

// chooseTemporalStore points the embedded Temporal at PostgreSQL, in
// databases named after idemflow's (<db>_temporal and
// <db>_temporal_visibility on the same server), so that dev is shaped like
// production and not bounded by one SQLite writer. A data directory that
// already holds a SQLite store keeps it unless told otherwise: its
// workflow histories are not moved.
func databaseName(u string) string {
	cfg, err := pgurl.ParseConfig(u)
	if err != nil {
		return "?"
	}
	return cfg.Database
}

func chooseTemporalStore(log *slog.Logger, cfg *devserver.TemporalConfig, store, databaseURL string) error {
	sqliteFile := filepath.Join(cfg.DataDir, "temporal.db")
	if store == "" {
		store = "postgres"
		if _, err := os.Stat(sqliteFile); err == nil {
			store = "sqlite"
			log.Info("keeping the embedded Temporal in SQLite, as this data directory has "+sqliteFile+
				"; to move to PostgreSQL, stop dev and pass --temporal-store postgres (or delete that file):"+
				" Temporal's workflow histories there are not moved, idemflow's records and rows in PostgreSQL are kept", "file", sqliteFile)
		}
	}
	switch store {
	case "sqlite":
		return nil
	case "postgres":
		pc, err := pgurl.ParseConfig(databaseURL)
		if err != nil {
			return fmt.Errorf("temporal store: %w", err)
		}
		cfg.Postgres, cfg.PostgresDatabase = databaseURL, pc.Database+"_temporal"
		return nil
	}
	return fmt.Errorf("%w: --temporal-store is postgres or sqlite, not %q", errUsage, store)
}

// bootstrapTokens stores the --bootstrap-tokens bindings, or makes (once,
// kept in the data directory) a token for the demo tenant. It returns a
// token to print and its tenant.
func bootstrapTokens(ctx context.Context, d *deps, bindings bindingsFlag, dataDir string) (token, tenantID string, err error) {
	if len(bindings) == 0 {
		path := filepath.Join(dataDir, "demo-token")
		b, rerr := os.ReadFile(path)
		tok := strings.TrimSpace(string(b))
		if errors.Is(rerr, os.ErrNotExist) || tok == "" {
			if tok, err = tenant.NewToken(); err != nil {
				return "", "", err
			}
			if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
				return "", "", fmt.Errorf("save demo token: %w", err)
			}
		}
		bindings = bindingsFlag{{Tenant: DemoTenant, Token: tok}}
	}
	if err := applyBindings(ctx, d, bindings); err != nil {
		return "", "", err
	}
	// The dev stack's tenants get the operations' demo data (an order
	// catalog); a deployment's migrations seed none.
	for _, b := range bindings {
		if err := d.Set.Seed(ctx, d.Pool, b.Tenant); err != nil {
			return "", "", err
		}
	}
	return bindings[0].Token, bindings[0].Tenant, nil
}

// writeDevEnv leaves the running stack's coordinates for scripts (the demo).
func writeDevEnv(dataDir, gateway, ui, tenantID, token, databaseURL, temporalAddr, namespace, toolsFile string) {
	content := fmt.Sprintf("IDEMFLOW_URL=%s\nIDEMFLOW_UI_URL=%s\nIDEMFLOW_TENANT=%s\nIDEMFLOW_TOKEN=%s\nDATABASE_URL=%s\nTEMPORAL_ADDRESS=%s\nTEMPORAL_NAMESPACE=%s\nIDEMFLOW_PID=%d\n",
		gateway, ui, tenantID, token, databaseURL, temporalAddr, namespace, os.Getpid())
	if toolsFile != "" {
		// So that mcp, inspect and audit beside the stack know its tools.
		if abs, err := filepath.Abs(toolsFile); err == nil {
			content += "IDEMFLOW_TOOLS=" + abs + "\n"
		}
	}
	_ = os.WriteFile(filepath.Join(dataDir, "dev.env"), []byte(content), 0o600)
}

func runPostgres(ctx context.Context, env *Env, args []string) error {
	fs := flags("postgres", env)
	dataDir := fs.String("data-dir", "./.idemflow", "where a private server keeps its files (env IDEMFLOW_DATA_DIR)")
	port := fs.Int("port", devserver.DefaultPrivatePort, "port of a private server")
	stop := fs.Bool("stop", false, "stop the private server in --data-dir instead")
	private := fs.Bool("private", false, "only the private server on --port (started when it is not running), never a machine's own on 5432; it has room for many connections (max_connections 300)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *stop {
		return devserver.StopPrivatePostgres(ctx, *dataDir)
	}
	ensure := devserver.EnsurePostgres
	if *private {
		ensure = devserver.EnsurePrivatePostgres
	}
	pg, err := ensure(ctx, *dataDir, *port, env.Logger)
	if err != nil {
		return err
	}
	fmt.Fprintln(env.Stdout, pg.AdminURL)
	return nil
}

// runTemporal runs only the embedded Temporal server, with its data in
// PostgreSQL beside idemflow's database, so that gateways and workers in
// other processes share it and it can be killed and restarted on its own.
func runTemporal(ctx context.Context, env *Env, args []string) error {
	fs := flags("temporal", env)
	dbURL := fs.String("database-url", "", "idemflow's PostgreSQL; Temporal keeps its data in <db>_temporal and <db>_temporal_visibility there (env DATABASE_URL)")
	namespace := fs.String("namespace", "default", "namespace to create (env TEMPORAL_NAMESPACE)")
	var tf temporalFlags
	tf.register(fs, 0)
	port, uiPort, dataDir, nsRetention := &tf.port, &tf.uiPort, &tf.dataDir, tf.retention
	metricsAddr := fs.String("metrics-addr", "", "serve this process's /metrics (its memory and goroutines, for bench --soak) on this address, e.g. 127.0.0.1:9465 (env IDEMFLOW_METRICS_ADDR)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *dbURL == "" {
		return fmt.Errorf("%w: temporal needs --database-url", errUsage)
	}
	if *metricsAddr != "" {
		ln, err := net.Listen("tcp", *metricsAddr)
		if err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
		srv := newHTTPServer(metrics.New().Handler(), false)
		defer srv.Close()
		go func() { _ = srv.Serve(ln) }()
	}
	tcfg := devserver.TemporalConfig{
		DataDir:      filepath.Join(*dataDir, "temporal"),
		Port:         *port,
		Namespace:    *namespace,
		Retention:    time.Duration(*nsRetention),
		HistoryCache: tf.historyCache,
		Stderr:       env.Stderr,
		Reserved:     []int{*uiPort}, // bound once Temporal is up
		// Registered before idemflow's processes connect.
		SearchAttributes: workflows.SearchAttributes(),
	}
	if err := chooseTemporalStore(env.Logger, &tcfg, "postgres", *dbURL); err != nil {
		return err
	}
	tsrv, stopTemporal, err := startTemporal(ctx, env.Logger, tcfg)
	if err != nil {
		return err
	}
	defer stopTemporal()
	if *uiPort != 0 {
		ui, err := devserver.StartUI("127.0.0.1", *uiPort, tsrv.HostPort, *namespace)
		if err != nil {
			return err
		}
		defer ui.Stop()
	}
	env.Logger.Info("temporal server running", "address", tsrv.HostPort, "namespace", *namespace, "store", "postgres "+tcfg.PostgresDatabase)
	<-ctx.Done()
	return nil
}

// temporalFlags are the embedded Temporal server's settings, shared by dev
// and temporal.
type temporalFlags struct {
	port, uiPort int
	dataDir      string
	retention    *durationFlag
	historyCache int
}

// register adds the flags; uiPort is the Web UI's default port (0: none).
func (t *temporalFlags) register(fs *flag.FlagSet, uiPort int) {
	fs.IntVar(&t.port, "temporal-port", 7233, "embedded Temporal frontend port (env IDEMFLOW_TEMPORAL_PORT)")
	usage := "serve the Temporal Web UI on this port; 0 serves none (env IDEMFLOW_UI_PORT)"
	fs.IntVar(&t.uiPort, "ui-port", uiPort, usage)
	fs.StringVar(&t.dataDir, "data-dir", "./.idemflow", "where Temporal (and a private PostgreSQL) keep their files (env IDEMFLOW_DATA_DIR)")
	r := durationFlag(72 * time.Hour)
	t.retention = &r
	fs.Var(t.retention, "temporal-retention", "how long Temporal keeps closed workflows (env IDEMFLOW_TEMPORAL_RETENTION)")
	fs.IntVar(&t.historyCache, "temporal-history-cache", devserver.DefaultHistoryCache,
		"workflows whose state the embedded Temporal's history cache keeps; 0 leaves Temporal's default of 128,000, which fills a dev box's memory (env IDEMFLOW_TEMPORAL_HISTORY_CACHE)")
}

// startTemporal starts the embedded server; stop stops it, logging a
// failure (the process is ending anyway).
func startTemporal(ctx context.Context, log *slog.Logger, cfg devserver.TemporalConfig) (*devserver.Temporal, func(), error) {
	tsrv, err := devserver.StartTemporal(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	return tsrv, func() {
		if err := tsrv.Stop(); err != nil {
			log.Warn("stop Temporal", "error", err)
		}
	}, nil
}
