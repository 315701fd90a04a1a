package kube_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemflow/idemflow/internal/cli"
	"github.com/idemflow/idemflow/internal/tooling/kube"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
	"go.temporal.io/server/temporaltest"
)

// TestMain lets the test binary run as an idemflow process of its own
// (IDEMFLOW_TEST_CHILD=1): the rolling-deploy test's pods.
func TestMain(m *testing.M) {
	testenv.Main(m, func(ctx context.Context, args []string, stdout, stderr io.Writer) int {
		return cli.Run(ctx, args, stdout, stderr)
	})
}

// A rolling update of the chart's Deployments, as Kubernetes runs one
// (maxSurge 1, maxUnavailable 0), under load: each old pod is replaced by a
// new one, which must pass its readiness probe first; the old one is taken
// out of the Service's endpoints and sent SIGTERM at once, given the
// manifest's terminationGracePeriodSeconds, then SIGKILLed; it leaves the
// endpoints a second after its SIGTERM, as kube-proxy hears late. The pods are
// real idemflow processes run with the arguments and environment the
// rendered manifests give them (the migrations' hook first), against a real
// PostgreSQL and Temporal. Agents retry with the same key, as idemflow's
// clients do. No intent is lost or duplicated, every request is answered,
// no record is left PROCESSING, and every drain ends within its grace.
func TestARollingDeployLosesNothing(t *testing.T) {
	for _, mode := range []string{"serve", "split"} {
		t.Run(mode, func(t *testing.T) { testRollingDeploy(t, mode) })
	}
}

// endpointLag is how long a terminating pod stays among a Service's
// endpoints after its SIGTERM.
const endpointLag = time.Second

// pod is one running idemflow process of a Deployment.
type pod struct {
	name  string
	child *testenv.Child
	// addr serves the readiness probe (the gateway's, or the worker's
	// metrics); gateway is whether the Service sends it agents' requests.
	addr, ready string
	gateway     bool
}

// service is a Service's endpoints: the ready pods not terminating.
type service struct {
	mu   sync.Mutex
	pods []*pod
	next int
}

func (s *service) add(p *pod) { s.mu.Lock(); s.pods = append(s.pods, p); s.mu.Unlock() }

func (s *service) remove(p *pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, q := range s.pods {
		if q == p {
			s.pods = append(s.pods[:i], s.pods[i+1:]...)
			return
		}
	}
}

// pick is the next endpoint, round robin, as kube-proxy spreads
// connections.
func (s *service) pick() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pods) == 0 {
		return ""
	}
	s.next++
	return "http://" + s.pods[s.next%len(s.pods)].addr
}

func testRollingDeploy(t *testing.T, mode string) {
	tl := tools(t)
	pool, dbURL := testenv.Pool(t)
	ts := temporaltest.NewServer(temporaltest.WithT(t))
	token := "tok-rolling-" + mode + "-0123456789"
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	manifest, err := tl.Render(ctx, chart, "idemflow", kube.Values{Set: map[string]any{
		"mode": mode, "database.url": dbURL, "temporal.address": ts.GetFrontendHostPort(),
		"temporal.namespace": ts.GetDefaultNamespace(), "agents.bootstrapTokens": "acme:" + token,
		"gateway.autoscaling.enabled": false, "worker.autoscaling.enabled": false,
	}})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	objects, err := kube.Decode(manifest)
	if err != nil {
		t.Fatal(err)
	}

	// The hook: the migrations' Job, to its end, before any pod starts.
	job := kube.Lookup(objects, "Job", "idemflow-migrate")
	if job == nil {
		t.Fatal("no migrations Job rendered")
	}
	jc := job.Containers()[0]
	jobEnv, err := jc.Environ(objects)
	if err != nil {
		t.Fatal(err)
	}
	migrate := testenv.StartChild(t, jobEnv, "\x00", jc.Args...)
	select {
	case err := <-migrate.Done:
		if err != nil {
			t.Fatalf("the migrations' Job failed: %v\n%s", err, migrate.Output())
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("the migrations' Job did not end:\n%s", migrate.Output())
	}

	// The Deployments, each at its replicas.
	type deployment struct {
		name      string
		container kube.Container
		env       []string
		replicas  int
		grace     time.Duration
		pods      []*pod
	}
	var deps []*deployment
	for _, o := range objects {
		if o.Kind() != "Deployment" {
			continue
		}
		c := o.Containers()[0]
		env, err := c.Environ(objects)
		if err != nil {
			t.Fatalf("%s: %v", o.Name(), err)
		}
		replicas, _ := o.Get("spec", "replicas").(int)
		grace, _ := o.PodSpec().Get("terminationGracePeriodSeconds").(int)
		if replicas < 2 || grace == 0 {
			t.Fatalf("%s: replicas %d, grace %d", o.Name(), replicas, grace)
		}
		deps = append(deps, &deployment{name: o.Name(), container: c, env: env, replicas: replicas, grace: time.Duration(grace) * time.Second})
	}
	var svc service
	n := 0
	start := func(d *deployment) *pod {
		n++
		port := testenv.FreePort(t)
		addr := "127.0.0.1:" + strconv.Itoa(port)
		probe := d.container.Probe["readiness"]
		p := &pod{name: fmt.Sprintf("%s-%d", d.name, n), addr: addr, ready: probe.Path, gateway: probe.Port == "http"}
		// The pod's own address: what 0.0.0.0 binds in a pod's network.
		own := "IDEMFLOW_METRICS_ADDR=" + addr
		if p.gateway {
			own = "IDEMFLOW_HTTP_ADDR=" + addr
		}
		p.child = testenv.StartChild(t, append(append([]string{}, d.env...), own), "\x00", d.container.Args...)
		return p
	}
	waitReady := func(p *pod) {
		deadline := time.Now().Add(3 * time.Minute)
		for {
			resp, err := http.Get("http://" + p.addr + p.ready)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return
				}
			}
			select {
			case err := <-p.child.Done:
				t.Fatalf("%s exited before it was ready: %v\n%s", p.name, err, p.child.Output())
			case <-time.After(200 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s not ready within 3 minutes:\n%s", p.name, p.child.Output())
			}
		}
	}
	for _, d := range deps {
		for range d.replicas {
			p := start(d)
			d.pods = append(d.pods, p)
		}
		for _, p := range d.pods {
			waitReady(p)
			if p.gateway {
				svc.add(p)
			}
		}
	}

	// Agents: each creates tickets one after another, every one retried
	// under its key until it is answered, whatever the pod it reaches.
	customer := "rolling-" + mode
	type answer struct {
		key, body, ticket string
		tries             int
	}
	var (
		mu         sync.Mutex
		answers    []answer
		unanswered []string
	)
	load, stopLoad := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for a := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; load.Err() == nil; i++ {
				key := fmt.Sprintf("roll-%s-%d-%d", mode, a, i)
				body := fmt.Sprintf(`{"customer_id":%q,"title":"t %d %d"}`, customer, a, i)
				deadline := time.Now().Add(90 * time.Second)
				for tries := 1; ; tries++ {
					base := svc.pick()
					r, err := testenv.Send(base, testenv.Request{Path: "/v1/tickets", Token: token, Key: key, Body: body})
					if err == nil && r.Status == http.StatusCreated {
						var tk struct {
							TicketID string `json:"ticket_id"`
						}
						_ = json.Unmarshal(r.Body, &tk)
						mu.Lock()
						answers = append(answers, answer{key, body, tk.TicketID, tries})
						mu.Unlock()
						break
					}
					// idemflow's answer about the request, not the intent's
					// (no Idempotent-Replayed): 202 running, 409 in progress,
					// 503 draining, 5xx. Every client retries those with the
					// same key (clients/testdata/answers.json).
					about := err == nil && r.Header.Get("Idempotent-Replayed") == "" &&
						(r.Status == http.StatusAccepted || r.Status == http.StatusConflict || r.Status >= 500)
					if err == nil && !about {
						mu.Lock()
						unanswered = append(unanswered, fmt.Sprintf("%s: %d %s", key, r.Status, r.Body))
						mu.Unlock()
						break
					}
					if time.Now().After(deadline) {
						mu.Lock()
						unanswered = append(unanswered, fmt.Sprintf("%s: no answer within 90 s (last: %v %d)", key, err, r.Status))
						mu.Unlock()
						break
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
		}()
	}

	// The rollout, one pod at a time, as maxSurge 1 and maxUnavailable 0
	// make it.
	time.Sleep(time.Second)
	var drains []string
	for _, d := range deps {
		for i, old := range d.pods {
			fresh := start(d)
			waitReady(fresh)
			if fresh.gateway {
				svc.add(fresh)
			}
			// Terminating: SIGTERM, and out of the endpoints a moment
			// later, as kube-proxy hears of it after the kubelet acts: the
			// pod's own drain (503 and failing readiness for its
			// shutdownGrace) answers what still reaches it.
			began := time.Now()
			if err := old.child.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			time.AfterFunc(endpointLag, func() { svc.remove(old) })
			select {
			case err := <-old.child.Done:
				drains = append(drains, fmt.Sprintf("%s %.1fs", old.name, time.Since(began).Seconds()))
				if err != nil {
					t.Errorf("%s exited with %v after SIGTERM:\n%s", old.name, err, old.child.Output())
				}
			case <-time.After(d.grace):
				_ = old.child.Cmd.Process.Kill()
				t.Errorf("%s still ran after its grace of %s: SIGKILLed\n%s", old.name, d.grace, old.child.Output())
			}
			d.pods[i] = fresh
		}
	}
	time.Sleep(time.Second)
	stopLoad()
	wg.Wait()

	// Every answer is the intent's, once: one ticket per key, none more,
	// and the key asked again replays the same ticket.
	if len(unanswered) > 0 {
		t.Errorf("%d requests without their answer: %s", len(unanswered), strings.Join(unanswered, "; "))
	}
	retried := 0
	for _, a := range answers {
		if a.tries > 1 {
			retried++
		}
		r, err := testenv.Send(svc.pick(), testenv.Request{Path: "/v1/tickets", Token: token, Key: a.key, Body: a.body})
		if err != nil || r.Status != http.StatusCreated || r.Header.Get("Idempotent-Replayed") != "true" || !strings.Contains(string(r.Body), a.ticket) {
			t.Errorf("%s asked again: %v %d %s, want the replay of ticket %s", a.key, err, r.Status, r.Body, a.ticket)
		}
	}
	tickets := testenv.Count(t, pool, "ticket", "customer_id = $1", customer)
	processing := testenv.Count(t, pool, "idempotency_record", "status = 'PROCESSING'")
	t.Logf("%s: %d intents answered (%d after a retry), %d tickets, %d PROCESSING; drains %s",
		mode, len(answers), retried, tickets, processing, strings.Join(drains, ", "))
	if len(answers) < 20 {
		t.Errorf("only %d intents under load: the rollout was not tested under load", len(answers))
	}
	if tickets != len(answers) {
		t.Errorf("%d tickets for %d answered intents", tickets, len(answers))
	}
	if processing != 0 {
		t.Errorf("%d records PROCESSING after every request was answered", processing)
	}
}
