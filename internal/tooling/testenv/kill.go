package testenv

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Fault is where a kill test's kill comes.
type Fault int

const (
	// AnswerLost: idemflow executed the call; its answer is dropped, and
	// the agent is killed while it waits for it.
	AnswerLost Fault = iota
	// BeforeReceived: the agent is killed with its request sent, before
	// idemflow received it.
	BeforeReceived
)

// FaultProxy stands between an agent and the gateway: the first POST to
// its path (an operation's: the tests' tickets) gets the fault, and Hit
// is closed when it did.
type FaultProxy struct {
	*httptest.Server
	Hit  chan struct{}
	once sync.Once
}

// NewFaultProxy serves a FaultProxy for path in front of gateway until t
// ends.
func NewFaultProxy(t *testing.T, gateway, path string, f Fault) *FaultProxy {
	u, _ := url.Parse(gateway)
	rp := httputil.NewSingleHostReverseProxy(u)
	p := &FaultProxy{Hit: make(chan struct{})}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		first := false
		if r.Method == http.MethodPost && r.URL.Path == path {
			p.once.Do(func() { first = true })
		}
		if !first {
			rp.ServeHTTP(w, r)
			return
		}
		if f == BeforeReceived {
			// The body is read, so that the server sees the connection
			// close; it goes no further.
			_, _ = io.Copy(io.Discard, r.Body)
			close(p.Hit)
			<-r.Context().Done() // the agent dies; nothing reaches the gateway
			return
		}
		rec := httptest.NewRecorder()
		rp.ServeHTTP(rec, r)
		if rec.Code != http.StatusCreated {
			t.Errorf("the first call of %s was answered %d: %s", path, rec.Code, rec.Body)
		}
		close(p.Hit)
		<-r.Context().Done() // the answer never leaves; the agent dies waiting
	}))
	t.Cleanup(p.Close)
	return p
}

// KillMidCall runs bin with args and environ in dir (empty: the test's
// own), and SIGKILLs it once p saw its call. t fails if the program
// never calls, or finished first (printed DONE).
func KillMidCall(t *testing.T, dir, bin string, environ []string, p *FaultProxy, args ...string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir, cmd.Env = dir, environ
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		_, _ = io.Copy(io.Discard, stdout)
		close(lines)
	}()
	select {
	case <-p.Hit:
	case <-time.After(90 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("the agent never made its call")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	for l := range lines {
		t.Logf("%s %s, killed run: %s", bin, strings.Join(args, " "), l)
		if strings.Contains(l, "DONE") {
			t.Fatal("the agent finished before it was killed")
		}
	}
}

// RunToDone runs bin with args and environ in dir (empty: the test's own)
// and returns its output, once it printed done and ended; t fails if it
// does not within two minutes.
func RunToDone(t *testing.T, dir, bin string, environ []string, done string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir, cmd.Env = dir, environ
	out, err := cmd.CombinedOutput()
	t.Logf("%s %s:\n%s", filepath.Base(bin), strings.Join(args, " "), out)
	if err != nil || !strings.Contains(string(out), done) {
		t.Fatalf("the agent did not finish: %v", err)
	}
	return string(out)
}
