// Package cli wires idemflow's packages into its subcommands.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/idemflow/idemflow/httptool"
	"github.com/idemflow/idemflow/internal/registry"
	"github.com/idemflow/idemflow/op"
)

type command struct {
	summary string
	run     func(ctx context.Context, env *Env, args []string) error
}

var commands = map[string]command{
	"serve":       {"run the gateway and the worker in one process against an existing Temporal and PostgreSQL (production)", runServe},
	"worker":      {"run the Temporal worker against an existing Temporal and PostgreSQL", runWorker},
	"gateway":     {"run the HTTP gateway against an existing Temporal and PostgreSQL", runGateway},
	"migrate":     {"apply pending database migrations", runMigrate},
	"token":       {"create a tenant (if needed) and print a new API token for it", runToken},
	"schedule":    {"apply|describe|trigger|pause|unpause the reconcile-and-purge schedule", runSchedule},
	"audit":       {"check constraints, duplicates and stuck intents; exit 3 when anything is found", runAudit},
	"mcp":         {"serve idemflow's tools to MCP agents over stdio (or --http) through the gateway", runMCP},
	"inspect":     {"print everything known about one intent: record, business row, order events, workflow and its history, Web UI link", runInspect},
	"healthcheck": {"exit 0 when a URL answers 200 (container health checks)", runHealthcheck},
	"version":     {"print the module version and the VCS revision it was built from", runVersion},
}

// Env is what a subcommand talks to: its output streams and logger, and
// the operations it serves.
type Env struct {
	Stdout io.Writer
	Stderr io.Writer
	Logger *slog.Logger
	// Set is the built-in business types and the declared operations,
	// with the HTTP tools of --tools once a command loaded them.
	Set *registry.Set
	// Tools are the HTTP tools of --tools (nil: none).
	Tools *httptool.Set
	// ops are the operations declared in Go, that a tools file adds to.
	ops []*op.Operation
}

// useTools loads the tools file at path (none for ""): its tools join the
// operations, as if each were declared in Go, and a tool whose name
// another operation holds is refused. calls says whether this process
// calls the tools (a worker): only then must the ${VAR}s of their headers
// be set, since a gateway, MCP or inspect never sends a call and should
// not hold the secrets.
func (env *Env) useTools(path string, calls bool) error {
	if path == "" {
		return nil
	}
	getenv := os.LookupEnv
	if !calls {
		getenv = func(string) (string, bool) { return "", true }
	}
	tools, err := httptool.Load(path, getenv)
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	set, err := registry.New(append(slices.Clone(env.ops), tools.Operations()...)...)
	if err != nil {
		return fmt.Errorf("%w: tools file %s: %w", errUsage, path, err)
	}
	env.Set, env.Tools = set, tools
	for _, t := range tools.Tools() {
		env.Logger.Info("HTTP tool loaded", "tool", t.Name, "route", t.Op.Route, "settles_unknown_by", t.Mode())
	}
	return nil
}

// registerTools adds --tools.
func registerTools(fs *flag.FlagSet, path *string) {
	fs.StringVar(path, "tools", "", "YAML file of HTTP tools: a team's own APIs, called exactly once per key (README, HTTP tools) (env IDEMFLOW_TOOLS)")
}

// errUsage marks a usage error: exit code 2.
var errUsage = errors.New("usage")

// Run runs the subcommand named by args[0] with the built-in operations
// and ops, and returns the exit code.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer, ops ...*op.Operation) int {
	set, err := registry.New(ops...)
	if err != nil {
		fmt.Fprintf(stderr, "idemflow: %v\n", err)
		return 2
	}
	env := &Env{Stdout: stdout, Stderr: stderr, Set: set, ops: ops,
		Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: logLevel()}))}
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		// Asked for: the answer goes to stdout, and it is not an error.
		usage(stdout)
		return 0
	case "--version", "-version":
		args = append([]string{"version"}, args[1:]...)
	}
	cmd, ok := commands[args[0]]
	if !ok {
		cmd, ok = devCommands[args[0]]
	}
	if !ok && slices.Contains(devCommandNames, args[0]) {
		fmt.Fprintf(stderr, "idemflow: %q is a development command, left out of this production build (-tags nodev, as the Dockerfile builds it): "+
			"build without the tag (go build ./cmd/idemflow), or run scripts/run.sh\n", args[0])
		return 2
	}
	if !ok {
		fmt.Fprintf(stderr, "idemflow: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	err = cmd.run(ctx, env, args[1:])
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "idemflow %s: %v\n", args[0], err)
		return 2
	default:
		var ec exitCodeError
		if errors.As(err, &ec) {
			fmt.Fprintf(stderr, "idemflow %s: %v\n", args[0], err)
			return ec.code
		}
		fmt.Fprintf(stderr, "idemflow %s: %v\n", args[0], err)
		return 1
	}
}

// exitCodeError lets a command (audit) choose its exit code.
type exitCodeError struct {
	code int
	err  error
}

func (e exitCodeError) Error() string { return e.err.Error() }
func (e exitCodeError) Unwrap() error { return e.err }

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: idemflow <command> [flags]\n\ncommands:")
	all := map[string]command{}
	for _, m := range []map[string]command{commands, devCommands} {
		for n, c := range m {
			all[n] = c
		}
	}
	names := make([]string, 0, len(all))
	for n := range all {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-12s %s\n", n, all[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'idemflow <command> -h' for its flags. Flags may come before or after a command's arguments.")
}

func logLevel() slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(os.Getenv("IDEMFLOW_LOG_LEVEL"))); err != nil {
		return slog.LevelInfo
	}
	return l
}

// flags returns a FlagSet for a subcommand. A flag whose usage ends in
// "(env NAME)" is also set by that variable: see parseFlags.
func flags(name string, env *Env) *flag.FlagSet {
	fs := flag.NewFlagSet("idemflow "+name, flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	return fs
}

// envPattern finds the variable a flag's usage names: "(env NAME)".
var envPattern = regexp.MustCompile(`\(env ([A-Z][A-Z0-9_]*)\)`)

// parseFlags parses args, then sets each flag not given on the command
// line from the variable its usage names, so that the help text and the
// behaviour cannot disagree. A value that does not parse is a usage error
// naming the variable; the value itself is never printed, since it may be
// a secret.
//
// Flags may follow positional arguments ("inspect acme KEY --json"), as
// the README writes them; everything after "--" is positional.
func parseFlags(fs *flag.FlagSet, args []string) error {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			positional = append(positional, rest...)
			break
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
	// Parse stops at "--" and leaves what follows as its Args.
	if err := fs.Parse(append([]string{"--"}, positional...)); err != nil {
		return err
	}
	return fillUnset(fs, lookupEnv, func(name string) string { return name })
}

// fillUnset sets each flag that the command line did not give from
// lookup(NAME), NAME being the variable its usage names. A value that does
// not parse is a usage error naming where it came from (from(NAME)), never
// the value, which may be a secret.
func fillUnset(fs *flag.FlagSet, lookup func(string) (string, bool), from func(string) string) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		m := envPattern.FindStringSubmatch(f.Usage)
		if m == nil || given[f.Name] {
			return
		}
		v, ok := lookup(m[1])
		if !ok {
			return
		}
		if err := f.Value.Set(v); err != nil {
			errs = append(errs, fmt.Errorf("%w: %s does not hold a valid --%s (see '%s -h')", errUsage, from(m[1]), f.Name, fs.Name()))
		}
	})
	return errors.Join(errs...)
}

// lookupEnv is os.LookupEnv where an empty (or blank) variable is unset:
// the one rule for every variable idemflow reads.
func lookupEnv(key string) (string, bool) {
	v, ok := os.LookupEnv(key)
	if !ok || strings.TrimSpace(v) == "" {
		return "", false
	}
	return v, true
}

// dataDirFlag registers --data-dir: where 'idemflow dev' keeps its state,
// and the dev.env that tells other commands how to reach it.
func dataDirFlag(fs *flag.FlagSet) *string {
	return fs.String("data-dir", "./.idemflow", "where 'idemflow dev' keeps its state and dev.env (env IDEMFLOW_DATA_DIR)")
}

// parseDevFlags is parseFlags for the commands an operator runs beside a
// stack (token, audit, migrate, inspect, schedule): a flag that neither the
// command line nor its variable set is then taken from the dev.env that a
// running 'idemflow dev' leaves in --data-dir, under the same variable
// name. Every such command thus finds a dev stack the same way, and an
// explicit setting always wins.
func parseDevFlags(fs *flag.FlagSet, args []string) error {
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	dir := fs.Lookup("data-dir")
	if dir == nil {
		return nil
	}
	dev := readDevEnv(dir.Value.String())
	// Only what neither the command line nor a variable set.
	fromDev := func(name string) (string, bool) {
		if _, set := lookupEnv(name); set {
			return "", false
		}
		v := dev[name]
		return v, v != ""
	}
	return fillUnset(fs, fromDev, func(name string) string { return name + " in " + dir.Value.String() + "/dev.env" })
}

func envOr(key, def string) string {
	if v, ok := lookupEnv(key); ok {
		return v
	}
	return def
}
