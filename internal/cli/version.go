package cli

import (
	"context"
	"fmt"
	"runtime/debug"
)

// runVersion prints what 'go build' recorded: the module version (a tag,
// or "(devel)" for a build from a checkout) and the VCS revision, so that
// a bug report names the exact code.
func runVersion(_ context.Context, env *Env, args []string) error {
	fs := flags("version", env)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("%w: idemflow version takes no arguments", errUsage)
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		fmt.Fprintln(env.Stdout, "idemflow (no build information)")
		return nil
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	line := "idemflow " + info.Main.Version
	if rev := settings["vcs.revision"]; rev != "" {
		line += " " + rev
		if settings["vcs.modified"] == "true" {
			line += "+modified"
		}
		if t := settings["vcs.time"]; t != "" {
			line += " (" + t + ")"
		}
	} else {
		line += " (no VCS revision: built outside a checkout, or with -buildvcs=false)"
	}
	fmt.Fprintln(env.Stdout, line, info.GoVersion)
	return nil
}
