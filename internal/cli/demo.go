//go:build !nodev

package cli

import (
	"cmp"
	"context"
	"flag"
	"path/filepath"
	"time"

	"github.com/idemflow/idemflow/internal/tooling/demo"
)

type demoFlags struct {
	cfg demo.Config
}

func (d *demoFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&d.cfg.Intents, "demo-intents", 20, "intents per client in the demo")
	fs.Float64Var(&d.cfg.DropRate, "demo-drop", 0.3, "share of answers the demo's network loses after the server acted")
	fs.Float64Var(&d.cfg.DelayRate, "demo-delay", 0.15, "share of answers it delays past the client's timeout")
	fs.DurationVar(&d.cfg.AttemptTimeout, "demo-timeout", 2*time.Second, "the demo client's per-attempt timeout")
	fs.Uint64Var(&d.cfg.Seed, "demo-seed", 0, "seed of the demo's network faults; 0 picks one at random")
}

func runDemo(ctx context.Context, env *Env, args []string) error {
	var g gatewayFlags
	var d demoFlags
	fs := flags("demo", env)
	g.register(fs)
	d.register(fs)
	dbURL := fs.String("database-url", "", "PostgreSQL URL, to count rows (default: DATABASE_URL, then dev.env)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	devEnv, err := g.resolve()
	if err != nil {
		return err
	}
	cfg := d.cfg
	cfg.BaseURL, cfg.Token, cfg.Tenant = g.url, g.token, devEnv["IDEMFLOW_TENANT"]
	cfg.DatabaseURL = cmp.Or(*dbURL, envOr("DATABASE_URL", ""), devEnv["DATABASE_URL"])
	cfg.UIURL, cfg.Namespace = devEnv["IDEMFLOW_UI_URL"], devEnv["TEMPORAL_NAMESPACE"]
	cfg.StoreDir = filepath.Join(g.dataDir, "demo-intents")
	cfg.Out, cfg.Progress = env.Stdout, progressOn(env.Stderr)
	_, _, err = demo.Run(ctx, cfg)
	return err
}
