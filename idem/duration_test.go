package idem

import (
	"encoding/json"
	"testing"
	"time"
)

func TestDurationReadsOldAndNewEncodings(t *testing.T) {
	var d Duration
	for _, in := range []string{`300000000000`, `"5m0s"`} {
		if err := json.Unmarshal([]byte(in), &d); err != nil || d.D() != 5*time.Minute {
			t.Fatalf("%s: %v %v", in, d.D(), err)
		}
	}
	if b, _ := json.Marshal(Duration(5 * time.Minute)); string(b) != `"5m0s"` {
		t.Fatalf("encodes as %s", b)
	}
}
