//go:build !nodev

package cli_test

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemflow/idemflow/internal/cli"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
)

// A dev stack's memory is flat under steady load: bench --soak holds new
// intents and replays against it, and its live heap grows by a small part
// of what its control's does. The control is the same stack with the
// embedded server's history cache left at Temporal's bound of 128,000
// workflows (--temporal-history-cache 0): the same soak must judge it
// GROWING, or the judgement could not fail.
//
// The bounded stack is judged against the control in the same run, not
// by bench's own allowance alone: on a loaded machine (a fresh-clone CI
// run, every package at once) its intents per second fell by two thirds
// and its heap grew 18 MiB (7,276 bytes per intent), past the 16 MiB
// allowance, while here it grows 3,227 bytes per intent and the control
// 31,630.
func TestADevStacksMemoryIsFlatUnderASoakAndTheUnboundedCacheIsNot(t *testing.T) {
	perIntent := map[string]float64{}
	for _, c := range []struct {
		name  string
		cache string
		code  int
		says  string
	}{
		{"bounded", "2000", -1, ""},
		{"unbounded control", "0", 3, "GROWING: after "},
	} {
		// The bounded stack's cache is filled to its bound (2000
		// workflows) before the soak's clock starts: on a loaded machine
		// the soak alone made too few intents to fill it before the
		// samples it judges, and it grew by a third of its control's
		// (issue #78). The control grows whatever is made first.
		warmup := "0"
		if c.cache != "0" {
			warmup = c.cache
		}
		t.Run(c.name, func(t *testing.T) {
			dbURL := testenv.Database(t)
			dropTemporalDatabases(t, dbURL)
			dir := t.TempDir()
			dev := startDev(t, dbURL, "--data-dir", dir, "--http-addr", fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)),
				"--temporal-port", fmt.Sprint(testenv.FreePort(t)), "--ui-port", fmt.Sprint(testenv.FreePort(t)), "--temporal-history-cache", c.cache)
			dev.WaitUp(t, 2*time.Minute)
			var out bytes.Buffer
			code := cli.Run(context.Background(), []string{"bench", "--data-dir", dir, "--soak", "75s", "--interval", "5s", "--soak-clients", "8", "--soak-warmup", warmup}, &out, &out)
			t.Log(out.String())
			if c.code >= 0 && (code != c.code || !strings.Contains(out.String(), c.says)) {
				t.Fatalf("bench --soak: exit %d, want %d and %q", code, c.code, c.says)
			}
			if warmup != "0" && !strings.Contains(out.String(), "soak: warm-up: "+warmup+" new intents (0 failed)") {
				t.Fatalf("bench --soak did not fill the cache first (%s intents):\n%s", warmup, out.String())
			}
			m := regexp.MustCompile(`process 1: live heap ([+-]\d+) bytes per intent`).FindStringSubmatch(out.String())
			if m == nil || code != 0 && code != 3 {
				t.Fatalf("bench --soak: exit %d, and no growth per intent in its report", code)
			}
			perIntent[c.name], _ = strconv.ParseFloat(m[1], 64)
		})
	}
	bounded, control := perIntent["bounded"], perIntent["unbounded control"]
	t.Logf("live heap per intent: bounded %+.0f bytes, the control %+.0f", bounded, control)
	if control <= 0 || bounded > control/3 {
		t.Fatalf("the bounded stack's live heap grew %+.0f bytes per intent, not under a third of its control's %+.0f", bounded, control)
	}
}
