//go:build !nodev

package cli_test

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"github.com/idemflow/idemflow/chaos"
)

// The short chaos run CI makes: every part of a production-shaped stack
// (private PostgreSQL, Temporal, two gateways, two workers, each its own
// process: this test binary re-executed) is killed or cut while agents
// retry, every fault kind at least once. The idemflow client ends with no
// duplicate, nothing lost, nothing stuck; the naive client beside it, under
// the same faults, duplicates.
func TestChaosShortRunFindsNoViolationAndTheNaiveControlDuplicates(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos run: a minute and a half; not in -short")
	}
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	// Per-intent faults a little more often than by default, so that a
	// short run sees each several times.
	faults, err := chaos.ParseFaults("burst=0.15,reuse-changed=0.15,abandon=0.1")
	if err != nil {
		t.Fatal(err)
	}
	rep, err := chaos.Run(ctx, chaos.Config{
		Faults:     faults,
		Exe:        os.Args[0],
		Env:        []string{"IDEMFLOW_TEST_CHILD=1"},
		Dir:        t.TempDir(),
		Duration:   30 * time.Second,
		Agents:     8,
		FaultEvery: 2 * time.Second,
		Out:        &out,
	})
	t.Log(out.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range chaos.Kinds {
		if rep.Faults[k] == 0 {
			t.Errorf("fault %s was never injected", k)
		}
	}
	if !rep.OK() {
		t.Errorf("%d violations", len(rep.Violations))
	}
	if d, l, s, m := rep.Zeros(); d+l+s+m != 0 {
		t.Errorf("duplicates %d, lost %d, stuck %d, replay mismatches %d", d, l, s, m)
	}
	if rep.Naive.LogicalDuplicates == 0 {
		t.Errorf("the naive control made no duplicate: the run could not have seen one")
	}
	if rep.Client.Intents < 100 {
		t.Errorf("only %d intents: too little load to mean anything", rep.Client.Intents)
	}
}

// Two gateways and two workers, each its own process, against one Temporal
// and one PostgreSQL, with storms of up to 20 concurrent duplicates of an
// intent spread across both gateways: every invariant the chaos checks
// cover holds, with no fault but the storms.
func TestTwoGatewaysTwoWorkersUnderDuplicateStormsHoldEveryInvariant(t *testing.T) {
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := chaos.Run(ctx, chaos.Config{
		Exe: os.Args[0], Env: []string{"IDEMFLOW_TEST_CHILD=1"}, Dir: t.TempDir(),
		Jobs: 80, NaiveJobs: 1, Agents: 8, Gateways: 2, Workers: 2,
		Faults: map[chaos.Kind]float64{chaos.Burst: 0.6, chaos.Reuse: 0.2},
		Out:    &out,
	})
	t.Log(out.String())
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.Faults[chaos.Burst] < 10 {
		t.Fatalf("%d violations, %d storms", len(rep.Violations), rep.Faults[chaos.Burst])
	}
}
