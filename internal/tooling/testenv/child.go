package testenv

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// ChildEnv is set in a child's environment: a test binary whose TestMain
// sees it runs as an idemflow process of its own (IDEMFLOW_TEST_CHILD=1),
// so that a test can kill it like a real one.
const ChildEnv = "IDEMFLOW_TEST_CHILD"

// Main runs the tests, or, in a child started by StartChild, the program
// itself (run, with the process's arguments, until SIGINT or SIGTERM).
// Call it from TestMain.
func Main(m *testing.M, run func(ctx context.Context, args []string, stdout, stderr io.Writer) int) {
	if os.Getenv(ChildEnv) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// Child is an idemflow command running in its own process: the test
// binary, re-executed with ChildEnv set.
type Child struct {
	Cmd *exec.Cmd
	// Up closes once the child printed its ready line.
	Up chan struct{}
	// Done receives the child's exit.
	Done chan error
	// drained closes once every line the child wrote has been read: a
	// child that exits is reported with its last lines, its error among
	// them.
	drained chan struct{}
	out     *strings.Builder
	mu      sync.Mutex
}

// StartChild runs the test binary as the command args, with env added to
// the environment; Up closes when it prints a line holding ready. It is
// killed when the test ends.
func StartChild(t testing.TB, env []string, ready string, args ...string) *Child {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), ChildEnv+"=1"), env...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	c := &Child{Cmd: cmd, Up: make(chan struct{}), Done: make(chan error, 1), drained: make(chan struct{}), out: &strings.Builder{}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(c.drained)
		sc := bufio.NewScanner(pr)
		once := sync.Once{}
		for sc.Scan() {
			c.mu.Lock()
			c.out.WriteString(sc.Text() + "\n")
			c.mu.Unlock()
			if strings.Contains(sc.Text(), ready) {
				once.Do(func() { close(c.Up) })
			}
		}
	}()
	go func() { c.Done <- cmd.Wait(); pw.Close() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return c
}

// Output is what the child wrote so far.
func (c *Child) Output() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.String()
}

// WaitUp fails the test unless the child is up within the bound.
func (c *Child) WaitUp(t testing.TB, within time.Duration) {
	t.Helper()
	select {
	case <-c.Up:
	case err := <-c.Done:
		select {
		case <-c.drained:
		case <-time.After(5 * time.Second):
		}
		t.Fatalf("exited before it was up (%v):\n%s", err, c.Output())
	case <-time.After(within):
		t.Fatalf("not up after %v:\n%s", within, c.Output())
	}
}
