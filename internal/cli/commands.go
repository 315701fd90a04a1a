package cli

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"time"

	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/internal/gateway"
	"github.com/idemflow/idemflow/internal/oauth"
	"github.com/idemflow/idemflow/internal/service"
	"github.com/idemflow/idemflow/internal/tenant"
	"github.com/idemflow/idemflow/migrations"
	"github.com/idemflow/idemflow/starter"
	"github.com/idemflow/idemflow/worker"
)

// roles say which parts a process runs: worker, gateway, or both (serve).
type roles struct{ worker, gateway bool }

func runWorker(ctx context.Context, env *Env, args []string) error {
	return runRoles(ctx, env, "worker", roles{worker: true}, args)
}

func runGateway(ctx context.Context, env *Env, args []string) error {
	return runRoles(ctx, env, "gateway", roles{gateway: true}, args)
}

// runServe is the production role: gateway and worker in one process,
// sharing one Temporal client. Eager start needs exactly that (the server
// hands a new run's first workflow task back to the client that started
// it, if that client has a worker on the task queue), and a waiting request
// is answered by the worker next to it. It is stateless: run any number of
// replicas behind a load balancer.
func runServe(ctx context.Context, env *Env, args []string) error {
	return runRoles(ctx, env, "serve", roles{worker: true, gateway: true}, args)
}

func runRoles(ctx context.Context, env *Env, name string, r roles, args []string) error {
	var c common
	var s scheduleFlags
	var bindings bindingsFlag
	var gw gatewayConfig
	fs := flags(name, env)
	c.register(fs)
	var toolsFile string
	registerTools(fs, &toolsFile)
	var workerMetrics string
	if r.worker {
		s.register(fs)
	}
	if r.worker && !r.gateway {
		fs.StringVar(&workerMetrics, "metrics-addr", "", "serve the worker's /metrics (its counters and the Temporal SDK's) on this address, e.g. :9464 (env IDEMFLOW_METRICS_ADDR)")
	}
	if r.gateway {
		bindings.register(fs)
		gw.register(fs)
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := c.resolveTemporal(); err != nil {
		return err
	}
	if err := env.useTools(toolsFile, r.worker); err != nil {
		return err
	}
	if r.gateway {
		if err := gw.check(); err != nil {
			return err
		}
	}
	if r.worker {
		if err := s.check(env.Logger, time.Duration(c.retention)); err != nil {
			return err
		}
	}
	d, err := openDeps(ctx, env.Logger, env.Set, env.Tools, c)
	if err != nil {
		return err
	}
	defer d.Close()
	if r.gateway {
		if err := applyBindings(ctx, d, bindings); err != nil {
			return err
		}
	}
	return runParts(ctx, env.Logger, d, r, parts{databaseURL: c.databaseURL, temporal: c.temporal, sched: &s, gw: gw, workerMetrics: workerMetrics})
}

// parts are what runParts needs beyond the process's deps.
type parts struct {
	databaseURL, temporal string
	// sched is the reconcile schedule to install (nil: leave it to
	// another process, as bench's replica does).
	sched         *scheduleFlags
	gw            gatewayConfig
	workerMetrics string
	// ready, if set, is called once the gateway listens.
	ready func(net.Addr)
}

// runParts runs a process's roles on the deps it opened, until ctx ends.
// It is the one place that assembles them, for serve, worker, gateway and
// dev alike, so that no role's wiring drifts from another's.
func runParts(ctx context.Context, logger *slog.Logger, d *deps, r roles, p parts) error {
	d.Notify(ctx, service.Roles{Gateway: r.gateway, Worker: r.worker}, cmp.Or(p.gw.listenURL, p.databaseURL), d.Pool, idem.WatchInterval)
	if !r.worker {
		return serveGateway(ctx, logger, d, p.gw, p.ready)
	}
	if p.sched != nil {
		if err := installSchedule(ctx, logger, d.Temporal, d.namespace, p.sched); err != nil {
			return err
		}
	}
	w := d.Worker()
	logger.Info("worker running", "temporal", p.temporal, "namespace", d.namespace)
	if !r.gateway {
		if p.workerMetrics != "" {
			mctx, stop := context.WithCancel(ctx)
			defer stop()
			go func() {
				if err := serveHTTP(mctx, logger, "metrics", p.workerMetrics, newHTTPServer(d.Metrics.Handler(), true), nil); err != nil {
					logger.Error("metrics listener", "error", err)
				}
			}()
		}
		return worker.Run(ctx, w)
	}
	if err := w.Start(); err != nil {
		return fmt.Errorf("start worker: %w", err)
	}
	defer w.Stop() // drains, as worker.Run does
	return serveGateway(ctx, logger, d, p.gw, p.ready)
}

// bindingsFlag is --bootstrap-tokens: "tenant:token,..." checked when the
// flags are parsed, before anything connects. It never prints its tokens.
type bindingsFlag []tenant.Binding

func (b *bindingsFlag) String() string {
	if b == nil || len(*b) == 0 {
		return ""
	}
	return fmt.Sprintf("%d binding(s)", len(*b))
}

func (b *bindingsFlag) Set(s string) error {
	v, err := tenant.ParseBindings(s)
	if err != nil {
		return err
	}
	*b = v
	return nil
}

func (b *bindingsFlag) register(fs *flag.FlagSet) {
	fs.Var(b, "bootstrap-tokens", "tenant:token pairs to store at start, comma-separated (env IDEMFLOW_BOOTSTRAP_TOKENS)")
}

// gatewayConfig are the gateway's listening settings.
type gatewayConfig struct {
	addr, metricsAddr, pprofAddr string
	// listenURL, if set, is where the gateway LISTENs for records other
	// processes settled (idem.Store.Listen), instead of the database URL.
	listenURL     string
	maxWaiting    int
	shutdownGrace time.Duration
	// requestLogLevel is not a flag: dev sets it (see devConsole).
	requestLogLevel slog.Level
	oauth           oauthFlags
	mcpSecret       string
	// verifier is the OAuth resource server check builds (nil: off).
	verifier *oauth.Verifier
}

func (g *gatewayConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&g.addr, "http-addr", "127.0.0.1:8080", "gateway listen address (env IDEMFLOW_HTTP_ADDR)")
	fs.StringVar(&g.metricsAddr, "metrics-addr", "", "serve /metrics on this address instead of the gateway's (env IDEMFLOW_METRICS_ADDR)")
	fs.StringVar(&g.pprofAddr, "pprof-addr", "", "serve Go's profiler (/debug/pprof/) on this loopback address, e.g. 127.0.0.1:6060; off by default (env IDEMFLOW_PPROF_ADDR)")
	fs.DurationVar(&g.shutdownGrace, "shutdown-grace", 2*time.Second, "on SIGTERM, answer 503 + Retry-After this long before closing the listener, so a load balancer moves away (env IDEMFLOW_SHUTDOWN_GRACE)")
	fs.IntVar(&g.maxWaiting, "max-waiting", gateway.DefaultMaxWaiting, "requests that may wait for their intent at once; past it they answer 202 at once (env IDEMFLOW_MAX_WAITING)")
	g.oauth.register(fs, "gateway")
	fs.StringVar(&g.mcpSecret, "mcp-secret", "", "accept "+mcpSecretUsage)
	fs.StringVar(&g.listenURL, "listen-database-url", "", "PostgreSQL URL to LISTEN on for intents other processes settled, when the database URL goes through a transaction pooler, which delivers no notifications: PostgreSQL directly or through session pooling; default the database URL (env IDEMFLOW_LISTEN_DATABASE_URL)")
}

// check refuses a profiler address that is not loopback: the profiler has
// no authentication.
func (g *gatewayConfig) check() error {
	v, err := g.oauth.verifier("idemflow gateway")
	if err != nil {
		return err
	}
	g.verifier = v
	if err := checkMCPSecret(g.mcpSecret); err != nil {
		return err
	}
	if g.pprofAddr == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(g.pprofAddr)
	if err != nil {
		return fmt.Errorf("%w: --pprof-addr: %w", errUsage, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("%w: --pprof-addr %s: the profiler has no authentication, so it listens on loopback only (127.0.0.1:PORT; reach it with ssh or kubectl port-forward)", errUsage, g.pprofAddr)
	}
	return nil
}

// ports are the ports of the addresses the gateway binds (0 for an
// address without one): dev reserves them before its Temporal server
// picks ports of its own.
func (g *gatewayConfig) ports() []int {
	var ports []int
	for _, addr := range []string{g.addr, g.metricsAddr, g.pprofAddr} {
		if _, port, err := net.SplitHostPort(addr); err == nil {
			p, _ := strconv.Atoi(port)
			ports = append(ports, p)
		}
	}
	return ports
}

// serveGateway serves the gateway (and its metrics, where they have an
// address of their own) until ctx ends.
func serveGateway(ctx context.Context, logger *slog.Logger, d *deps, cfg gatewayConfig, ready func(net.Addr)) error {
	g := d.Gateway()
	g.SetMaxWaiting(cfg.maxWaiting)
	g.RequestLogLevel = cfg.requestLogLevel
	g.OAuth, g.APITokensOff, g.MCPSecret = cfg.verifier, cfg.verifier != nil && !cfg.oauth.apiTokens, cfg.mcpSecret
	side := map[string]http.Handler{}
	if cfg.metricsAddr != "" {
		g.ServeMetrics = false
		side[cfg.metricsAddr] = g.Metrics.Handler()
	}
	if cfg.pprofAddr != "" {
		// No /debug/pprof/cmdline: argv may hold a database password,
		// --temporal-api-key or --bootstrap-tokens, and no secret is ever
		// readable over HTTP. The listener is loopback-only (checked at
		// start), as the profiler has no authentication.
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		side[cfg.pprofAddr] = mux
	}
	// The side listeners live and die with the gateway: they stop after it
	// has drained, not at the signal, so that /metrics keeps answering
	// while the gateway drains; one that fails stops the gateway too.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sideCtx, stopSide := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSide()
	errc := make(chan error, len(side))
	for addr, h := range side {
		go func() {
			errc <- serveHTTP(sideCtx, logger, "side listener", addr, newHTTPServer(h, true), nil)
			cancel()
		}()
	}
	// On shutdown the gateway drains first: for --shutdown-grace it stays
	// up answering 503 + Retry-After (and /readyz 503) while a load
	// balancer notices, then it stops listening and waits for the requests
	// it holds.
	serveCtx, stopServing := context.WithCancel(context.WithoutCancel(ctx))
	defer stopServing()
	go func() {
		select {
		case <-ctx.Done():
		case <-serveCtx.Done():
			return
		}
		if serveCtx.Err() != nil {
			return // the gateway stopped on its own (a listen error)
		}
		g.Drain()
		logger.Info("gateway draining: new requests answer 503", "grace", cfg.shutdownGrace)
		time.Sleep(cfg.shutdownGrace)
		stopServing()
	}()
	err := serveHTTP(serveCtx, logger, "gateway", cfg.addr, newHTTPServer(g.Handler(), false), ready)
	stopServing()
	stopSide()
	errs := []error{err}
	for range side {
		errs = append(errs, <-errc)
	}
	if err == nil {
		logger.Info("gateway stopped")
	}
	return errors.Join(errs...)
}

// applyBindings stores the bootstrap tokens.
func applyBindings(ctx context.Context, d *deps, bindings bindingsFlag) error {
	for _, b := range bindings {
		if err := d.Tenants.AddToken(ctx, b.Tenant, b.Token, "bootstrap"); err != nil {
			return err
		}
	}
	return nil
}

// runHealthcheck probes a URL and exits non-zero unless it answers 200:
// container images without curl use it as their health check.
func runHealthcheck(ctx context.Context, env *Env, args []string) error {
	fs := flags("healthcheck", env)
	u := fs.String("url", "http://127.0.0.1:8080/healthz", "URL that must answer 200")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, *u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %d", *u, resp.StatusCode)
	}
	return nil
}

// newHTTPServer is an http.Server with timeouts for its role. Bodies are at
// most 1 MiB, so 30 s reads them on any link; a gateway response may wait
// up to starter.MaxWait for its intent, so writes get that and a margin;
// MCP streams server-sent events for as long as a session lives, so it has
// no write timeout, and its idle sessions are closed by the MCP server.
func newHTTPServer(h http.Handler, streams bool) *http.Server {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: starter.MaxWait + 15*time.Second, IdleTimeout: 2 * time.Minute}
	if streams {
		srv.WriteTimeout = 0
	}
	return srv
}

// serveHTTP serves srv on addr until ctx ends, then waits for the
// requests in flight (up to the longest wait a request may ask for).
// ready, if set, is called once the listener is bound.
func serveHTTP(ctx context.Context, logger *slog.Logger, name, addr string, srv *http.Server, ready func(net.Addr)) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	logger.Info(name+" listening", "addr", ln.Addr().String())
	if ready != nil {
		ready(ln.Addr())
	}
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	// Long enough for a request waiting the longest Prefer: wait.
	shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), starter.MaxWait+5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		return fmt.Errorf("shut down %s: %w", name, err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func runMigrate(ctx context.Context, env *Env, args []string) error {
	fs := flags("migrate", env)
	dbURL := fs.String("database-url", "", "PostgreSQL URL; default: a running dev stack's (env DATABASE_URL)")
	dataDirFlag(fs)
	if err := parseDevFlags(fs, args); err != nil {
		return err
	}
	if *dbURL == "" {
		return fmt.Errorf("%w: DATABASE_URL (or --database-url, or a running 'idemflow dev') is required", errUsage)
	}
	applied, err := migrations.MigrateEach(ctx, *dbURL, env.Set.Schemas()...)
	if err != nil {
		return err
	}
	for _, a := range applied {
		if a.Name == "" {
			fmt.Fprintf(env.Stdout, "schema at version %d (was %d)\n", a.To, a.From)
		} else {
			fmt.Fprintf(env.Stdout, "operation %s: schema at version %d (was %d)\n", a.Name, a.To, a.From)
		}
	}
	return nil
}

func runToken(ctx context.Context, env *Env, args []string) error {
	fs := flags("token", env)
	dbURL := fs.String("database-url", "", "PostgreSQL URL; default: a running dev stack's (env DATABASE_URL)")
	tenantID := fs.String("tenant", "", "tenant ID ([a-z0-9_-], created if missing)")
	label := fs.String("label", "", "a note stored with the token")
	dataDirFlag(fs)
	if err := parseDevFlags(fs, args); err != nil {
		return err
	}
	if *tenantID == "" {
		return fmt.Errorf("%w: --tenant is required", errUsage)
	}
	if *dbURL == "" {
		return fmt.Errorf("%w: DATABASE_URL (or --database-url, or a running 'idemflow dev') is required", errUsage)
	}
	conn, err := connect(ctx, *dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	tok, err := tenant.NewToken()
	if err != nil {
		return err
	}
	if err := tenant.NewStore(conn).AddToken(ctx, *tenantID, tok, *label); err != nil {
		return err
	}
	fmt.Fprintln(env.Stdout, tok)
	return nil
}
