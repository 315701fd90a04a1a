package chaos

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// process is one idemflow process (temporal, worker or gateway) under a
// supervisor that starts it again whenever it dies, as systemd or
// Kubernetes would. Kill SIGKILLs it; the supervisor restarts it after a
// pause.
type process struct {
	name string
	exe  string
	args []string
	env  []string
	log  string // file its output goes to
	down func() time.Duration
	// cannotRun is told, once, that the process keeps exiting on its own
	// soon after each start: it cannot run, and waiting on it would stall
	// the run.
	cannotRun func(error)

	mu       sync.Mutex
	cmd      *exec.Cmd
	starts   int
	stopping bool
	killed   bool // the current start was ended by Kill
	done     chan struct{}
}

// A process that exits on its own within shortLived of its start, failing
// times in a row over at least failingFor, cannot start: a crash loop.
// A restarted PostgreSQL or Temporal can make a few starts fail; that
// heals within seconds.
const (
	shortLived = 10 * time.Second
	failing    = 4
	failingFor = 20 * time.Second
)

// childEnv is the environment of the stack's processes: only what a
// process needs to run, and env. The caller's own IDEMFLOW_*, TEMPORAL_*,
// DATABASE_URL and PG* settings (a dev user has them exported) must not
// reach a stack whose every setting chaos gives on the command line.
func childEnv(env []string) []string {
	var out []string
	for _, k := range []string{"PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "TZ", "GOCOVERDIR"} {
		if v, ok := os.LookupEnv(k); ok {
			out = append(out, k+"="+v)
		}
	}
	return append(out, env...)
}

func (p *process) run(ctx context.Context, logger *slog.Logger) {
	defer close(p.done)
	var streak int
	var streakSince time.Time
	for {
		out, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			logger.Error("chaos: open process log", "process", p.name, "error", err)
			return
		}
		cmd := exec.Command(p.exe, p.args...)
		cmd.Env = p.env
		cmd.Stdout, cmd.Stderr = out, out
		// Its own process group, so that a Ctrl-C of chaos reaches it only
		// through Stop; and it dies with chaos if chaos is killed outright
		// (Linux), rather than keep serving with nobody to stop it. The
		// private PostgreSQL, a daemon of pg_ctl's, is stopped by chaos
		// itself, or by 'idemflow postgres --data-dir DIR --stop'.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		p.mu.Lock()
		if p.stopping {
			p.mu.Unlock()
			out.Close()
			return
		}
		err = cmd.Start()
		if err == nil {
			p.cmd = cmd
			p.starts++
			p.killed = false
		}
		p.mu.Unlock()
		started := time.Now()
		if err != nil {
			logger.Error("chaos: start process", "process", p.name, "error", err)
		} else {
			_ = cmd.Wait()
		}
		out.Close()
		p.mu.Lock()
		stopping, killed := p.stopping, p.killed
		p.mu.Unlock()
		if stopping || ctx.Err() != nil {
			return
		}
		switch {
		case killed || time.Since(started) >= shortLived:
			streak = 0
		case streak == 0:
			streak, streakSince = 1, started
		default:
			streak++
		}
		if streak >= failing && time.Since(streakSince) >= failingFor && p.cannotRun != nil {
			p.cannotRun(fmt.Errorf("%s cannot start: it exited on its own %d times in a row, each within %v of its start, for %v; its last log line (%s): %s",
				p.name, streak, shortLived, time.Since(streakSince).Round(time.Second), p.log, p.lastLines(1)))
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(p.down()):
		}
	}
}

// Kill SIGKILLs the running process: no shutdown, no flush, as a crash.
func (p *process) Kill() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil || p.cmd.ProcessState != nil {
		return false
	}
	p.killed = true
	return p.cmd.Process.Kill() == nil
}

// Stop ends the process for good: SIGTERM, then SIGKILL after grace.
func (p *process) Stop(grace time.Duration) {
	p.mu.Lock()
	p.stopping = true
	cmd := p.cmd
	p.mu.Unlock()
	if cmd != nil && cmd.Process != nil {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
			return
		case <-time.After(grace):
			_ = cmd.Process.Kill()
		}
	}
	<-p.done
}

// tail is the end of the process's log, for error messages.
func (p *process) tail() string { return tailOf(p.log) }

// tailOf is the end of the log at path, for a failure's message.
func tailOf(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(bytes.TrimSpace(b))
}

// ports hands out loopback ports that were free when asked for, never the
// same one twice: a probed port is closed at once, so the kernel may offer
// it again before the process it was meant for binds it.
type ports struct {
	mu    sync.Mutex
	given map[int]bool
}

func (ps *ports) port() (int, error) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !ps.given[p] {
			if ps.given == nil {
				ps.given = map[int]bool{}
			}
			ps.given[p] = true
			return p, nil
		}
	}
}

func (ps *ports) addr() (string, error) {
	p, err := ps.port()
	if err != nil {
		return "", err
	}
	return "127.0.0.1:" + strconv.Itoa(p), nil
}

// lastLines is the last n lines of the process's log.
func (p *process) lastLines(n int) string {
	lines := strings.Split(p.tail(), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func (p *process) String() string {
	return fmt.Sprintf("%s (%s)", p.name, filepath.Base(p.log))
}
