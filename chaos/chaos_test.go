package chaos_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/idemflow/idemflow/chaos"
	"github.com/idemflow/idemflow/testenv"
)

func TestParseFaultsSwitchesKindsAndRefusesUnknownOnesAndBadRates(t *testing.T) {
	m, err := chaos.ParseFaults("none, drop-reply=0.3, kill-temporal=2")
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 2 || m[chaos.DropReply] != 0.3 || m[chaos.KillTemporal] != 2 {
		t.Fatalf("got %v", m)
	}
	d, err := chaos.ParseFaults("pg-restart=0")
	if err != nil || d[chaos.PGRestart] != 0 || d[chaos.DropReply] == 0 {
		t.Fatalf("over the defaults: %v %v", d, err)
	}
	for _, bad := range []string{"drop-reply", "meteor=1", "drop-reply=1.5", "kill-worker=-1", "latency=x"} {
		if _, err := chaos.ParseFaults(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// Pointed at an existing deployment (--url, --database-url,
// --temporal-address), chaos runs only the faults that need no process of
// its own, and checks the same invariants. Abandoned intents are off here:
// the in-process stack runs no reconcile schedule to settle them.
func TestChaosAgainstAnExistingDeploymentInjectsWireFaultsOnly(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	faults, err := chaos.ParseFaults("abandon=0")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	rep, err := chaos.Run(t.Context(), chaos.Config{
		URL: s.URL, DatabaseURL: s.DatabaseURL, TemporalAddress: s.Server.GetFrontendHostPort(), Namespace: s.Server.GetDefaultNamespace(),
		Jobs: 60, NaiveJobs: 20, Agents: 6, Faults: faults, Dir: t.TempDir(), AttemptTimeout: 2 * time.Second, Out: &out,
	})
	t.Log(out.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []chaos.Kind{chaos.KillWorker, chaos.KillGateway, chaos.PGRestart, chaos.KillTemporal, chaos.Latency} {
		if rep.Enabled[k] || rep.Faults[k] != 0 {
			t.Errorf("%s ran against a deployment it does not own", k)
		}
	}
	if rep.Faults[chaos.DropReply] == 0 || !rep.OK() {
		t.Fatalf("drops %d, %d violations", rep.Faults[chaos.DropReply], len(rep.Violations))
	}
}
