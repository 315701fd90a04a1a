package testenv

import (
	"sync"
	"testing"

	"github.com/idemflow/idemflow/internal/tooling/devserver"
)

// givenPorts are the ports FreePort handed out in this process: each is
// closed as soon as it is found free, so it must not be handed out twice
// before its child binds it (CI once saw dev's Temporal and gateway given
// the same port).
var givenPorts sync.Map

// FreePort returns a loopback port that is free now, for a child process
// to listen on, never the same twice in a process: devserver.FreePort's,
// below the kernel's ephemeral range (CI saw a child dev "exited before it
// was up (exit status 1)" when an outgoing connection took its port).
func FreePort(t testing.TB) int {
	t.Helper()
	for range 1000 {
		port, err := devserver.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if _, given := givenPorts.LoadOrStore(port, true); !given {
			return port
		}
	}
	t.Fatal("no free port not handed out before")
	return 0
}
