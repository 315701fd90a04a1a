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

	mu       sync.Mutex
	cmd      *exec.Cmd
	starts   int
	stopping bool
	done     chan struct{}
}

func (p *process) run(ctx context.Context, logger *slog.Logger) {
	defer close(p.done)
	for {
		out, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			logger.Error("chaos: open process log", "process", p.name, "error", err)
			return
		}
		cmd := exec.Command(p.exe, p.args...)
		cmd.Env = append(os.Environ(), p.env...)
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
		}
		p.mu.Unlock()
		if err != nil {
			logger.Error("chaos: start process", "process", p.name, "error", err)
		} else {
			_ = cmd.Wait()
		}
		out.Close()
		p.mu.Lock()
		stopping := p.stopping
		p.mu.Unlock()
		if stopping || ctx.Err() != nil {
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
func (p *process) tail() string {
	b, _ := os.ReadFile(p.log)
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

func (p *process) String() string {
	return fmt.Sprintf("%s (%s)", p.name, filepath.Base(p.log))
}
