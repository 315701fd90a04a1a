package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idemflow/idemflow/internal/bench"
)

func runBench(ctx context.Context, env *Env, args []string) error {
	var g gatewayFlags
	fs := flags("bench", env)
	g.register(fs)
	dbURL := fs.String("database-url", "", "idemflow's PostgreSQL (default: dev.env); the PostgreSQL reference keeps its tables in schema bench_ref there (env DATABASE_URL)")
	temporalAddr := fs.String("temporal-address", "", "the Temporal frontend idemflow runs on (default: dev.env) (env TEMPORAL_ADDRESS)")
	namespace := fs.String("namespace", "", "Temporal namespace (default: dev.env, then default) (env TEMPORAL_NAMESPACE)")
	duration := fs.Duration("duration", 10*time.Second, "how long each case runs")
	clients := fs.String("clients", "1,64", "concurrent clients, comma-separated")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	devEnv, err := g.resolve()
	if err != nil {
		return err
	}
	cfg := bench.Config{URL: g.url, Token: g.token, Duration: *duration, Progress: env.Stderr,
		DatabaseURL: firstNonEmpty(*dbURL, devEnv["DATABASE_URL"])}
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
	tc, err := dialTemporal(ctx, env.Logger, firstNonEmpty(*temporalAddr, devEnv["TEMPORAL_ADDRESS"], "127.0.0.1:7233"),
		firstNonEmpty(*namespace, devEnv["TEMPORAL_NAMESPACE"], "default"), temporalTLS{}, nil)
	if err != nil {
		return err
	}
	defer tc.Close()
	cfg.Temporal = tc
	rep, err := bench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	rep.Print(env.Stdout)
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
