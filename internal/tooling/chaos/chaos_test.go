package chaos_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemflow/idemflow/internal/tooling/chaos"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
)

func TestParseFaultsSwitchesKindsAndRefusesUnknownOnesAndBadRates(t *testing.T) {
	m, err := chaos.ParseFaults("none, drop-reply=0.3, kill-temporal=2")
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 2 || m[chaos.DropReply] != 0.3 || m[chaos.KillTemporal] != 2 {
		t.Fatalf("got %v", m)
	}
	d, err := chaos.ParseFaults("pg-restart=0")
	if err != nil || d[chaos.PGRestart] != 0 || d[chaos.DropReply] == 0 {
		t.Fatalf("over the defaults: %v %v", d, err)
	}
	for _, bad := range []string{"drop-reply", "meteor=1", "drop-reply=1.5", "kill-worker=-1", "latency=x"} {
		if _, err := chaos.ParseFaults(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// Pointed at an existing deployment (--url, --database-url,
// --temporal-address), chaos runs only the faults on its own wire and
// agents, says so in its banner, and checks the same invariants. Abandoned intents are off here:
// the in-process stack runs no reconcile schedule to settle them.
func TestChaosAgainstAnExistingDeploymentInjectsWireFaultsOnly(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	faults, err := chaos.ParseFaults("abandon=0")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	rep, err := chaos.Run(t.Context(), chaos.Config{
		URL: s.URL, DatabaseURL: s.DatabaseURL, TemporalAddress: s.Server.GetFrontendHostPort(), Namespace: s.Server.GetDefaultNamespace(),
		Jobs: 60, NaiveJobs: 20, Agents: 6, Faults: faults, Dir: t.TempDir(), AttemptTimeout: 2 * time.Second, Out: &out,
	})
	t.Log(out.String())
	if err != nil {
		t.Fatal(err)
	}
	// pg-terminate touches the target's database: not without
	// TargetFaults naming it.
	first, _, _ := strings.Cut(out.String(), "\n")
	_, banner, _ := strings.Cut(first, "; faults: ")
	for _, k := range []chaos.Kind{chaos.KillWorker, chaos.KillGateway, chaos.PGRestart, chaos.KillTemporal, chaos.Latency, chaos.PGTerminate} {
		if rep.Enabled[k] || rep.Faults[k] != 0 || strings.Contains(banner, string(k)) {
			t.Errorf("%s ran against a deployment it does not own", k)
		}
	}
	if !strings.Contains(banner, string(chaos.DropReply)) {
		t.Errorf("the banner does not list the faults that run: %q", first)
	}
	if rep.Faults[chaos.DropReply] == 0 || !rep.OK() {
		t.Fatalf("drops %d, %d violations", rep.Faults[chaos.DropReply], len(rep.Violations))
	}
}

// sabotage stands in front of a real gateway and breaks one invariant the
// way a regression would, so that a test can see chaos fail on it.
type sabotage struct {
	next http.Handler
	// reuse: a key sent again with another body is passed on under a fresh
	// key, so it executes (invariant 2 broken).
	reuse bool
	// burst: while another request with the same key is in flight, the
	// answer's body is altered (invariant 3 broken, for concurrent
	// duplicates only: sequential replays stay intact).
	burst bool

	mu       sync.Mutex
	bodies   map[string][]byte
	inFlight map[string]int
}

func (s *sabotage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	s.mu.Lock()
	if s.bodies == nil {
		s.bodies, s.inFlight = map[string][]byte{}, map[string]int{}
	}
	first, seen := s.bodies[key]
	if !seen {
		s.bodies[key] = body
	}
	s.inFlight[key]++
	concurrent := s.inFlight[key] > 1
	s.mu.Unlock()
	defer func() { s.mu.Lock(); s.inFlight[key]--; s.mu.Unlock() }()
	if s.reuse && key != "" && seen && !bytes.Equal(first, body) {
		r.Header.Set("Idempotency-Key", key+"-sabotaged")
	}
	rec := httptest.NewRecorder()
	s.next.ServeHTTP(rec, r)
	out := rec.Body.Bytes()
	if s.burst && concurrent && rec.Code < 300 {
		out = append(bytes.TrimSuffix(out, []byte("}")), []byte(`,"sabotaged":true}`)...)
	}
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.Header().Del("Content-Length")
	w.WriteHeader(rec.Code)
	_, _ = w.Write(out)
}

// Chaos's checks can fail: in front of a deployment that executes a
// reused key with changed parameters, or answers concurrent duplicates
// differently, the run is not OK and names what broke. Each sabotage alone
// must fail the run, so each counter is shown to be a verdict, not a
// statistic.
func TestChaosFailsWhenAReusedKeyExecutesOrABurstIsAnsweredTwoWays(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	for _, tc := range []struct {
		name    string
		sab     *sabotage
		counter func(*chaos.Report) int
		says    string
	}{
		{"reused key executed", &sabotage{reuse: true}, func(r *chaos.Report) int { return r.Client.ReuseAccepted }, "with changed parameters was executed"},
		{"burst answered two ways", &sabotage{burst: true}, func(r *chaos.Report) int { return r.Client.BurstMismatches }, "concurrent sends of one intent were answered differently"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.sab.next = s.Gateway.Handler()
			srv := httptest.NewServer(tc.sab)
			defer srv.Close()
			var out bytes.Buffer
			rep, err := chaos.Run(t.Context(), chaos.Config{
				URL: srv.URL, DatabaseURL: s.DatabaseURL, TemporalAddress: s.Server.GetFrontendHostPort(), Namespace: s.Server.GetDefaultNamespace(),
				Jobs: 40, NaiveJobs: 1, Agents: 6, Dir: t.TempDir(), AttemptTimeout: 2 * time.Second, Out: &out,
				Faults: map[chaos.Kind]float64{chaos.Burst: 0.5, chaos.Reuse: 0.5},
			})
			t.Log(out.String())
			if err != nil {
				t.Fatal(err)
			}
			if tc.counter(rep) == 0 {
				t.Fatalf("the sabotage was never seen: %s 0", tc.name)
			}
			if rep.OK() {
				t.Fatalf("%s %d, yet the run is OK", tc.name, tc.counter(rep))
			}
			if !strings.Contains(strings.Join(rep.Violations, "\n"), tc.says) {
				t.Errorf("none of the %d violations says %q", len(rep.Violations), tc.says)
			}
			if !strings.Contains(out.String(), "FAILED:") {
				t.Errorf("the report does not say FAILED")
			}
		})
	}
}

// --duration budgets the whole run. A budget that cannot hold a start-up,
// some load and the checks after the reconcile horizon is refused at once:
// a 10 s budget once ran for 1m03s.
func TestADurationThatCannotHoldARunIsRefused(t *testing.T) {
	for _, tc := range []struct {
		cfg chaos.Config
		ok  bool
	}{
		{chaos.Config{Duration: 10 * time.Second, Exe: "idemflow"}, false},
		{chaos.Config{Duration: 90 * time.Second, Exe: "idemflow"}, true},
		{chaos.Config{Duration: 40 * time.Second, ProcessingTimeout: 5 * time.Second, Exe: "idemflow"}, true},
		{chaos.Config{Jobs: 60}, true},
	} {
		if err := tc.cfg.CheckBudget(); (err == nil) != tc.ok {
			t.Errorf("%+v: %v", tc.cfg.Duration, err)
		}
	}
}
