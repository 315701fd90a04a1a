//go:build !nodev

package cli

import (
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/idemflow/idemflow/internal/tooling/devserver"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
)

// dev keeps an existing SQLite store unless told otherwise, and otherwise
// puts Temporal beside idemflow's database.
func TestDevChoosesTheTemporalStore(t *testing.T) {
	dir := t.TempDir()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	const db = "postgres://u:p@127.0.0.1:5432/idemflow"
	cfg := devserver.TemporalConfig{DataDir: dir}
	if err := chooseTemporalStore(logger, &cfg, "", db); err != nil || cfg.Postgres != db || cfg.PostgresDatabase != "idemflow_temporal" {
		t.Fatalf("a new data dir: %+v %v", cfg, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "temporal.db"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg = devserver.TemporalConfig{DataDir: dir}
	if err := chooseTemporalStore(logger, &cfg, "", db); err != nil || cfg.Postgres != "" {
		t.Fatalf("a data dir with a SQLite store: %+v %v", cfg, err)
	}
	if err := chooseTemporalStore(logger, &cfg, "postgres", db); err != nil || cfg.Postgres != db {
		t.Fatalf("told to move: %+v %v", cfg, err)
	}
	if err := chooseTemporalStore(logger, &cfg, "mysql", db); err == nil {
		t.Fatal("an unknown store was accepted")
	}
}

// The production build names the development commands it left out by
// devCommandNames: it must name these.
func TestDevCommandNamesAreTheDevCommands(t *testing.T) {
	names := slices.Sorted(maps.Keys(devCommands))
	if !slices.Equal(names, devCommandNames) {
		t.Fatalf("devCommandNames %v, the development commands %v", devCommandNames, names)
	}
}

// The banner's example is run as written: its key is new for the tenant
// (after a restart demo-1 already replays, and "run twice" would not
// hold), and its inspect line names the program as it is run from here
// (bin/idemflow after scripts/run.sh, not an idemflow that PATH lacks).
func TestTheBannersExampleRunsAsWrittenAfterARestart(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	token := s.Tokens[testenv.TenantA]
	first := tryIt(t.Context(), s.Gateway.Set, s.Records, s.URL, token, testenv.TenantA, "bin/idemflow")
	if !strings.Contains(first, "Idempotency-Key: demo-1'") || !strings.Contains(first, "bin/idemflow inspect "+testenv.TenantA+" demo-1") {
		t.Fatalf("a new tenant's banner:\n%s", first)
	}
	if r := s.Do(testenv.Request{Path: "/v1/tickets", Token: token, Key: "demo-1", Body: `{"customer_id":"c-1","title":"Printer on fire"}`}); r.Status != 201 {
		t.Fatalf("demo-1: %d %s", r.Status, r.Body)
	}
	if again := tryIt(t.Context(), s.Gateway.Set, s.Records, s.URL, token, testenv.TenantA, "bin/idemflow"); !strings.Contains(again, "Idempotency-Key: demo-2'") {
		t.Fatalf("the banner after demo-1 was used:\n%s", again)
	}
	notFound := func(string) (string, error) { return "", exec.ErrNotFound }
	for _, c := range []struct {
		exe, wd, want string
		lookPath      func(string) (string, error)
	}{
		{"/repo/bin/idemflow", "/repo", "bin/idemflow", notFound},
		{"/repo/idemflow", "/repo", "./idemflow", notFound},
		{"/opt/idemflow/idemflow", "/repo", "/opt/idemflow/idemflow", notFound},
		{"/usr/local/bin/idemflow", "/repo", "idemflow", func(string) (string, error) { return "/usr/local/bin/idemflow", nil }},
	} {
		if got := commandFor(c.exe, c.wd, c.lookPath); got != c.want {
			t.Errorf("commandFor(%s, %s) = %s, want %s", c.exe, c.wd, got, c.want)
		}
	}
}
