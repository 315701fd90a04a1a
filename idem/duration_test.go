package idem

import (
	"encoding/json"
	"testing"
	"time"
)

func TestDurationIsReadableAndRoundTrips(t *testing.T) {
	var d Duration
	if err := json.Unmarshal([]byte(`"5m0s"`), &d); err != nil || d.D() != 5*time.Minute {
		t.Fatalf("%v %v", d.D(), err)
	}
	if b, _ := json.Marshal(Duration(5 * time.Minute)); string(b) != `"5m0s"` {
		t.Fatalf("encodes as %s", b)
	}
}
