//go:build !nodev

package chaos_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/idemflow/idemflow/internal/cli"
	"github.com/idemflow/idemflow/internal/tooling/chaos"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
)

// TestMain lets a failover run start this test binary as the stack's
// idemflow processes (testenv.Main), as the CLI's chaos tests do.
func TestMain(m *testing.M) {
	testenv.Main(m, func(ctx context.Context, args []string, stdout, stderr io.Writer) int {
		return cli.Run(ctx, args, stdout, stderr)
	})
}

// The primary PostgreSQL is SIGKILLed with all its backends under load,
// its streaming standby promoted, the address every process and Temporal
// reach it at moved, and the old primary rebuilt as the new standby, again
// and again. Synchronous (synchronous_standby_names names the standby),
// on both topologies and with every other fault on as well, nothing
// acknowledged is lost: the four zeros hold, and no process was restarted
// to find the new primary. Asynchronous, over a link that trails, the
// same run loses what agents were told, and the checks name it: an answer
// whose record and row are gone, and a replay that is not the first
// answer.
func TestAFailoverLosesNothingWhenSynchronousAndTheChecksNameWhatAsyncLoses(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos runs with failovers: minutes; not in -short")
	}
	for _, c := range []struct {
		name, topology, replication, faults, cluster string
		lag                                          time.Duration
		// jobs bound a run; without, its time does (a run whose
		// failovers lose state ends its jobs early).
		jobs int
	}{
		// Every fault on; after the first round, most process faults
		// are failovers.
		{"sync/serve", chaos.TopologyServe, chaos.ReplicationSync, "pg-failover=12", chaos.ClusterOwn, 0, 150},
		{"sync/split", chaos.TopologySplit, chaos.ReplicationSync, "pg-failover=12", chaos.ClusterOwn, 0, 150},
		// On Patroni: every fault but pg-restart (Patroni restarts its
		// own members), its leaders SIGKILLed; Temporal's store is on
		// the cluster too, through HAProxy.
		{"sync/patroni", chaos.TopologyServe, chaos.ReplicationSync, "pg-failover=12,pg-restart=0", chaos.ClusterPatroni, 0, 150},
		// The control: failovers alone, the standby a second behind
		// (a 2 s round trip; with 400 ms, a run lost nothing an agent
		// was told: the answer comes a few commits after the row's).
		{"async/serve", chaos.TopologyServe, chaos.ReplicationAsync, "none,pg-failover=1", chaos.ClusterOwn, 2 * time.Second, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			faults, err := chaos.ParseFaults(c.faults)
			if err != nil {
				t.Fatal(err)
			}
			// The stack's data and logs outlive a failed run, to be read.
			dir, err := os.MkdirTemp("", "idemflow-failover-")
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if t.Failed() {
					t.Logf("the run's data and logs: %s", dir)
				} else {
					_ = os.RemoveAll(dir)
				}
			}()
			var out bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
			defer cancel()
			rep, err := chaos.Run(ctx, chaos.Config{
				Topology: c.topology, Faults: faults, Replication: c.replication, ReplicationLag: c.lag, Cluster: c.cluster,
				Exe: os.Args[0], Env: []string{testenv.ChildEnv + "=1"}, Dir: dir,
				Jobs: c.jobs, NaiveJobs: 20, Duration: duration(c.jobs), Agents: 8, FaultEvery: 2 * time.Second,
				Out: &out,
			})
			t.Log(out.String())
			if err != nil {
				t.Fatal(err)
			}
			if rep.Failovers < 2 {
				t.Fatalf("%d failovers: too few to have failed over and back", rep.Failovers)
			}
			if c.replication == chaos.ReplicationSync {
				for _, f := range rep.Failures() {
					t.Error(f)
				}
				if rep.AcknowledgedLost != 0 {
					t.Errorf("%d acknowledged intents lost with a synchronous standby", rep.AcknowledgedLost)
				}
				return
			}
			_, lost, _, mismatches := rep.Zeros()
			if rep.OK() || lost == 0 || mismatches == 0 || rep.AcknowledgedLost == 0 {
				t.Fatalf("the asynchronous control: ok %v, lost %d, replay mismatches %d, acknowledged and lost %d: "+
					"the checks did not see what a failover loses", rep.OK(), lost, mismatches, rep.AcknowledgedLost)
			}
			if !strings.Contains(strings.Join(rep.Violations, "\n"), "but there are 0 rows") {
				t.Errorf("no violation names an answered intent with no row: %q", rep.Violations)
			}
			t.Logf("the asynchronous control lost %d acknowledged intents, answered up to %v before a failover; %d replays differed",
				rep.AcknowledgedLost, rep.LossWindow, mismatches)
		})
	}
}

// duration bounds a run of jobs loosely, and a run without jobs to two
// minutes: start-up, about a minute of load, and the checks.
func duration(jobs int) time.Duration {
	if jobs > 0 {
		return 7 * time.Minute
	}
	return 2 * time.Minute
}
