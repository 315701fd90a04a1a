package testenv

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
)

// givenPorts are the ports FreePort handed out in this process: each is
// closed as soon as it is found free, so it must not be handed out twice
// before its child binds it (CI once saw dev's Temporal and gateway given
// the same port).
var givenPorts sync.Map

// FreePort returns a loopback port that is free now, for a child process
// to listen on. It is below the kernel's ephemeral range: a port found
// free by listening on :0 is an ephemeral one, which the kernel may hand
// to any outgoing connection (tests running beside this one open many)
// before the child binds it; and when that happens to dev's Temporal,
// the server's failed bind ends the child with status 1 and no word
// outside its log (CI saw `exited before it was up (exit status 1)`).
func FreePort(t testing.TB) int {
	t.Helper()
	low := EphemeralLow(t)
	for range 1000 {
		port := 10000 + rand.IntN(low-10000)
		if _, given := givenPorts.LoadOrStore(port, true); given {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		l.Close()
		return port
	}
	t.Fatalf("no free port between 10000 and %d", low)
	return 0
}

// EphemeralLow is the first port of the kernel's ephemeral range (Linux;
// 32768 where it cannot be read).
func EphemeralLow(t testing.TB) int {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	var low int
	if _, err := fmt.Sscan(string(b), &low); err != nil || low <= 10000 {
		t.Fatalf("the kernel's ephemeral range %q: %v", b, err)
	}
	return low
}
