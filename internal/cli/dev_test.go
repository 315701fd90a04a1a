//go:build !nodev

package cli

import (
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/idemflow/idemflow/internal/tooling/devserver"
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
