// Package python holds a Python agent (agent.py) on the idemflow package
// (clients/python), and the test that runs it against the real stack with
// the package's virtual environment (scripts/test.sh installs it).
package python

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemflow/idemflow/internal/tooling/testenv"
)

// python is the Python of clients/python/.venv, where the idemflow package
// and its locked dependencies are installed.
func python(t *testing.T) string {
	t.Helper()
	py, err := filepath.Abs(filepath.Join("..", "..", "clients", "python", ".venv", "bin", "python"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(py); err != nil {
		t.Fatal("the idemflow Python package is not installed in clients/python/.venv: run scripts/test.sh (README, Agents: Python)")
	}
	return py
}

// The agent is killed between two attempts of one intent (its first
// attempt timed out: the worker is not running yet), then started again
// with the same intent ID: it resumes with the same key, and exactly one
// ticket exists.
func TestPythonAgentSurvivesAKillBetweenAttempts(t *testing.T) {
	py := python(t)
	s := testenv.NewStack(t, testenv.Options{NoWorker: true})
	db := filepath.Join(t.TempDir(), "intents.db")
	args := []string{"agent.py", "--url", s.URL, "--token", s.Tokens[testenv.TenantA], "--db", db,
		"--attempt-timeout", "1", "ticket", "--id", "step-1", "--customer", "c-1", "--title", "Printer on fire"}

	first := exec.Command(py, args...)
	out, err := first.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	first.Stderr = first.Stdout
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = first.Process.Kill() })
	var key string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		t.Log("first run: " + line)
		if k, ok := strings.CutPrefix(line, "new intent step-1 key="); ok {
			key = k
		}
		if strings.HasPrefix(line, "attempt 2 ") {
			break // the first attempt went out and timed out
		}
	}
	if key == "" {
		t.Fatal("the agent never made its key")
	}
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	rec, err := s.Records.Get(context.Background(), testenv.TenantA, key)
	if err != nil {
		t.Fatalf("the first run's key %s reached no record: %v", key, err)
	}
	if n := testenv.Count(t, s.Pool, "ticket", ""); n != 0 || rec.Status != "PROCESSING" {
		t.Fatalf("before the restart: %d tickets, record %s", n, rec.Status)
	}

	s.StartWorker()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	second, err := exec.CommandContext(ctx, py, args...).CombinedOutput()
	t.Log("second run:\n" + string(second))
	if err != nil {
		t.Fatalf("second run: %v", err)
	}
	if !strings.Contains(string(second), "resuming intent step-1 key="+key+"\n") || !strings.Contains(string(second), "done 201 ") {
		t.Fatal("the restarted agent did not resume the same key to a 201")
	}
	if n := testenv.Count(t, s.Pool, "ticket", ""); n != 1 {
		t.Fatalf("%d tickets, want 1", n)
	}
	// A third run answers from its own store, without a call.
	third, err := exec.Command(py, args...).CombinedOutput()
	if err != nil || strings.Contains(string(third), "attempt ") || !strings.Contains(string(third), "done 201 ") {
		t.Fatalf("third run: %v\n%s", err, third)
	}
}

// 400, 401, 404, 413 and 422 are answers, not failures: one attempt, then
// the agent says why and stops.
func TestPythonAgentDoesNotRetryAnAnswer(t *testing.T) {
	py := python(t)
	s := testenv.NewStack(t, testenv.Options{})
	for _, tc := range []struct{ name, token, title string }{
		{"invalid body (400)", s.Tokens[testenv.TenantA], strings.Repeat("t", 201)},
		{"unknown token (401)", "idf_not_a_token_not_a_token", "fine"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := exec.Command(py, "agent.py", "--url", s.URL, "--token", tc.token, "--db", filepath.Join(t.TempDir(), "i.db"),
				"ticket", "--id", "bad", "--customer", "c", "--title", tc.title).CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 2 || strings.Count(string(out), "attempt ") != 1 || !strings.Contains(string(out), "rejected: HTTP 4") {
				t.Fatalf("%v\n%s", err, out)
			}
		})
	}
}

// After a 400 nothing was recorded: the same --id with corrected arguments
// is sent under the same key. A change after the intent succeeded is
// refused with a message, not a traceback. Without --db the intents go to
// .idemflow/ under the working directory, never into the repository.
func TestPythonAgentRevisesWhatWasRefusedBeforeAnythingWasRecorded(t *testing.T) {
	py := python(t)
	s := testenv.NewStack(t, testenv.Options{})
	agent, err := filepath.Abs("agent.py")
	if err != nil {
		t.Fatal(err)
	}
	cwd := t.TempDir()
	run := func(title string) (int, string) {
		cmd := exec.Command(py, agent, "--url", s.URL, "--token", s.Tokens[testenv.TenantA],
			"ticket", "--id", "step-1", "--customer", "c-1", "--title", title)
		cmd.Dir = cwd
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode(), string(out)
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0, string(out)
	}
	if code, out := run(strings.Repeat("t", 201)); code != 2 || !strings.Contains(out, "rejected: HTTP 400") {
		t.Fatalf("a 201-character title: exit %d\n%s", code, out)
	}
	code, out := run("Printer on fire")
	if code != 0 || !strings.Contains(out, "revising intent step-1 key=") || !strings.Contains(out, "done 201 ") {
		t.Fatalf("the corrected title under the same id: exit %d\n%s", code, out)
	}
	code, out = run("Another title")
	if code != 2 || !strings.Contains(out, "refused: intent step-1: stored body") || strings.Contains(out, "Traceback") {
		t.Fatalf("a change after the intent succeeded: exit %d\n%s", code, out)
	}
	if _, err := os.Stat(filepath.Join(cwd, ".idemflow", "intents.db")); err != nil {
		t.Fatalf("the default store: %v", err)
	}
	if n := testenv.Count(t, s.Pool, "ticket", ""); n != 1 {
		t.Fatalf("%d tickets", n)
	}
}
