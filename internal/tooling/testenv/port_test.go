package testenv

import (
	"fmt"
	"os"
	"testing"
)

// A port handed to a child is below the kernel's ephemeral range, so no
// outgoing connection takes it before the child binds it, and it is never
// handed out twice.
func TestFreePortIsBelowTheEphemeralRangeAndNeverGivenTwice(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		t.Fatalf("the kernel's ephemeral range: %v", err)
	}
	var low int
	if _, err := fmt.Sscan(string(b), &low); err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for range 200 {
		p := FreePort(t)
		if p >= low {
			t.Fatalf("port %d is in the kernel's ephemeral range (from %d)", p, low)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
}
