package gateway_test

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemflow/idemflow/internal/gateway"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
)

// Where a request's time goes: a new intent's claim, start and wait are
// each timed once, and the metrics serve them; a replay is answered at the
// claim, before any start.
func TestAnIntentsStagesAreTimedAndServed(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	s.Gateway.Metrics = gateway.NewMetrics()
	var mu sync.Mutex
	var stages []string
	s.Gateway.Starter.Stages = func(stage string, took time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		if took <= 0 {
			t.Errorf("stage %s took %s", stage, took)
		}
		stages = append(stages, stage)
		s.Gateway.Metrics.Stage(stage, took)
	}
	taken := func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := slices.Clone(stages)
		stages = stages[:0]
		return out
	}
	if r := ticket(s, testenv.TenantA, "stages-1", ticketBody); r.Status != http.StatusCreated {
		t.Fatalf("first: %d %s", r.Status, r.Body)
	}
	if got := strings.Join(taken(), " "); got != "claim start wait" {
		t.Errorf("a new intent's stages: %q, want claim start wait", got)
	}
	if r := ticket(s, testenv.TenantA, "stages-1", ticketBody); r.Status != http.StatusCreated {
		t.Fatalf("replay: %d %s", r.Status, r.Body)
	}
	if got := strings.Join(taken(), " "); got != "claim" {
		t.Errorf("a replay's stages: %q, want the claim alone", got)
	}
	page := httptest.NewRecorder()
	s.Gateway.Metrics.Handler().ServeHTTP(page, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for _, want := range []string{`idemflow_intent_stage_seconds_count{stage="claim"} 2`, `idemflow_intent_stage_seconds_count{stage="wait"} 1`} {
		if !strings.Contains(page.Body.String(), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
