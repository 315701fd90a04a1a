package chaos

import (
	"slices"
	"testing"
)

// A run with failovers fails over and back before its random faults: its
// first round, which a run bounded by jobs always completes, holds two
// failovers, and every other enabled process fault once.
func TestTheFirstRoundFailsOverAndBackAndHoldsEveryOtherFaultOnce(t *testing.T) {
	faults, err := ParseFaults("pg-failover=12,kill-temporal=0")
	if err != nil {
		t.Fatal(err)
	}
	round := firstRound(processFaults(faults))
	count := map[Kind]int{}
	for _, k := range round {
		count[k]++
	}
	want := map[Kind]int{KillWorker: 1, KillGateway: 1, PGTerminate: 1, PGRestart: 1, PGFailover: 2}
	for k, n := range want {
		if count[k] != n {
			t.Errorf("%s %d times in the first round %v, want %d", k, count[k], round, n)
		}
	}
	if len(round) != 6 || slices.Contains(round, KillTemporal) {
		t.Errorf("first round %v: want only the enabled process faults", round)
	}
	if got := firstRound(processFaults(DefaultFaults())); slices.Contains(got, PGFailover) {
		t.Errorf("without pg-failover the first round %v holds one", got)
	}
}
