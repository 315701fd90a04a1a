package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/idemflow/idemflow/internal/schedule"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// scheduleFlags are the reconcile schedule's settings.
type scheduleFlags struct {
	cfg            schedule.Config
	maxRetryWindow time.Duration
}

func (s *scheduleFlags) register(fs *flag.FlagSet) {
	s.cfg = schedule.DefaultConfig()
	fs.DurationVar(&s.cfg.Interval, "reconcile-interval", s.cfg.Interval, "how often reconcile and purge run (env IDEMFLOW_RECONCILE_INTERVAL)")
	fs.DurationVar((*time.Duration)(&s.cfg.Input.ProcessingTimeout), "processing-timeout", s.cfg.Input.ProcessingTimeout.D(), "PROCESSING records older than this are reconciled (env IDEMFLOW_PROCESSING_TIMEOUT)")
	fs.DurationVar(&s.cfg.CatchupWindow, "catchup-window", s.cfg.CatchupWindow, "missed runs this recent are still taken")
	fs.IntVar(&s.cfg.Input.PurgeBatch, "purge-batch", s.cfg.Input.PurgeBatch, "records deleted per purge statement")
	fs.DurationVar((*time.Duration)(&s.cfg.Input.PurgeBudget), "purge-budget", s.cfg.Input.PurgeBudget.D(), "time one run may spend purging")
	fs.DurationVar(&s.maxRetryWindow, "max-retry-window", time.Hour, "the longest time an agent keeps retrying one intent (env IDEMFLOW_MAX_RETRY_WINDOW)")
}

// check validates the settings and warns when the record retention is
// below schedule.RetentionAdvice's bound.
func (s *scheduleFlags) check(logger *slog.Logger, retention time.Duration) error {
	if err := s.cfg.Validate(); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if advice := schedule.RetentionAdvice(retention, s.maxRetryWindow, s.cfg.Interval); advice != "" {
		logger.Warn(advice)
	}
	return nil
}

// installSchedule applies the schedule, logging what it did.
//
// A Temporal server that is still starting answers its frontend before its
// history service owns its shards, and the first calls time out: those are
// retried for up to temporalReadyWait, with a line in the log each time.
func installSchedule(ctx context.Context, logger *slog.Logger, tc client.Client, namespace string, s *scheduleFlags) error {
	var created bool
	deadline := time.Now().Add(temporalReadyWait)
	for attempt := 1; ; attempt++ {
		callCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
		var err error
		created, err = schedule.Apply(callCtx, tc, namespace, s.cfg)
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil || !notReady(err) || time.Now().After(deadline) {
			return fmt.Errorf("install the reconcile schedule (Temporal at this address not ready within %v?): %w", temporalReadyWait, err)
		}
		logger.Warn("Temporal is not ready yet; retrying", "attempt", attempt, "error", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	verb := "updated"
	if created {
		verb = "created"
	}
	logger.Info("reconcile schedule "+verb, "every", s.cfg.Interval, "processing_timeout", s.cfg.Input.ProcessingTimeout.D())
	return nil
}

// temporalReadyWait bounds how long a starting process waits for Temporal,
// and for PostgreSQL and its migrations.
const temporalReadyWait = 2 * time.Minute

// notReady reports the errors of a Temporal server that is starting.
func notReady(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.ResourceExhausted:
		return true
	}
	var unavailable *serviceerror.Unavailable
	var deadline *serviceerror.DeadlineExceeded
	var noNamespace *serviceerror.NamespaceNotFound
	return errors.As(err, &unavailable) || errors.As(err, &deadline) || errors.As(err, &noNamespace)
}

// scheduleVerbs are schedule's subcommands and what each does.
var scheduleVerbs = []struct{ name, summary string }{
	{"apply", "create the reconcile-and-purge schedule, or update it to these settings"},
	{"describe", "print the schedule: its spec, policies, recent and next runs (JSON)"},
	{"trigger", "run reconcile and purge once, now"},
	{"pause", "pause the schedule"},
	{"unpause", "unpause the schedule"},
}

func scheduleUsage(env *Env) {
	fmt.Fprintln(env.Stdout, "usage: idemflow schedule <command> [flags]\n\ncommands:")
	for _, v := range scheduleVerbs {
		fmt.Fprintf(env.Stdout, "  %-9s %s\n", v.name, v.summary)
	}
	fmt.Fprintln(env.Stdout, "\nRun 'idemflow schedule <command> -h' for its flags.")
}

func runSchedule(ctx context.Context, env *Env, args []string) error {
	if len(args) == 0 {
		scheduleUsage(env)
		return fmt.Errorf("%w: idemflow schedule apply|describe|trigger|pause|unpause [flags]", errUsage)
	}
	verb := args[0]
	switch verb {
	case "-h", "-help", "--help", "help":
		scheduleUsage(env)
		return flag.ErrHelp
	}
	if !slices.ContainsFunc(scheduleVerbs, func(v struct{ name, summary string }) bool { return v.name == verb }) {
		return fmt.Errorf("%w: unknown schedule command %q (see 'idemflow schedule -h')", errUsage, verb)
	}
	var c common
	var s scheduleFlags
	fs := flags("schedule "+verb, env)
	c.registerTemporal(fs)
	if verb == "apply" {
		// Only apply writes the schedule's settings, and checks the
		// retention against them.
		c.registerRetention(fs)
		s.register(fs)
	}
	// Every verb reads its settings as every command does: flags, then
	// the variables their help names, then a running dev stack's.
	dataDirFlag(fs)
	if err := parseDevFlags(fs, args[1:]); err != nil {
		return err
	}
	if err := c.resolveTemporal(); err != nil {
		return err
	}
	tc, err := dialTemporal(ctx, env.Logger, c.temporal, c.namespace, c.tls, client.Options{})
	if err != nil {
		return err
	}
	defer tc.Close()
	h := schedule.Handle(ctx, tc)
	switch verb {
	case "apply":
		if err := s.check(env.Logger, time.Duration(c.retention)); err != nil {
			return err
		}
		return installSchedule(ctx, env.Logger, tc, c.namespace, &s)
	case "describe":
		d, err := h.Describe(ctx)
		if err != nil {
			return err
		}
		var every []string
		for _, iv := range d.Schedule.Spec.Intervals {
			every = append(every, iv.Every.String())
		}
		out := map[string]any{
			"id":             h.GetID(),
			"every":          every,
			"paused":         d.Schedule.State.Paused,
			"note":           d.Schedule.State.Note,
			"spec":           d.Schedule.Spec,
			"overlap":        d.Schedule.Policy.Overlap.String(),
			"catchup_window": d.Schedule.Policy.CatchupWindow.String(),
			"actions_taken":  d.Info.NumActions,
			"recent_runs":    d.Info.RecentActions,
			"next_runs":      d.Info.NextActionTimes,
		}
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	case "trigger":
		return h.Trigger(ctx, client.ScheduleTriggerOptions{})
	case "pause":
		return h.Pause(ctx, client.SchedulePauseOptions{Note: "paused with idemflow schedule pause"})
	case "unpause":
		return h.Unpause(ctx, client.ScheduleUnpauseOptions{Note: "unpaused with idemflow schedule unpause"})
	}
	return nil
}
