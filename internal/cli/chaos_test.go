//go:build !nodev

package cli_test

import (
	"bytes"
	"context"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemflow/idemflow/internal/tooling/chaos"
)

// The short chaos run CI makes, on both topologies: every part of a
// production-shaped stack (private PostgreSQL, Temporal, and two 'serve'
// processes, or two gateways and two workers; each its own process: this
// test binary re-executed) is killed or cut while agents retry, every fault
// kind at least once. The idemflow client ends with no duplicate, nothing
// lost, nothing stuck, no reused key executed and no burst answered two
// ways; the naive client beside it, under the same faults, duplicates. The
// run ends on a number of jobs, and its process faults are paced by the
// jobs done, so it means the same on a loaded machine: the time bound is
// only a bound.
func TestChaosShortRunFindsNoViolationAndTheNaiveControlDuplicates(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos runs: a few minutes; not in -short")
	}
	for _, topology := range []string{chaos.TopologyServe, chaos.TopologySplit} {
		t.Run(topology, func(t *testing.T) {
			var out bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
			defer cancel()
			// Per-intent faults a little more often than by default, so
			// that a short run sees each several times.
			faults, err := chaos.ParseFaults("burst=0.15,reuse-changed=0.15,abandon=0.1,drop-reply=0.15")
			if err != nil {
				t.Fatal(err)
			}
			const jobs = 60
			rep, err := chaos.Run(ctx, chaos.Config{
				Topology:  topology,
				Faults:    faults,
				Exe:       os.Args[0],
				Env:       []string{"IDEMFLOW_TEST_CHILD=1"},
				Dir:       t.TempDir(),
				Jobs:      jobs,
				NaiveJobs: 40,
				Duration:  6 * time.Minute,
				Agents:    8,
				Out:       &out,
			})
			t.Log(out.String())
			if err != nil {
				t.Fatal(err)
			}
			if rep.CutShort || rep.Client.Jobs != jobs {
				t.Errorf("the time bound cut the load at %d of %d jobs", rep.Client.Jobs, jobs)
			}
			for _, k := range chaos.Kinds() {
				if rep.Enabled[k] && rep.Faults[k] == 0 {
					t.Errorf("fault %s was never injected", k)
				}
			}
			checkChaosVerdict(t, rep)
			if rep.Client.Refunds == 0 {
				t.Error("no HTTP tool job reached the downstream: its count checked nothing")
			}
			if rep.Naive.LogicalDuplicates == 0 {
				t.Errorf("the naive control made no duplicate: the run could not have seen one")
			}
		})
	}
}

// checkChaosVerdict fails t unless the run held the guarantee
// (Report.Failures).
func checkChaosVerdict(t *testing.T, rep *chaos.Report) {
	t.Helper()
	for _, f := range rep.Failures() {
		t.Error(f)
	}
}

// Two gateways and two workers, each its own process, against one Temporal
// and one PostgreSQL, with storms of up to 20 concurrent duplicates of an
// intent spread across both gateways and reused keys: every invariant the
// chaos checks cover holds, with no fault but the storms. The caller's
// shell has every setting a dev user exports, each pointing somewhere
// wrong: the stack's processes must not read them.
func TestTwoGatewaysTwoWorkersUnderDuplicateStormsHoldEveryInvariant(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	port := strconv.Itoa(busy.Addr().(*net.TCPAddr).Port)
	for k, v := range map[string]string{
		"IDEMFLOW_UI_PORT": port, "IDEMFLOW_TEMPORAL_PORT": port, "IDEMFLOW_HTTP_ADDR": "127.0.0.1:" + port,
		"IDEMFLOW_METRICS_ADDR": "127.0.0.1:" + port, "IDEMFLOW_PPROF_ADDR": "127.0.0.1:" + port,
		"DATABASE_URL": "postgres://nobody@127.0.0.1:1/none", "TEMPORAL_ADDRESS": "127.0.0.1:1", "TEMPORAL_NAMESPACE": "elsewhere",
		"IDEMFLOW_DATA_DIR": t.TempDir(), "IDEMFLOW_PROCESSING_TIMEOUT": "1h", "IDEMFLOW_BOOTSTRAP_TOKENS": "x",
	} {
		t.Setenv(k, v)
	}
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := chaos.Run(ctx, chaos.Config{
		Topology: chaos.TopologySplit,
		Exe:      os.Args[0], Env: []string{"IDEMFLOW_TEST_CHILD=1"}, Dir: t.TempDir(),
		Jobs: 80, NaiveJobs: 1, Agents: 8, Gateways: 2, Workers: 2,
		Faults: map[chaos.Kind]float64{chaos.Burst: 0.6, chaos.Reuse: 0.2},
		Out:    &out,
	})
	t.Log(out.String())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Faults[chaos.Burst] < 10 || rep.Faults[chaos.Reuse] == 0 {
		t.Fatalf("%d storms, %d reused keys: too few to check anything", rep.Faults[chaos.Burst], rep.Faults[chaos.Reuse])
	}
	checkChaosVerdict(t, rep)
}

// A part of the stack that cannot start fails the run early and says
// which part and why, instead of stalling it: here Temporal is given a
// Web UI port that is taken.
func TestChaosFailsEarlyNamingAComponentThatCannotStart(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	_, err = chaos.Run(ctx, chaos.Config{
		Exe: os.Args[0], Env: []string{"IDEMFLOW_TEST_CHILD=1", "IDEMFLOW_UI_PORT=" + strconv.Itoa(busy.Addr().(*net.TCPAddr).Port)},
		Dir: t.TempDir(), Jobs: 10, NaiveJobs: 1,
	})
	if err == nil {
		t.Fatal("the run succeeded with a Temporal that cannot start")
	}
	t.Logf("after %v: %v", time.Since(start).Round(time.Second), err)
	if ctx.Err() != nil {
		t.Fatalf("the run stalled until the test's bound: %v", err)
	}
	for _, want := range []string{"temporal cannot start", "address already in use"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q", want)
		}
	}
}
