package gateway_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemflow/idemflow/internal/tooling/testenv"
)

// A request whose caller hung up while it waited got no answer, and the
// gateway logged it as "status=200" (issue #55: "status=200 took=3m0s"
// for requests nobody was answered). Its line now says the caller left
// (499, nginx's "client closed request") and what its intent had come to
// by then.
func TestARequestWhoseCallerLeftIsLoggedAsSuch(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{NoWorker: true})
	var mu sync.Mutex
	var logged bytes.Buffer
	s.Gateway.Logger = slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logged.Write(p)
	}), nil))
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", s.URL+"/v1/tickets", strings.NewReader(`{"customer_id":"c-gone","title":"left"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.Tokens[testenv.TenantA])
	req.Header.Set("Idempotency-Key", "gone-1")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Prefer", "wait=20")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("the intent was answered (%d) with no worker to run it", resp.StatusCode)
	}
	var line string
	for deadline := time.Now().Add(10 * time.Second); line == "" && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		mu.Lock()
		for _, l := range strings.Split(logged.String(), "\n") {
			if strings.Contains(l, "key=gone-1") {
				line = l
			}
		}
		mu.Unlock()
	}
	if !strings.Contains(line, "status=499") || !strings.Contains(line, "outcome=client_gone") {
		t.Fatalf("the abandoned request's line: %q; want status=499 and outcome=client_gone", line)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
