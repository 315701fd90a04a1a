package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemflow/idemflow/internal/gateway"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
)

func metric(t *testing.T, s *testenv.Stack, line string) bool {
	t.Helper()
	return strings.Contains(string(s.Do(testenv.Request{Method: "GET", Path: "/metrics"}).Body), line)
}

// Each waiting request holds a goroutine and a Temporal long poll: past
// the bound, a request answers at once and the agent polls.
func TestWaitingRequestsAreBounded(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{NoWorker: true})
	s.Gateway.SetMaxWaiting(1)
	wait := map[string]string{"Prefer": "wait=20"}
	first := make(chan testenv.Response, 1)
	go func() {
		first <- s.Do(testenv.Request{Path: "/v1/tickets", Token: s.Tokens[testenv.TenantA], Key: "w-1", Body: ticketBody, Header: wait})
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !metric(t, s, "idemflow_waiting_requests 1") {
		if time.Now().After(deadline) {
			t.Fatal("the first request never waited")
		}
		time.Sleep(20 * time.Millisecond)
	}
	second := s.Do(testenv.Request{Path: "/v1/tickets", Token: s.Tokens[testenv.TenantA], Key: "w-2", Body: ticketBody, Header: wait})
	if second.Status != http.StatusAccepted || second.Header.Get("Preference-Applied") != "wait=0" {
		t.Fatalf("second request past the bound: %d %v", second.Status, second.Header)
	}
	select {
	case r := <-first:
		t.Fatalf("the first request stopped waiting: %d", r.Status)
	default:
	}
	s.StartWorker()
	if r := <-first; r.Status != http.StatusCreated {
		t.Fatalf("first: %d %s", r.Status, r.Body)
	}
}

// A caller that hangs up is not a dependency outage.
func TestClientHangingUpIsNotCountedUnavailable(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{NoWorker: true})
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/v1/tickets", strings.NewReader(ticketBody))
	req.Header.Set("Authorization", "Bearer "+s.Tokens[testenv.TenantA])
	req.Header.Set("Idempotency-Key", "hang-up")
	req.Header.Set("Prefer", "wait=20")
	if _, err := http.DefaultClient.Do(req); err == nil {
		t.Fatal("the request should have been cut off")
	}
	deadline := time.Now().Add(10 * time.Second)
	for !metric(t, s, `idemflow_intents_total{biz_type="ticket.create",outcome="client_gone"} 1`) {
		if time.Now().After(deadline) {
			t.Fatal("the hang-up was not counted as client_gone")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if metric(t, s, `outcome="unavailable"`) {
		t.Fatal("a hang-up was counted as unavailable")
	}
}

func TestMetricsCanLeaveTheGatewayRoutes(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	g := gateway.New(s.Pool, s.Temporal, s.Records, s.Set, s.Logger)
	g.ServeMetrics = false
	hs := httptest.NewServer(g.Handler())
	defer hs.Close()
	if r := testenv.Do(t, hs.URL, testenv.Request{Method: "GET", Path: "/metrics"}); r.Status != http.StatusNotFound {
		t.Fatalf("/metrics on the gateway: %d", r.Status)
	}
	m := httptest.NewServer(g.Metrics.Handler())
	defer m.Close()
	// Not the gateway: Send, which checks no contract.
	if r, err := testenv.Send(m.URL, testenv.Request{Method: "GET", Path: "/"}); err != nil || r.Status != 200 || !strings.Contains(string(r.Body), "idemflow_waiting_requests") {
		t.Fatalf("metrics on their own address: %d", r.Status)
	}
}

// Methods are a client's to invent, and a 405 is answered before
// authentication: the request metric's method label stays within the
// standard methods, so /metrics cannot be grown by anyone.
func TestInventedMethodsDoNotGrowTheMetrics(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	for i := range 50 {
		r, err := testenv.Send(s.URL, testenv.Request{Method: fmt.Sprintf("INVENTED%d", i), Path: "/v1/tickets"})
		if err != nil || r.Status != http.StatusMethodNotAllowed {
			t.Fatalf("%v %d", err, r.Status)
		}
	}
	r, err := testenv.Send(s.URL, testenv.Request{Method: "GET", Path: "/metrics"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(r.Body), "INVENTED") {
		t.Fatal("an invented method is a label value")
	}
	if !strings.Contains(string(r.Body), `idemflow_http_request_duration_seconds_count{code="405",method="other",route="/v1/tickets"} 50`) {
		t.Fatalf("invented methods are not counted as other:\n%s", r.Body)
	}
}
