// Package demo replays the incident idemflow was built for: an agent creates tickets
// and orders over a network that loses answers after the server acted, and
// retries. With idemflow's client every intent lands once; with a naive
// client that makes a new key per attempt, duplicates pile up.
package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/idemflow/idemflow/agentclient"
	"github.com/idemflow/idemflow/internal/ops/orders"
	"github.com/idemflow/idemflow/internal/ops/tickets"
	"github.com/idemflow/idemflow/internal/pgurl"
	"github.com/idemflow/idemflow/internal/tooling/progress"
)

// Config sizes a demo run.
type Config struct {
	BaseURL     string
	Token       string
	Tenant      string
	DatabaseURL string // to count rows per intent
	UIURL       string // Temporal Web UI, for the closing link
	Namespace   string
	// Intents per client; half tickets, half orders.
	Intents int
	// DropRate and DelayRate are the shares of answers lost, or delayed
	// past AttemptTimeout, after the server processed the request.
	DropRate, DelayRate float64
	AttemptTimeout      time.Duration
	Workers             int
	Seed                uint64
	// StoreDir keeps the client's intents (its keys) on disk.
	StoreDir string
	Out      io.Writer // the report
	Progress io.Writer // the progress bar; nil for none
}

func (c *Config) defaults() {
	if c.Intents == 0 {
		c.Intents = 20
	}
	if c.AttemptTimeout == 0 {
		c.AttemptTimeout = 2 * time.Second
	}
	if c.Workers == 0 {
		c.Workers = 4
	}
	if c.Namespace == "" {
		c.Namespace = "default"
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
	if c.Seed == 0 {
		c.Seed = rand.Uint64()
	}
}

// Report is one client's run.
type Report struct {
	Label     string
	Intents   int
	Succeeded int
	Failed    int
	Attempts  int64
	// Recovered: intents answered on a retry, their first answer lost or
	// late, each with its own answer (not a replay).
	Recovered  int
	Lost       int64
	Late       int64
	Rows       int
	Duplicates int
}

type job struct {
	i      int
	kind   string // "ticket" or "order"
	marker string // customer_id, unique to the intent
	path   string
	body   map[string]any
}

func jobs(prefix string, n int) []job {
	out := make([]job, n)
	for i := range out {
		marker := fmt.Sprintf("%s-%03d", prefix, i)
		if i%2 == 0 {
			out[i] = job{i: i, kind: "ticket", marker: marker, path: tickets.Create.Route,
				body: map[string]any{"customer_id": marker, "title": "Refund not received", "priority": "high"}}
		} else {
			out[i] = job{i: i, kind: "order", marker: marker, path: orders.Create.Route,
				body: map[string]any{"customer_id": marker, "items": []map[string]any{{"sku": "SKU-CABLE", "quantity": 1}}}}
		}
	}
	return out
}

// Run plays the incident with idemflow's client, then with a naive one.
func Run(ctx context.Context, cfg Config) (Report, Report, error) {
	cfg.defaults()
	run := uuid.NewString()[:8]
	started := time.Now().UTC()
	good, err := runClient(ctx, cfg, "idemflow", "demo-"+run, cfg.Seed)
	if err != nil {
		return good, Report{}, err
	}
	naive, err := runNaive(ctx, cfg, "naive-"+run, cfg.Seed+1)
	if err != nil {
		return good, naive, err
	}
	if err := countRows(ctx, cfg, &good, "demo-"+run); err != nil {
		return good, naive, err
	}
	if err := countRows(ctx, cfg, &naive, "naive-"+run); err != nil {
		return good, naive, err
	}
	printReport(cfg, good, naive, started)
	return good, naive, nil
}

func runClient(ctx context.Context, cfg Config, label, prefix string, seed uint64) (Report, error) {
	flaky := newFlaky(http.DefaultTransport, cfg.DropRate, cfg.DelayRate, cfg.AttemptTimeout+500*time.Millisecond, seed)
	rep := Report{Label: label, Intents: cfg.Intents}
	var attempts atomic.Int64
	var retried sync.Map // intent ID: it took more than one attempt
	c := &agentclient.Client{
		BaseURL: cfg.BaseURL, Token: cfg.Token, Tenant: cfg.Tenant,
		Store:          agentclient.FileStore{Dir: filepath.Join(cfg.StoreDir, prefix)},
		HTTP:           &http.Client{Transport: flaky},
		AttemptTimeout: cfg.AttemptTimeout,
		Initial:        50 * time.Millisecond, Max: time.Second,
		OnAttempt: func(a agentclient.Attempt) {
			attempts.Add(1)
			if a.N > 1 {
				retried.Store(a.IntentID, true)
			}
		},
	}
	var mu sync.Mutex
	bar := progress.New(cfg.Progress, label, cfg.Intents)
	each(cfg.Workers, jobs(prefix, cfg.Intents), func(j job) {
		// The key is made and stored once per intent, before any call.
		in, err := c.NewIntent(ctx, j.marker, prefix+"-"+j.kind, http.MethodPost, j.path, j.body)
		var res agentclient.Result
		if err == nil {
			callCtx, cancel := context.WithTimeout(ctx, 90*time.Second)
			res, err = c.Do(callCtx, in)
			cancel()
		}
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			rep.Failed++
		} else {
			rep.Succeeded++
			if _, ok := retried.Load(in.ID); ok && !res.Replayed {
				// Its first answer was lost or late, and a retry under
				// its key got that answer, as the call that ran it.
				rep.Recovered++
			}
		}
		bar.Add(1)
	})
	bar.Finish()
	rep.Attempts, rep.Lost, rep.Late = attempts.Load(), flaky.lost.Load(), flaky.late.Load()
	return rep, ctx.Err()
}

// runNaive is the bug behind that incident: the retry loop makes a new key
// (a new request ID) for every attempt, so the server sees new intents.
func runNaive(ctx context.Context, cfg Config, prefix string, seed uint64) (Report, error) {
	flaky := newFlaky(http.DefaultTransport, cfg.DropRate, cfg.DelayRate, cfg.AttemptTimeout+500*time.Millisecond, seed)
	httpc := &http.Client{Transport: flaky, Timeout: cfg.AttemptTimeout}
	rep := Report{Label: "naive", Intents: cfg.Intents}
	var mu sync.Mutex
	bar := progress.New(cfg.Progress, "naive", cfg.Intents)
	each(cfg.Workers, jobs(prefix, cfg.Intents), func(j job) {
		body, _ := json.Marshal(j.body)
		ok := false
		for attempt := 0; attempt < 8 && !ok && ctx.Err() == nil; attempt++ {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, cfg.BaseURL+j.path, strings.NewReader(string(body)))
			req.Header.Set("Authorization", "Bearer "+cfg.Token)
			req.Header.Set("Idempotency-Key", uuid.NewString()) // the bug
			resp, err := httpc.Do(req)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				ok = resp.StatusCode < 300
			}
			time.Sleep(50 * time.Millisecond)
		}
		mu.Lock()
		defer mu.Unlock()
		if ok {
			rep.Succeeded++
		} else {
			rep.Failed++
		}
		bar.Add(1)
	})
	bar.Finish()
	rep.Attempts, rep.Lost, rep.Late = flaky.requests.Load(), flaky.lost.Load(), flaky.late.Load()
	return rep, ctx.Err()
}

func each(workers int, js []job, f func(job)) {
	ch := make(chan job)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range ch {
				f(j)
			}
		}()
	}
	for _, j := range js {
		ch <- j
	}
	close(ch)
	wg.Wait()
}

// countRows counts the tickets and orders each intent produced: more than
// one is a duplicate side effect.
func countRows(ctx context.Context, cfg Config, rep *Report, prefix string) error {
	conn, err := pgurl.Connect(ctx, cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("demo: count rows: %w", err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `
		SELECT customer_id, count(*) FROM (
			SELECT customer_id FROM `+tickets.Create.Table+` WHERE customer_id LIKE $1
			UNION ALL
			SELECT customer_id FROM `+orders.Create.Table+` WHERE customer_id LIKE $1) r
		GROUP BY customer_id`, prefix+"-%")
	if err != nil {
		return fmt.Errorf("demo: count rows: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var marker string
		var n int
		if err := rows.Scan(&marker, &n); err != nil {
			return err
		}
		rep.Rows += n
		rep.Duplicates += n - 1
	}
	return rows.Err()
}

func printReport(cfg Config, good, naive Report, started time.Time) {
	w := cfg.Out
	fmt.Fprintf(w, "\nThe incident, replayed: %d intents per client; %.0f%% of answers lost and %.0f%% late after the server acted.\n\n",
		cfg.Intents, cfg.DropRate*100, cfg.DelayRate*100)
	fmt.Fprintf(w, "  %-26s %22s %26s\n", "", "idemflow client", "naive client")
	fmt.Fprintf(w, "  %-26s %22s %26s\n", "", "(one key per intent)", "(new key per attempt)")
	line := func(name string, a, b any) { fmt.Fprintf(w, "  %-26s %22v %26v\n", name, a, b) }
	line("intents", good.Intents, naive.Intents)
	line("HTTP attempts", good.Attempts, naive.Attempts)
	line("answers lost / late", fmt.Sprintf("%d / %d", good.Lost, good.Late), fmt.Sprintf("%d / %d", naive.Lost, naive.Late))
	line("succeeded / gave up", fmt.Sprintf("%d / %d", good.Succeeded, good.Failed), fmt.Sprintf("%d / %d", naive.Succeeded, naive.Failed))
	line("answers got on a retry", good.Recovered, "-")
	line("rows in the database", good.Rows, naive.Rows)
	line("DUPLICATES", good.Duplicates, naive.Duplicates)
	if cfg.UIURL != "" {
		q := url.Values{"query": {fmt.Sprintf("StartTime >= %q", started.Format(time.RFC3339))}}
		fmt.Fprintf(w, "\nThe workflows of this run in the Temporal Web UI:\n  %s/namespaces/%s/workflows?%s\n", cfg.UIURL, cfg.Namespace, q.Encode())
	}
}
