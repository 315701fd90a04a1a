package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/idemflow/idemflow/agentclient"
	"github.com/idemflow/idemflow/internal/ops/orders"
	"github.com/idemflow/idemflow/internal/ops/tickets"
	"github.com/jackc/pgx/v5/pgxpool"
)

// outcome is how an intent ended for its agent.
type outcome int

const (
	done      outcome = iota // a 2xx answer
	rejected                 // a final 4xx: a business refusal
	abandoned                // sent once, never retried
	gaveUp                   // retried until its deadline without an answer
)

// sent is one intent as its agent saw it, for the checks.
type sent struct {
	table   string // ticket, purchase_order or order_event
	key     string
	method  string
	path    string
	body    []byte
	status  int
	answer  []byte
	outcome outcome
	// at is when the agent had its answer: a failover after it must not
	// lose what it was told.
	at time.Time
}

// lbTransport spreads requests over the gateways' proxies, one connection
// per request, as a load balancer would; a dropped reply is then exactly
// one lost answer.
type lbTransport struct {
	r    *run
	base *http.Transport
}

func (t *lbTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	p := t.r.gatewayProxies[t.r.intN(len(t.r.gatewayProxies))]
	req = req.Clone(req.Context())
	req.URL.Host = p.Addr
	req.Host = p.Addr
	return t.base.RoundTrip(req)
}

func newTransport() *http.Transport {
	return &http.Transport{DisableKeepAlives: true, DialContext: (&net.Dialer{Timeout: 2 * time.Second}).DialContext}
}

// job is one agent task: a ticket, or an order and what follows it.
type job struct {
	n       int
	ticket  bool
	tool    string // an HTTP tool's refund, instead of a ticket or an order
	coupon  string
	then    []orders.Action // order actions after create
	burst   int             // concurrent sends of the first intent (0: one)
	reuse   bool            // send the first intent's key again with changed parameters
	abandon bool            // send the first intent once and walk away
}

func (r *run) newJob(n int) job {
	f := r.cfg.Faults
	j := job{n: n, ticket: r.float() < 0.4}
	if x := r.float(); r.downstream != nil && x < 0.25 {
		j.ticket, j.tool = false, toolKeyed
		if x < 0.125 {
			j.tool = toolLookup
		}
	}
	if !j.ticket && j.tool == "" {
		switch x := r.float(); {
		case x < 0.2:
			j.then = []orders.Action{orders.ActionCancel}
		case x < 0.5:
			j.then = []orders.Action{orders.ActionPay, orders.ActionFulfill}
		case x < 0.75:
			j.then = []orders.Action{orders.ActionPay, orders.ActionRefund}
		default:
			j.then = []orders.Action{orders.ActionPay}
		}
		switch x := r.float(); {
		case x < 0.15:
			j.coupon = "FIVEOFF"
		case x < 0.18:
			j.coupon = "LAST1"
		}
	}
	switch x := r.float(); {
	case x < f[Abandon]:
		j.abandon = true
	case x < f[Abandon]+f[Burst]:
		j.burst = 2 + r.intN(19)
	}
	j.reuse = !j.abandon && r.float() < f[Reuse]
	return j
}

// firstRequest is the job's first intent: its table, path and body.
func (r *run) firstRequest(j job, marker string) (table, path string, body map[string]any) {
	if j.tool != "" {
		return "tool_call", "/v1/tools/" + j.tool, map[string]any{"payment_id": marker, "amount_cents": 100 + j.n%900}
	}
	if j.ticket {
		return tickets.Create.Table, tickets.Create.Route, map[string]any{"customer_id": "cust-" + fmt.Sprint(j.n%50), "title": "chaos " + marker, "priority": "normal"}
	}
	items := []map[string]any{{"sku": skus[j.n%len(skus)], "quantity": 1 + j.n%3}}
	if j.n%4 == 0 {
		items = append(items, map[string]any{"sku": skus[(j.n+1)%len(skus)], "quantity": 1})
	}
	body = map[string]any{"customer_id": marker, "items": items}
	if j.coupon != "" {
		body["coupon_code"] = j.coupon
	}
	return orders.Create.Table, orders.Create.Route, body
}

// clientStats are what one client's agents counted.
type clientStats struct {
	mu                                  sync.Mutex
	Jobs, Intents, Attempts, Replays    int
	Conflicts, Rejected, Abandoned      int
	GaveUp, BurstMismatch, ReuseAccepts int
	sent                                []sent
	// violations the agents saw as they went (a reused key executed, a
	// burst answered two ways); the report fails on each.
	violations []string
}

func (s *clientStats) add(f func(s *clientStats)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

// runAgents runs jobs (0: any number) until until (zero: no limit) with
// cfg.Agents agents of one client.
func (r *run) runAgents(ctx context.Context, st *clientStats, naive bool, jobs int, until time.Time, bar *bar) {
	which := 0
	if naive {
		which = 1
	}
	next := make(chan job)
	go func() {
		defer close(next)
		for n := 0; (jobs == 0 || n < jobs) && (until.IsZero() || time.Now().Before(until)); n++ {
			select {
			case next <- r.newJob(n):
			case <-ctx.Done():
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for a := range r.cfg.Agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ag := &agent{r: r, st: st, tenant: r.tenants[which], token: r.tokens[which], http: &http.Client{Transport: &lbTransport{r: r, base: newTransport()}}}
			ag.c = &agentclient.Client{BaseURL: "http://gateway", Token: ag.token, Tenant: ag.tenant, HTTP: ag.http,
				Store:          agentclient.FileStore{Dir: filepath.Join(r.dir, "agents", ag.tenant, fmt.Sprint(a))},
				AttemptTimeout: r.cfg.AttemptTimeout, Initial: 100 * time.Millisecond, Max: 2 * time.Second, Wait: 2 * time.Second,
				OnAttempt: func(agentclient.Attempt) { st.add(func(s *clientStats) { s.Attempts++ }) }}
			for j := range next {
				if naive {
					ag.naiveJob(ctx, j)
				} else {
					ag.job(ctx, j)
				}
				st.add(func(s *clientStats) { s.Jobs++ })
				r.jobsDone.Add(1)
				bar.step()
			}
		}()
	}
	wg.Wait()
}

type agent struct {
	r             *run
	st            *clientStats
	c             *agentclient.Client
	http          *http.Client
	tenant, token string
}

// intentDeadline bounds one intent's retries: long enough to outlive any
// outage the run makes.
const intentDeadline = 3 * time.Minute

func (a *agent) job(ctx context.Context, j job) {
	marker := fmt.Sprintf("%s-%d", a.tenant, j.n)
	table, path, body := a.r.firstRequest(j, marker)
	s, ok := a.do(ctx, marker+"/create", table, path, body, j)
	if !ok || table != orders.Create.Table || s.status != http.StatusCreated {
		return
	}
	var order struct {
		OrderNo string `json:"order_no"`
	}
	if json.Unmarshal(s.answer, &order) != nil || order.OrderNo == "" {
		return
	}
	for _, action := range j.then {
		b := map[string]any{}
		switch action {
		case orders.ActionPay:
			b["payment_ref"] = "pay-" + marker
		case orders.ActionCancel, orders.ActionRefund:
			b["reason"] = "chaos"
		}
		if _, ok := a.do(ctx, marker+"/"+string(action), orders.Pay.Table, orders.Create.Route+"/"+order.OrderNo+"/"+string(action), b, job{}); !ok {
			return
		}
	}
}

// do runs one intent with the idemflow client and records it; ok is false
// when the job cannot go on.
func (a *agent) do(ctx context.Context, id, table, path string, body map[string]any, j job) (sent, bool) {
	in, err := a.c.NewIntent(ctx, id, table, http.MethodPost, path, body)
	if err != nil {
		a.r.log.Error("chaos: new intent", "error", err)
		return sent{}, false
	}
	s := sent{table: table, key: in.Key, method: in.Method, path: in.Path, body: in.Body}
	a.st.add(func(st *clientStats) { st.Intents++ })
	if j.abandon {
		a.r.count(Abandon, 1)
		// The agent dies a few milliseconds after sending: before the
		// gateway claims the key, between the claim and the start (only
		// reconcile can settle that one), or after the start.
		ictx, cancel := context.WithTimeout(ctx, time.Millisecond*time.Duration(1+a.r.intN(40)))
		defer cancel()
		st, b, err := a.send(ictx, in.Method, in.Path, in.Key, in.Body)
		s.outcome = abandoned
		if err == nil && st < 300 && st != http.StatusAccepted {
			s.status, s.answer, s.outcome, s.at = st, b, done, time.Now()
		}
		a.st.add(func(st *clientStats) { st.Abandoned++; st.sent = append(st.sent, s) })
		return s, false
	}
	n := 1
	if j.burst > 0 {
		n = j.burst
		a.r.count(Burst, 1)
	}
	results := make([]agentclient.Result, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// An agent that restarts resumes the intent by its ID: the
			// stored key is sent again.
			for range 3 {
				ictx, cancel := context.WithTimeout(ctx, intentDeadline)
				results[i], errs[i] = a.c.Do(ictx, in)
				cancel()
				if errs[i] == nil || !errors.Is(errs[i], context.DeadlineExceeded) || ctx.Err() != nil {
					return
				}
				if again, err := a.c.NewIntent(ctx, id, table, http.MethodPost, path, body); err == nil {
					in = again
				}
			}
		}()
	}
	wg.Wait()
	res, err := results[0], errs[0]
	for i := 1; i < n; i++ {
		if errs[i] == nil && err == nil && (results[i].Status != res.Status || !bytes.Equal(results[i].Body, res.Body)) {
			a.st.add(func(st *clientStats) {
				st.BurstMismatch++
				st.violations = append(st.violations, fmt.Sprintf("%s %s: %d concurrent sends of one intent were answered differently: %d %q and %d %q",
					table, in.Key, n, res.Status, res.Body, results[i].Status, results[i].Body))
			})
		}
	}
	var pe *agentclient.ProblemError
	var re *agentclient.RejectedError
	switch {
	case err == nil:
		s.status, s.answer, s.outcome, s.at = res.Status, res.Body, done, time.Now()
	case errors.As(err, &re):
		s.status, s.answer, s.outcome = re.Status, re.Body, rejected
	case errors.As(err, &pe):
		s.status, s.answer, s.outcome = pe.Status, pe.Body, rejected
	default:
		s.outcome = gaveUp
	}
	for i := range n {
		if errs[i] == nil && results[i].Replayed {
			a.st.add(func(st *clientStats) { st.Replays++ })
		}
	}
	a.st.add(func(st *clientStats) {
		st.sent = append(st.sent, s)
		if s.outcome == rejected {
			st.Rejected++
		}
		if s.outcome == gaveUp {
			st.GaveUp++
		}
	})
	if s.outcome == done && j.reuse {
		a.reuse(ctx, in, table, body)
	}
	return s, s.outcome == done
}

// reuse sends a finished intent's key with changed parameters: it must
// be refused as a conflict, never executed.
func (a *agent) reuse(ctx context.Context, in agentclient.Intent, table string, body map[string]any) {
	a.r.count(Reuse, 1)
	changed := map[string]any{}
	for k, v := range body {
		changed[k] = v
	}
	switch table {
	case tickets.Create.Table:
		changed["title"] = fmt.Sprint(body["title"]) + " (changed)"
	case "tool_call":
		changed["amount_cents"] = body["amount_cents"].(int) + 1
	default:
		changed["customer_id"] = fmt.Sprint(body["customer_id"]) + "-changed"
	}
	raw, _ := json.Marshal(changed)
	for range 20 {
		actx, cancel := context.WithTimeout(ctx, a.r.cfg.AttemptTimeout)
		st, answer, err := a.send(actx, in.Method, in.Path, in.Key, raw)
		cancel()
		switch {
		case err != nil || st >= 500 || st == http.StatusConflict || st == http.StatusTooManyRequests:
			time.Sleep(200 * time.Millisecond)
			continue
		case st == http.StatusUnprocessableEntity:
			a.st.add(func(s *clientStats) { s.Conflicts++ })
		case st < 300:
			a.st.add(func(s *clientStats) {
				s.ReuseAccepts++
				s.violations = append(s.violations, fmt.Sprintf("%s %s: the key sent again with changed parameters was executed: %d %q",
					table, in.Key, st, answer))
			})
		}
		return
	}
}

func (a *agent) send(ctx context.Context, method, path, key string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://gateway"+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := a.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// naiveJob is the bug the product exists for: every retry makes a new key,
// so a lost answer becomes a second ticket or order.
func (a *agent) naiveJob(ctx context.Context, j job) {
	marker := fmt.Sprintf("%s-%d", a.tenant, j.n)
	_, path, body := a.r.firstRequest(j, marker)
	raw, _ := json.Marshal(body)
	a.st.add(func(st *clientStats) { st.Intents++ })
	// It retries as a plain agent would, a few times with backoff: with
	// no bound, every attempt a slow stack times out adds another intent,
	// and the control's own retries would swamp the stack under test.
	pause := 200 * time.Millisecond
	for range naiveAttempts {
		if ctx.Err() != nil {
			return
		}
		actx, cancel := context.WithTimeout(ctx, a.r.cfg.AttemptTimeout)
		st, _, err := a.send(actx, http.MethodPost, path, "naive-"+uuid.NewString(), raw)
		cancel()
		a.st.add(func(s *clientStats) { s.Attempts++ })
		if err == nil && st < 500 && st != http.StatusTooManyRequests {
			return
		}
		time.Sleep(pause)
		pause *= 2
	}
}

// naiveAttempts bounds the naive control's attempts per task.
const naiveAttempts = 5

// replay sends an intent again straight to a gateway (no faults).
func (r *run) replay(ctx context.Context, token string, s sent) (int, []byte, bool, error) {
	u := r.directURLs[r.intN(len(r.directURLs))] + s.path
	// An intent still running after this long is not replaying its first
	// answer: its last answer (a 202, a 409) is what the check compares,
	// and the run goes on to the next (a failover that lost an intent's
	// run can leave it running for good).
	giveUp := time.Now().Add(replayPatience)
	for {
		req, err := http.NewRequestWithContext(ctx, s.method, u, bytes.NewReader(s.body))
		if err != nil {
			return 0, nil, false, err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", s.key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, nil, false, err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return 0, nil, false, err
		}
		if resp.StatusCode == http.StatusAccepted || (resp.StatusCode == http.StatusConflict && strings.Contains(string(b), "request-in-progress")) {
			if time.Now().After(giveUp) {
				return resp.StatusCode, b, false, nil
			}
			select {
			case <-ctx.Done():
				return 0, nil, false, ctx.Err()
			case <-time.After(500 * time.Millisecond):
			}
			continue
		}
		return resp.StatusCode, b, resp.Header.Get("Idempotent-Replayed") == "true", nil
	}
}

// replayPatience bounds how long a final replay waits for a running
// intent to finish.
const replayPatience = 30 * time.Second

func waitReady(ctx context.Context, u string) error {
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// openAdmin connects the checker; its backends are named so that
// pg-terminate spares them.
func openAdmin(ctx context.Context, dbURL string) (*pgxpool.Pool, error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return nil, err
	}
	q := u.Query()
	q.Set("application_name", "chaos-checker")
	u.RawQuery = q.Encode()
	return pgxpool.New(ctx, u.String())
}
