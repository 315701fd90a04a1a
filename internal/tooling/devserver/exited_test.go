package devserver

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// A SIGKILLed process that its parent has not reaped yet is a zombie: it
// holds no port, file or lock, so it has exited, however long the reaper
// (a container's init; here the test itself, which never reaps it before
// the end) takes. Kill and the Patroni harness ask this after their
// SIGKILL. Kill once waited up to 2 s for the process to be gone, reaping
// included, and on a loaded CI machine failed with "postgres: … still runs
// after SIGKILL", then passed on a rerun.
func TestAKilledProcessNotYetReapedHasExited(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	if Exited(pid) {
		t.Fatalf("a running process %d reads as exited", pid)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Not reaped until the end: cmd.Wait is its parent's reaping.
	defer func() { _ = cmd.Wait() }()
	deadline := time.Now().Add(5 * time.Second)
	for !Exited(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d, SIGKILLed and not reaped, still reads as running", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
