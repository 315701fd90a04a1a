//go:build !nodev

package cli_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemflow/idemflow/internal/cli"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
)

// A dev stack's memory is flat under steady load: bench --soak holds new
// intents and replays against it and judges FLAT. Its control is the same
// stack with the embedded server's history cache left at Temporal's bound
// of 128,000 workflows (--temporal-history-cache 0): the same soak must see
// it grow, or the judgement could not fail.
func TestADevStacksMemoryIsFlatUnderASoakAndTheUnboundedCacheIsNot(t *testing.T) {
	for _, c := range []struct {
		name  string
		cache string
		code  int
		says  string
	}{
		{"bounded", "2000", 0, "FLAT: after "},
		{"unbounded control", "0", 3, "GROWING: after "},
	} {
		t.Run(c.name, func(t *testing.T) {
			dbURL := testenv.Database(t)
			dropTemporalDatabases(t, dbURL)
			dir := t.TempDir()
			dev := startDev(t, dbURL, "--data-dir", dir, "--http-addr", fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)),
				"--temporal-port", fmt.Sprint(testenv.FreePort(t)), "--ui-port", fmt.Sprint(testenv.FreePort(t)), "--temporal-history-cache", c.cache)
			dev.WaitUp(t, 2*time.Minute)
			var out bytes.Buffer
			code := cli.Run(context.Background(), []string{"bench", "--data-dir", dir, "--soak", "75s", "--interval", "5s", "--soak-clients", "8"}, &out, &out)
			t.Log(out.String())
			if code != c.code || !strings.Contains(out.String(), c.says) {
				t.Fatalf("bench --soak: exit %d, want %d and %q", code, c.code, c.says)
			}
		})
	}
}
