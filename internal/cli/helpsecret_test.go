package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/idemflow/idemflow/internal/cli"
)

// Help never prints what a variable holds: a flag's environment fallback
// goes through parseFlags (the one rule), never into the default that
// help shows, so an exported IDEMFLOW_TOKEN or a DATABASE_URL with its
// password stays out of every command's -h. Every variable the commands'
// code names is set to a marked value, and every command's (and schedule
// verb's) help is read for it.
func TestHelpNeverPrintsAVariablesValue(t *testing.T) {
	for _, name := range variablesNamed(t) {
		t.Setenv(name, "s3cret-of-"+name)
	}
	var help bytes.Buffer
	if code := cli.Run(context.Background(), []string{"help"}, &help, &help); code != 0 {
		t.Fatalf("help: exit %d\n%s", code, help.String())
	}
	var commands [][]string
	sc := bufio.NewScanner(&help)
	listing := false
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "commands:") {
			listing = true
			continue
		}
		if f := strings.Fields(line); listing && strings.HasPrefix(line, "  ") && len(f) > 0 {
			commands = append(commands, []string{f[0], "-h"})
		}
	}
	for _, verb := range []string{"apply", "describe", "trigger", "pause", "unpause"} {
		commands = append(commands, []string{"schedule", verb, "-h"})
	}
	if len(commands) < 15 {
		t.Fatalf("found %d commands in help:\n%s", len(commands), help.String())
	}
	for _, args := range commands {
		var out bytes.Buffer
		code := cli.Run(context.Background(), args, &out, &out)
		if code != 0 {
			t.Errorf("%v: exit %d\n%s", args, code, out.String())
		}
		if i := strings.Index(out.String(), "s3cret-of-"); i >= 0 {
			t.Errorf("%v prints a variable's value: …%s…", args, out.String()[max(i-60, 0):min(i+40, out.Len())])
		}
	}
}

// variablesNamed lists the variables the commands' own code names.
func variablesNamed(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	name := regexp.MustCompile(`\b(?:IDEMFLOW|DATABASE|TEMPORAL|OTEL)_[A-Z0-9_]+\b`)
	seen := map[string]bool{}
	var out []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range name.FindAllString(string(src), -1) {
			if !seen[n] {
				seen[n] = true
				out = append(out, n)
			}
		}
	}
	if !seen["IDEMFLOW_TOKEN"] || !seen["DATABASE_URL"] {
		t.Fatalf("the scan of the commands' code found %v", out)
	}
	return out
}
