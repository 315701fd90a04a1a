//go:build !nodev

package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/internal/gateway"
	"github.com/idemflow/idemflow/internal/pgurl"
	"github.com/idemflow/idemflow/internal/tooling/bench"
	"github.com/idemflow/idemflow/internal/tooling/roundtrip"
	"github.com/idemflow/idemflow/internal/tooling/tcpproxy"
	"github.com/jackc/pgx/v5"
	"go.temporal.io/sdk/client"
)

func runBench(ctx context.Context, env *Env, args []string) error {
	var g gatewayFlags
	fs := flags("bench", env)
	g.register(fs)
	dbURL := fs.String("database-url", "", "idemflow's PostgreSQL (default: dev.env); the PostgreSQL reference keeps its tables in schema bench_ref there (env DATABASE_URL)")
	temporalAddr := fs.String("temporal-address", "", "the Temporal frontend idemflow runs on (default: dev.env) (env TEMPORAL_ADDRESS)")
	namespace := fs.String("namespace", "", "Temporal namespace (default: dev.env, then default) (env TEMPORAL_NAMESPACE)")
	duration := fs.Duration("duration", 10*time.Second, "how long each case measures each target, over all its rounds")
	rounds := fs.Int("rounds", 4, "measure each case in this many rounds, its targets in turn (reversed every other round), after a warm-up of each: so that the machine's noise falls on all of them alike")
	clients := fs.String("clients", "1,64", "concurrent clients, comma-separated")
	pgLatency := fs.Duration("pg-latency", 0, "add this round-trip time to every link to PostgreSQL, idemflow's and the references' alike: the run then measures a serve replica of its own, started in this process behind the delayed links (e.g. 2ms)")
	temporalLatency := fs.Duration("temporal-latency", 0, "add this round-trip time to every link to Temporal, as --pg-latency does")
	account := fs.Bool("account", true, "account for each slice's cost, per request: the CPU of this machine and its processes, PostgreSQL's transactions, WAL and waits, each database's statements (creating the pg_stat_statements view in --database-url's database where the server preloads the extension), and idemflow's stages and pool waits from its /metrics (Linux)")
	soak := fs.Duration("soak", 0, "instead of the cases, hold a steady mix of new tickets and replays this long (e.g. 30m), print each process's memory, goroutines, connections and records every --interval, and judge their growth (exit 3 when anything grew)")
	interval := fs.Duration("interval", time.Minute, "with --soak: how often to sample")
	soakClients := fs.Int("soak-clients", 8, "with --soak: concurrent clients")
	soakWarmup := fs.Int("soak-warmup", 0, "with --soak: new intents to make before the first sample, e.g. the history cache's bound, so that a bounded cache is full before growth is judged")
	metrics := fs.String("metrics", "", "/metrics URLs of the idemflow processes to watch with --soak, comma-separated; without it, the first is where --account reads idemflow's stages (default: the gateway's own)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	devEnv, err := g.resolve()
	if err != nil {
		return err
	}
	if *soak > 0 {
		return runSoak(ctx, env, bench.SoakConfig{URL: g.url, Token: g.token, DatabaseURL: cmp.Or(*dbURL, devEnv["DATABASE_URL"]),
			Duration: *soak, Interval: *interval, Clients: *soakClients, ReplayEvery: 4, Warmup: *soakWarmup, Out: env.Stdout}, *metrics)
	}
	cfg := bench.Config{URL: g.url, Token: g.token, Duration: *duration, Rounds: *rounds, Progress: progressOn(env.Stderr), Account: *account,
		DatabaseURL: cmp.Or(*dbURL, devEnv["DATABASE_URL"])}
	if *rounds < 1 {
		return fmt.Errorf("%w: --rounds wants a whole number above 0, got %d", errUsage, *rounds)
	}
	for _, c := range strings.Split(*clients, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(c))
		if err != nil || n < 1 {
			return fmt.Errorf("%w: --clients wants whole numbers above 0, got %q", errUsage, c)
		}
		cfg.Clients = append(cfg.Clients, n)
	}
	if cfg.DatabaseURL == "" {
		return fmt.Errorf("%w: --database-url (or DATABASE_URL, or a dev.env) is required", errUsage)
	}
	if pid, err := strconv.Atoi(devEnv["IDEMFLOW_PID"]); err == nil && g.url == devEnv["IDEMFLOW_URL"] {
		cfg.GatewayPID = pid
	}
	if cfg.TenantID, err = tenantOf(ctx, g.url, g.token); err != nil {
		return err
	}
	tAddr := cmp.Or(*temporalAddr, devEnv["TEMPORAL_ADDRESS"], "127.0.0.1:7233")
	ns := cmp.Or(*namespace, devEnv["TEMPORAL_NAMESPACE"], "default")
	// The references' client counts their RPCs.
	cfg.RefRPCs = &roundtrip.RPCs{}
	tc, err := dialTemporal(ctx, env.Logger, tAddr, ns, temporalTLS{}, cfg.RefRPCs.ClientOptions())
	if err != nil {
		return err
	}
	defer tc.Close()
	cfg.Temporal = tc
	if *pgLatency < 0 || *temporalLatency < 0 {
		return fmt.Errorf("%w: a latency is a duration of 0 or more", errUsage)
	}
	if *pgLatency > 0 || *temporalLatency > 0 {
		c := common{databaseURL: cfg.DatabaseURL, temporal: tAddr, namespace: ns, retention: durationFlag(idem.DefaultRetention)}
		// The replica in this process counts its round trips.
		c.sql, c.rpcs = &roundtrip.SQL{}, &roundtrip.RPCs{}
		net, err := delayedReplica(ctx, env, c, *pgLatency, *temporalLatency, tc, cfg.RefRPCs)
		if err != nil {
			return err
		}
		defer net.close()
		cfg.URL, cfg.DatabaseURL, cfg.Temporal, cfg.GatewayPID, cfg.Links = net.url, net.databaseURL, net.temporal, 0, net.links
		cfg.SQL, cfg.RPCs = c.sql, c.rpcs
	}
	// idemflow's stages are read from its /metrics: the gateway's own, or
	// the first of --metrics.
	cfg.MetricsURL = strings.TrimRight(cfg.URL, "/") + "/metrics"
	if *metrics != "" {
		cfg.MetricsURL, _, _ = strings.Cut(*metrics, ",")
	}
	rep, err := bench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	rep.Print(env.Stdout)
	return nil
}

// runSoak runs bench --soak: exit 3 when anything grew.
func runSoak(ctx context.Context, env *Env, cfg bench.SoakConfig, metrics string) error {
	if cfg.DatabaseURL == "" {
		return fmt.Errorf("%w: --database-url (or DATABASE_URL, or a dev.env) is required", errUsage)
	}
	if cfg.Clients < 1 || cfg.Interval <= 0 || cfg.Duration < 3*cfg.Interval {
		return fmt.Errorf("%w: --soak must hold at least three --interval, with --soak-clients of 1 or more", errUsage)
	}
	cfg.Metrics = []string{strings.TrimRight(cfg.URL, "/") + "/metrics"}
	if metrics != "" {
		cfg.Metrics = strings.Split(metrics, ",")
	}
	rep, err := bench.Soak(ctx, cfg)
	if err != nil {
		return err
	}
	if !rep.Flat {
		return exitCodeError{code: 3, err: fmt.Errorf("soak: %s", strings.Join(rep.Growths, "; "))}
	}
	return nil
}

// tenantOf asks the gateway whose token this is.
func tenantOf(ctx context.Context, url, token string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(url, "/")+"/v1/tenant", nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("reach the gateway at %s: %w", url, err)
	}
	defer resp.Body.Close()
	var v struct {
		TenantID string `json:"tenant_id"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&v) != nil || v.TenantID == "" {
		return "", fmt.Errorf("the gateway at %s does not accept this token (HTTP %d)", url, resp.StatusCode)
	}
	return v.TenantID, nil
}

// delayed is a bench run's own serve replica behind delayed links.
type delayed struct {
	url, databaseURL string
	temporal         client.Client
	links            []bench.Link
	close            func()
}

// delayedReplica puts links that add pgRTT and temporalRTT in front of
// PostgreSQL and Temporal, and starts a serve replica (gateway and worker,
// as in production) in this process that reaches both through them, as the
// references then do too: every round trip idemflow makes costs what it
// would across a network. The reconcile schedule is left to the stack's
// own worker. Each link's added round trip is measured, as timers add
// their own granularity.
func delayedReplica(ctx context.Context, env *Env, c common, pgRTT, temporalRTT time.Duration, direct client.Client, refRPCs *roundtrip.RPCs) (_ *delayed, err error) {
	d := &delayed{}
	var closers []func()
	d.close = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	defer func() {
		if err != nil {
			d.close()
		}
	}()
	pgURL, err := url.Parse(c.databaseURL)
	if err != nil || (pgURL.Scheme != "postgres" && pgURL.Scheme != "postgresql") || pgURL.Host == "" {
		return nil, fmt.Errorf("%w: --pg-latency needs the database as a postgres:// URL with a host", errUsage)
	}
	pgCfg, err := pgurl.ParseConfig(c.databaseURL)
	if err != nil {
		return nil, fmt.Errorf("%w: database URL: %w", errUsage, err)
	}
	pgLink, err := tcpproxy.Listen(net.JoinHostPort(pgCfg.Host, strconv.Itoa(int(pgCfg.Port))), tcpproxy.DelayLine(pgRTT))
	if err != nil {
		return nil, err
	}
	closers = append(closers, func() { _ = pgLink.Close() })
	tLink, err := tcpproxy.Listen(c.temporal, tcpproxy.DelayLine(temporalRTT))
	if err != nil {
		return nil, err
	}
	closers = append(closers, func() { _ = tLink.Close() })
	pgURL.Host = pgLink.Addr
	d.databaseURL = pgURL.String()

	directDB, err := pgurl.Connect(ctx, c.databaseURL)
	if err != nil {
		return nil, fmt.Errorf("bench: database: %w", err)
	}
	defer directDB.Close(context.WithoutCancel(ctx))
	linkedDB, err := pgurl.Connect(ctx, d.databaseURL)
	if err != nil {
		return nil, fmt.Errorf("bench: database through the link: %w", err)
	}
	defer linkedDB.Close(context.WithoutCancel(ctx))
	selectOne := func(conn *pgx.Conn) func(context.Context) error {
		return func(ctx context.Context) error { _, err := conn.Exec(ctx, "SELECT 1"); return err }
	}
	pgAdded, err := tcpproxy.Measure(ctx, 51, selectOne(directDB), selectOne(linkedDB))
	if err != nil {
		return nil, fmt.Errorf("bench: measure the PostgreSQL link: %w", err)
	}
	d.temporal, err = dialTemporal(ctx, env.Logger, tLink.Addr, c.namespace, temporalTLS{}, refRPCs.ClientOptions())
	if err != nil {
		return nil, err
	}
	closers = append(closers, d.temporal.Close)
	health := func(tc client.Client) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := tc.CheckHealth(ctx, &client.CheckHealthRequest{})
			return err
		}
	}
	tAdded, err := tcpproxy.Measure(ctx, 51, health(direct), health(d.temporal))
	if err != nil {
		return nil, fmt.Errorf("bench: measure the Temporal link: %w", err)
	}
	d.links = []bench.Link{{Name: "PostgreSQL", Asked: pgRTT, Measured: pgAdded}, {Name: "Temporal", Asked: temporalRTT, Measured: tAdded}}

	// The replica logs warnings only: its requests are the bench's.
	quiet := slog.New(&levelFloor{Handler: env.Logger.Handler(), floor: slog.LevelWarn})
	c.databaseURL, c.temporal = d.databaseURL, tLink.Addr
	deps, err := openDeps(ctx, quiet, env.Set, env.Tools, c)
	if err != nil {
		return nil, fmt.Errorf("bench: start the replica: %w", err)
	}
	rctx, stop := context.WithCancel(ctx)
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- runParts(rctx, quiet, deps, roles{worker: true, gateway: true}, parts{databaseURL: c.databaseURL, temporal: c.temporal,
			gw: gatewayConfig{addr: "127.0.0.1:0", maxWaiting: gateway.DefaultMaxWaiting}, ready: func(a net.Addr) { ready <- a }})
	}()
	closers = append(closers, func() { stop(); <-done; deps.Close() })
	select {
	case a := <-ready:
		d.url = "http://" + a.String()
	case err := <-done:
		done <- err
		return nil, fmt.Errorf("bench: the replica stopped: %w", errors.Join(err, errors.New("before it listened")))
	}
	return d, nil
}
