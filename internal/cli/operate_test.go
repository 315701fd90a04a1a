//go:build !nodev

package cli_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemflow/idemflow/internal/cli"
	"github.com/idemflow/idemflow/internal/ops/orders"
	"github.com/idemflow/idemflow/internal/tooling/docs"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
	"go.temporal.io/server/temporaltest"
	"gopkg.in/yaml.v3"
)

// scrape reads a /metrics page into "name{labels}" -> value lines.
func scrape(t *testing.T, base string) string {
	t.Helper()
	r, err := testenv.Send(base, testenv.Request{Method: "GET", Path: "/metrics"})
	if err != nil || r.Status != 200 {
		t.Fatalf("scrape %s: %v %d", base, err, r.Status)
	}
	return string(r.Body)
}

// scrapeAfterRuns scrapes base once the workflows of the intents it has
// answered have completed: an answer comes when the record settles, the
// run's own metrics (temporal_workflow_endtoend_latency_seconds) a moment
// later. It waits up to 10 s.
func scrapeAfterRuns(t *testing.T, base string) string {
	t.Helper()
	page := scrape(t, base)
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(page, "temporal_workflow_endtoend_latency_seconds") && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
		page = scrape(t, base)
	}
	return page
}

// A serve process exports its gateway's counters and latency, its worker's
// and the Temporal SDK's metrics on one /metrics; the counters move with
// the requests; and every metric the shipped alert rules and dashboard
// name is among them.
func TestMetricsMoveWithRequestsAndCoverTheDeployRulesAndDashboard(t *testing.T) {
	_, dbURL := testenv.Pool(t)
	ts := temporaltest.NewServer(temporaltest.WithT(t))
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	srv := startChild(t, dbURL, "gateway listening", "serve", "--temporal-address", ts.GetFrontendHostPort(),
		"--namespace", ts.GetDefaultNamespace(), "--http-addr", addr, "--bootstrap-tokens", "acme:tok-metrics-test-0123456789")
	srv.WaitUp(t, time.Minute)
	base := "http://" + addr
	before := scrape(t, base)
	if strings.Contains(before, `outcome="executed"`) {
		t.Fatalf("counters before any request:\n%s", before)
	}
	// A rejection's series is there, at 0, before any rejection: an alert
	// on its rate has a series from the start.
	if !strings.Contains(before, `idemflow_business_rejections_total{biz_type="order.create",code="out-of-stock"} 0`) {
		t.Errorf("business rejections are not exported at 0 before the first one")
	}
	tok := "tok-metrics-test-0123456789"
	req := testenv.Request{Path: "/v1/tickets", Token: tok, Key: "m-1", Body: `{"customer_id":"c","title":"t"}`}
	testenv.Do(t, base, req)
	testenv.Do(t, base, req)
	req.Body = `{"customer_id":"c","title":"other"}`
	testenv.Do(t, base, req)
	if r := testenv.Do(t, base, testenv.Request{Path: "/v1/orders", Token: tok, Key: "m-2",
		Body: `{"customer_id":"c","items":[{"sku":"SKU-NOPE","quantity":1}]}`}); r.Status != 422 {
		t.Fatalf("unknown sku: %d %s", r.Status, r.Body)
	}
	after := scrapeAfterRuns(t, base)
	checkMetricsTable(t, "serve", after)
	for _, want := range []string{
		`idemflow_intents_total{biz_type="ticket.create",outcome="executed"} 1`,
		`idemflow_intents_total{biz_type="ticket.create",outcome="replayed"} 1`,
		`idemflow_intents_total{biz_type="ticket.create",outcome="key_reused"} 1`,
		`idemflow_http_request_duration_seconds_count{code="201",method="POST",route="POST /v1/tickets"} 2`,
		`idemflow_http_request_duration_seconds_count{code="422",method="POST",route="POST /v1/tickets"} 1`,
		`idemflow_business_rejections_total{biz_type="order.create",code="unknown-sku"} 1`,
		`idemflow_intent_execution_seconds_count{biz_type="ticket.create",result="done"} 1`,
		`idemflow_processing_records 0`,
		`idemflow_reconcile_intents_total{verdict="error"} 0`,
		`temporal_workflow_completed`,
	} {
		if !strings.Contains(after, want) {
			t.Errorf("missing %s", want)
		}
	}
	if t.Failed() {
		t.Fatalf("scrape:\n%s", after)
	}

	// Every metric the deploy files name is exported.
	have := map[string]bool{}
	for _, line := range strings.Split(after, "\n") {
		if name, _, ok := strings.Cut(strings.SplitN(line, " ", 2)[0], "{"); ok || line != "" {
			have[name] = true
		}
	}
	named := regexp.MustCompile(`\b(?:idemflow|temporal)_[a-z_]+`)
	var checked []string
	for _, f := range []string{"../../deploy/prometheus/alerts.yml", "../../deploy/grafana/idemflow.json"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		// Each loads as what Prometheus and Grafana read.
		var v any
		if strings.HasSuffix(f, ".json") {
			err = json.Unmarshal(b, &v)
		} else {
			var rules struct {
				Groups []struct {
					Rules []struct{ Alert, Expr string }
				}
			}
			err = yaml.Unmarshal(b, &rules)
			if err == nil && (len(rules.Groups) == 0 || len(rules.Groups[0].Rules) < 4) {
				err = fmt.Errorf("expected the alert rules, got %+v", rules)
			}
		}
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, m := range named.FindAllString(string(b), -1) {
			if !have[m] && !have[m+"_total"] {
				t.Errorf("%s names %s, which no process exports", filepath.Base(f), m)
			}
			checked = append(checked, m)
		}
	}
	sort.Strings(checked)
	t.Logf("deploy files name %d metrics, all exported: %v", len(checked), checked)
}

// SIGTERM under load: the gateway answers new requests 503 + Retry-After
// while it drains, finishes what it holds, and the process exits 0; agents
// retrying with their keys against a restarted process lose nothing. Each
// intent is checked on its own: it ends answered 201 within a bound (a
// stuck one fails here, not at the global timeout), at most one of its
// answers is a first execution (a lost intent executed again shows as a
// second), all its 201 answers are the same bytes, and its key has exactly
// one ticket, the one it was answered with.
func TestSIGTERMDrainsUnderLoadAndLosesNothing(t *testing.T) {
	pool, dbURL := testenv.Pool(t)
	ts := temporaltest.NewServer(temporaltest.WithT(t))
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	tok := "tok-drain-test-0123456789"
	args := []string{"serve", "--temporal-address", ts.GetFrontendHostPort(), "--namespace", ts.GetDefaultNamespace(),
		"--http-addr", addr, "--bootstrap-tokens", "acme:" + tok, "--shutdown-grace", "1s"}
	srv := startChild(t, dbURL, "gateway listening", args...)
	srv.WaitUp(t, time.Minute)
	base := "http://" + addr

	const agents, each = 8, 25
	type answer struct {
		status   int
		body     string
		replayed bool
	}
	var mu sync.Mutex
	statuses := map[int]int{}
	answers := map[string][]answer{}
	var retryAfter int
	var wg sync.WaitGroup
	restarted := make(chan struct{})
	deadline := time.Now().Add(3 * time.Minute)
	for a := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				key := fmt.Sprintf("drain-%d-%d", a, i)
				req := testenv.Request{Path: "/v1/tickets", Token: tok, Key: key,
					Body: fmt.Sprintf(`{"customer_id":"c-%d","title":"drain %d-%d"}`, a, a, i)}
				for time.Now().Before(deadline) {
					r, err := testenv.Send(base, req)
					mu.Lock()
					if err == nil {
						statuses[r.Status]++
						if r.Status == 503 && r.Header.Get("Retry-After") != "" {
							retryAfter++
						}
						answers[key] = append(answers[key], answer{r.Status, string(r.Body), r.Header.Get("Idempotent-Replayed") == "true"})
					}
					mu.Unlock()
					if err == nil && r.Status == 201 {
						break
					}
					if err != nil {
						select {
						case <-restarted: // the listener is gone: wait for the new process
						case <-time.After(time.Until(deadline)):
						}
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
		}()
	}
	time.Sleep(700 * time.Millisecond)
	if err := srv.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-srv.Done:
		if err != nil {
			t.Fatalf("serve did not exit cleanly on SIGTERM: %v\n%s", err, srv.Output())
		}
	case <-time.After(90 * time.Second):
		t.Fatal("serve did not stop on SIGTERM")
	}
	again := startChild(t, dbURL, "gateway listening", args...)
	again.WaitUp(t, time.Minute)
	close(restarted)
	wg.Wait()

	rows, err := pool.Query(t.Context(), `SELECT idem_key, id::text FROM ticket WHERE tenant_id = 'acme' AND idem_key LIKE 'drain-%'`)
	if err != nil {
		t.Fatal(err)
	}
	ticketsOf := map[string][]string{}
	for rows.Next() {
		var key, id string
		if err := rows.Scan(&key, &id); err != nil {
			t.Fatal(err)
		}
		ticketsOf[key] = append(ticketsOf[key], id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var processing int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM idempotency_record WHERE tenant_id = 'acme' AND status = 'PROCESSING'`).Scan(&processing); err != nil {
		t.Fatal(err)
	}
	t.Logf("answers by status: %v; 503 with Retry-After: %d", statuses, retryAfter)
	for a := range agents {
		for i := range each {
			key := fmt.Sprintf("drain-%d-%d", a, i)
			var created []answer
			executed, accepted := 0, false
			for _, x := range answers[key] {
				// A 202 or 409 (in progress) means an earlier attempt was
				// accepted: the 201 that ends the intent must replay it.
				if x.status == 201 && !x.replayed && accepted {
					t.Errorf("%s: accepted, then executed again as new: %v", key, answers[key])
				}
				accepted = accepted || x.status == 202 || x.status == 409
				if x.status == 201 {
					created = append(created, x)
					if !x.replayed {
						executed++
					}
				}
			}
			switch {
			case len(created) == 0:
				t.Errorf("%s: never answered 201 (stuck or lost): %v", key, answers[key])
			case executed > 1:
				t.Errorf("%s: executed %d times (answered 201 not replayed)", key, executed)
			case len(ticketsOf[key]) != 1:
				t.Errorf("%s: %d tickets", key, len(ticketsOf[key]))
			case !strings.Contains(created[0].body, ticketsOf[key][0]):
				t.Errorf("%s: answered %s, its ticket is %s", key, created[0].body, ticketsOf[key][0])
			}
			for _, x := range created[min(1, len(created)):] {
				if x.body != created[0].body {
					t.Errorf("%s: answered %q, then %q", key, created[0].body, x.body)
				}
			}
		}
	}
	if processing != 0 {
		t.Errorf("%d records PROCESSING", processing)
	}
	if retryAfter == 0 {
		t.Fatalf("no request was answered 503 + Retry-After while draining: %v", statuses)
	}
	if !strings.Contains(srv.Output(), "gateway draining") {
		t.Fatalf("no drain logged:\n%s", srv.Output())
	}
}

// 'idemflow inspect' answers "what happened to acme's key X?" from both
// stores: the record, the business row, the order's events, the workflow
// with its history one line per step, and a Web UI link.
func TestInspectShowsRecordRowEventsWorkflowAndLink(t *testing.T) {
	pool, dbURL := testenv.Pool(t)
	ts := temporaltest.NewServer(temporaltest.WithT(t))
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	tok := "tok-inspect-test-0123456789"
	srv := startChild(t, dbURL, "gateway listening", "serve", "--temporal-address", ts.GetFrontendHostPort(),
		"--namespace", ts.GetDefaultNamespace(), "--http-addr", addr, "--bootstrap-tokens", "acme:"+tok)
	srv.WaitUp(t, time.Minute)
	if r := testenv.Do(t, "http://"+addr, testenv.Request{Path: "/v1/tickets", Token: tok, Key: "look-1",
		Body: `{"customer_id":"c-9","title":"Where is it"}`}); r.Status != 201 {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	run := func(args ...string) string {
		var out, errOut strings.Builder
		base := []string{"inspect", "--database-url", dbURL, "--temporal-address", ts.GetFrontendHostPort(),
			"--namespace", ts.GetDefaultNamespace(), "--ui-url", "http://127.0.0.1:8233"}
		if code := cli.Run(t.Context(), append(base, args...), &out, &errOut); code != 0 {
			t.Fatalf("inspect %v: exit %d: %s", args, code, errOut.String())
		}
		return out.String()
	}
	var got struct {
		Record struct {
			Status string          `json:"status"`
			Body   json.RawMessage `json:"response_body"`
		} `json:"record"`
		Row      *struct{ WorkflowID string } `json:"business_row"`
		Workflow struct {
			Status  string   `json:"status"`
			Summary string   `json:"summary"`
			History []string `json:"history"`
		} `json:"workflow"`
		UILink string `json:"ui_link"`
	}
	out := run("--json", "acme", "look-1")
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got.Record.Status != "SUCCESS" || !strings.Contains(string(got.Record.Body), "Where is it") || got.Row == nil ||
		got.Workflow.Status != "Completed" || !strings.Contains(got.Workflow.Summary, "c-9") ||
		!strings.Contains(strings.Join(got.Workflow.History, "\n"), "run ticket.create for acme, key look-1") ||
		!strings.HasSuffix(got.UILink, "/workflows/ticket%2Facme%2Flook-1") {
		t.Fatalf("inspect --json:\n%s", out)
	}
	if text := run("acme", "look-1"); !strings.Contains(text, "record      SUCCESS") || !strings.Contains(text, "web ui      http://127.0.0.1:8233/") {
		t.Fatalf("inspect:\n%s", text)
	}
	// A key nobody sent has its own exit code, with the text still printed.
	var out4, err4 strings.Builder
	code := cli.Run(t.Context(), []string{"inspect", "--database-url", dbURL, "--temporal-address", ts.GetFrontendHostPort(),
		"--namespace", ts.GetDefaultNamespace(), "acme", "never-sent"}, &out4, &err4)
	if text := out4.String(); code != cli.ExitNotFound || !strings.Contains(text, "no idempotency record") || !strings.Contains(text, "no business row") {
		t.Fatalf("inspect of an unknown key: exit %d, want %d\n%s%s", code, cli.ExitNotFound, text, err4.String())
	}
	// Flags may follow the positionals, as the README writes them; a key
	// too long for a readable workflow ID is inspected by the key itself.
	long := strings.Repeat("k", 255)
	if r := testenv.Do(t, "http://"+addr, testenv.Request{Path: "/v1/tickets", Token: tok, Key: long,
		Body: `{"customer_id":"c-9","title":"A long key"}`}); r.Status != 201 {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	var wf struct {
		Workflow struct {
			ID     string `json:"workflow_id"`
			Status string `json:"status"`
		} `json:"workflow"`
	}
	var outL, errL strings.Builder
	if code := cli.Run(t.Context(), []string{"inspect", "acme", long, "--database-url", dbURL, "--temporal-address", ts.GetFrontendHostPort(),
		"--namespace", ts.GetDefaultNamespace(), "--json"}, &outL, &errL); code != 0 {
		t.Fatalf("inspect with flags after the key: exit %d: %s", code, errL.String())
	}
	if err := json.Unmarshal([]byte(outL.String()), &wf); err != nil || !strings.HasPrefix(wf.Workflow.ID, "ticket/acme/sha256,") || wf.Workflow.Status != "Completed" {
		t.Fatalf("inspect of a 255-character key: %v\n%s", err, outL.String())
	}
	// An order's keys show its events: the declaration's view
	// (op.Spec.Inspect), which inspect runs for the key's business type.
	if err := orders.SeedDemoCatalog(t.Context(), pool, "acme"); err != nil {
		t.Fatal(err)
	}
	created := testenv.Do(t, "http://"+addr, testenv.Request{Path: "/v1/orders", Token: tok, Key: "look-o",
		Body: `{"customer_id":"c-9","items":[{"sku":"SKU-MOUSE","quantity":1}]}`})
	var order struct {
		OrderNo string `json:"order_no"`
	}
	if err := json.Unmarshal(created.Body, &order); err != nil || created.Status != 201 {
		t.Fatalf("%d %s", created.Status, created.Body)
	}
	if r := testenv.Do(t, "http://"+addr, testenv.Request{Path: "/v1/orders/" + order.OrderNo + "/pay", Token: tok, Key: "look-p",
		Body: `{"payment_ref":"psp-1"}`}); r.Status != 200 {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	for key, want := range map[string][]string{"look-o": {"INIT -> CREATED", "CREATED -> PAID"}, "look-p": {"CREATED -> PAID"}} {
		var got struct {
			Details []string `json:"details"`
		}
		out := run("--json", "acme", key)
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatal(err)
		}
		for _, w := range want {
			if !strings.Contains(strings.Join(got.Details, "\n"), order.OrderNo+" "+w) {
				t.Errorf("inspect of %s: details %q, want the event %s %s", key, got.Details, order.OrderNo, w)
			}
		}
		if text := run("acme", key); !strings.Contains(text, "detail      event "+order.OrderNo) {
			t.Errorf("inspect of %s:\n%s", key, text)
		}
	}
}

// checkMetricsTable holds the README's metrics table to a scrape of a role
// that has served an intent: every metric the table names is exported,
// with the labels it names, and every idemflow_ metric exported is in the
// table.
func checkMetricsTable(t *testing.T, role, scraped string) {
	t.Helper()
	readme, err := docs.Read("../..")
	if err != nil {
		t.Fatal(err)
	}
	_, table, _ := strings.Cut(readme, "| metric | what it counts |")
	table, _, _ = strings.Cut(table, "\n\n")
	named := regexp.MustCompile("`((?:idemflow|temporal)_[a-z_*]+)(?:\\{([a-z_,]+)\\})?`")
	inTable := map[string]bool{}
	for _, m := range named.FindAllStringSubmatch(table, -1) {
		name, labels := m[1], m[2]
		inTable[name] = true
		if prefix, ok := strings.CutSuffix(name, "*"); ok {
			if !regexp.MustCompile(`(?m)^` + prefix).MatchString(scraped) {
				t.Errorf("%s: the README names %s, and no such metric is exported", role, name)
			}
			continue
		}
		sample := regexp.MustCompile(`(?m)^` + name + `(?:_bucket|_count)?(?:\{([^}]*)\})? `).FindStringSubmatch(scraped)
		if sample == nil {
			t.Errorf("%s: the README names %s, and it is not exported", role, name)
			continue
		}
		var got []string
		for _, kv := range strings.Split(sample[1], ",") {
			if k, _, ok := strings.Cut(kv, "="); ok && k != "le" {
				got = append(got, k)
			}
		}
		if want := strings.Split(labels, ","); labels != "" && strings.Join(got, ",") != strings.Join(slices.Sorted(slices.Values(want)), ",") {
			t.Errorf("%s: the README gives %s the labels %v, the scrape %v", role, name, want, got)
		}
	}
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (idemflow_[a-z_]+) `).FindAllStringSubmatch(scraped, -1) {
		if !inTable[m[1]] {
			t.Errorf("%s exports %s, which the README's metrics table does not name", role, m[1])
		}
	}
}

// 'mcp --http' says, at start-up, the URL to give MCP clients; a client
// without a token is refused with the gateway's problem+json.
func TestMCPOverHTTPLogsTheURLToConnectTo(t *testing.T) {
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	mcp := startChild(t, "", "point clients at this URL", "mcp", "--http", addr, "--url", "http://127.0.0.1:9")
	mcp.WaitUp(t, 30*time.Second)
	if !strings.Contains(mcp.Output(), "url=http://"+addr+"/") {
		t.Fatalf("start-up log:\n%s", mcp.Output())
	}
	resp, err := http.Post("http://"+addr+"/", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("no token: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}
