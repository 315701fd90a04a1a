//go:build !nodev

package cli

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/idemflow/idemflow/internal/tooling/chaos"
)

// runChaos runs agents under faults and exits non-zero on any violation.
// Without --url it starts its own stack from this binary: a private
// PostgreSQL, Temporal, gateways and workers, each its own process.
func runChaos(ctx context.Context, env *Env, args []string) error {
	var cfg chaos.Config
	fs := flags("chaos", env)
	fs.IntVar(&cfg.Jobs, "jobs", 200, "agent tasks for the idemflow client (a ticket, or an order and its payment, cancel, refund or fulfilment)")
	fs.DurationVar(&cfg.Duration, "duration", 0, "the whole run's budget (start-up, load, and the checks after the reconcile horizon): the clients run while it allows, instead of a number of jobs (with --jobs, whichever ends first)")
	fs.StringVar(&cfg.Topology, "topology", chaos.TopologyServe, "the local stack: serve (gateway and worker in each process, the default deployment) or split (separate gateway and worker processes)")
	fs.IntVar(&cfg.NaiveJobs, "naive-jobs", 0, "tasks for the naive control client (default jobs/4, at least 20)")
	fs.IntVar(&cfg.Agents, "agents", 16, "concurrent agents per client")
	fs.IntVar(&cfg.Gateways, "gateways", 2, "gateway processes of the local stack (serve processes with --topology serve)")
	fs.IntVar(&cfg.Workers, "workers", 2, "worker processes of the local stack (--topology split)")
	faults := fs.String("faults", "", "fault rates over the defaults, e.g. drop-reply=0.2,kill-temporal=0 ('none' first switches all off); kinds: "+fmt.Sprint(chaos.Kinds()))
	fs.DurationVar(&cfg.FaultEvery, "fault-every", 3*time.Second, "mean pause between process faults (kills, restarts, terminated backends)")
	fs.DurationVar(&cfg.AttemptTimeout, "attempt-timeout", 3*time.Second, "the agents' per-attempt timeout; delayed answers are held past it")
	fs.DurationVar(&cfg.ProcessingTimeout, "processing-timeout", 35*time.Second, "the local workers' reconcile horizon, waited out before the checks")
	fs.DurationVar(&cfg.ReconcileInterval, "reconcile-interval", 2*time.Second, "the local workers' reconcile interval")
	fs.Uint64Var(&cfg.Seed, "seed", 0, "random seed (0: from the clock; the report prints it)")
	fs.StringVar(&cfg.Replication, "replication", chaos.ReplicationSync, "with pg-failover: how the standby is fed: sync (synchronous_standby_names names it; nothing acknowledged may be lost) or async (the control: the checks must name what a failover loses)")
	fs.DurationVar(&cfg.ReplicationLag, "replication-lag", 0, "with pg-failover: round trip added to the link the standby streams over (how far an async standby trails)")
	fs.StringVar(&cfg.Cluster, "pg-cluster", chaos.ClusterOwn, "where the local stack's PostgreSQL runs: own (a private primary and standby; pg-failover promotes with pg_ctl and moves an address) or patroni (three Patroni members with etcd behind HAProxy, from Debian's packages; pg-failover SIGKILLs the leader; not with pg-restart)")
	fs.StringVar(&cfg.Dir, "dir", "", "keep the stack's data and logs here (default: a temporary directory, removed after a clean run)")
	fs.StringVar(&cfg.URL, "url", "", "an existing gateway to test instead of a local stack: only faults on chaos's own wire and agents run, unless --target-faults names more")
	targets := fs.String("target-faults", "", "with --url: faults that touch the deployment itself, comma-separated; only pg-terminate (terminates every client backend of its database)")
	fs.StringVar(&cfg.DatabaseURL, "database-url", "", "with --url: its PostgreSQL, to set up the run's tenants and check (env DATABASE_URL)")
	fs.StringVar(&cfg.TemporalAddress, "temporal-address", "", "with --url: its Temporal frontend, to check no intent workflow is left running (env TEMPORAL_ADDRESS)")
	fs.StringVar(&cfg.Namespace, "namespace", "default", "Temporal namespace (env TEMPORAL_NAMESPACE)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if cfg.Duration > 0 && !given["jobs"] {
		cfg.Jobs = 0 // the budget alone bounds the run, as asked
	}
	if err := cfg.CheckBudget(); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	var err error
	if cfg.Faults, err = chaos.ParseFaults(*faults); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	for _, k := range strings.Split(*targets, ",") {
		if k = strings.TrimSpace(k); k != "" {
			cfg.TargetFaults = append(cfg.TargetFaults, chaos.Kind(k))
		}
	}
	if len(cfg.TargetFaults) > 0 && cfg.URL == "" {
		return fmt.Errorf("%w: --target-faults goes with --url (a local stack has every fault)", errUsage)
	}
	if cfg.URL == "" {
		if cfg.Exe, err = os.Executable(); err != nil {
			return err
		}
		cfg.DatabaseURL = ""
	}
	cfg.Out, cfg.Progress, cfg.Logger = env.Stdout, progressOn(env.Stderr), env.Logger
	rep, err := chaos.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if !rep.OK() {
		return exitCodeError{code: 3, err: fmt.Errorf("chaos: %d violations", len(rep.Violations))}
	}
	return nil
}
