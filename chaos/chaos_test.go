package chaos_test

import (
	"testing"

	"github.com/idemflow/idemflow/chaos"
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
