package agentclient

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemflow/idemflow/internal/tooling/testenv"
	"github.com/jackc/pgx/v5/pgxpool"
)

// script is a gateway stand-in that answers each attempt from a list and
// records the key of every request. (The real gateway is exercised by the
// MCP and demo tests; the retry table needs answers on demand.)
type script struct {
	mu      sync.Mutex
	answers []func(w http.ResponseWriter, r *http.Request)
	keys    []string
	paths   []string
}

func (s *script) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.keys = append(s.keys, r.Header.Get("Idempotency-Key"))
	s.paths = append(s.paths, r.Method+" "+r.URL.Path)
	n := len(s.keys) - 1
	s.mu.Unlock()
	if n >= len(s.answers) {
		n = len(s.answers) - 1
	}
	s.answers[n](w, r)
}

func status(code int, problemType string, header ...string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, _ *http.Request) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		if code >= 400 {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(code)
			fmt.Fprintf(w, `{"type":%q,"title":"t","status":%d,"detail":"d","code":"out-of-stock","current_state":"PAID"}`, problemType, code)
			return
		}
		w.WriteHeader(code)
		fmt.Fprint(w, `{"ticket_id":"t-1"}`)
	}
}

var created = status(201, "", "Idempotent-Replayed", "false")

// hang answers after the client gave up on the attempt: a lost answer.
// The body is read first: only then can the server notice the client
// hanging up (as the real gateway, which reads bodies whole, does).
func hang(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	select {
	case <-r.Context().Done():
	case <-time.After(5 * time.Second):
	}
}

type sleeps struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *sleeps) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
	return ctx.Err()
}

func newClient(t *testing.T, srv *script) (*Client, *sleeps) {
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	sl := &sleeps{}
	return &Client{BaseURL: hs.URL, Token: "tok", Store: &MemoryStore{}, AttemptTimeout: 200 * time.Millisecond, sleep: sl.sleep}, sl
}

func TestRetryTable(t *testing.T) {
	retryable := map[string]func(http.ResponseWriter, *http.Request){
		"timeout":     hang,
		"409 running": status(409, "/problems/request-in-progress", "Retry-After", "1"),
		"429":         status(429, "/problems/slow-down"),
		"503":         status(503, "/problems/service-unavailable", "Retry-After", "2"),
		"500":         status(500, "/problems/execution-failed"),
	}
	for name, first := range retryable {
		t.Run("retries "+name, func(t *testing.T) {
			srv := &script{answers: []func(http.ResponseWriter, *http.Request){first, created}}
			c, _ := newClient(t, srv)
			in, err := c.NewIntent(context.Background(), "i", "ticket", http.MethodPost, "/v1/tickets", map[string]string{"title": "x"})
			if err != nil {
				t.Fatal(err)
			}
			res, err := c.Do(context.Background(), in)
			if err != nil || res.Status != 201 {
				t.Fatalf("%v %+v", err, res)
			}
			if len(srv.keys) != 2 || srv.keys[0] != in.Key || srv.keys[1] != in.Key {
				t.Fatalf("keys sent %v, want %q twice", srv.keys, in.Key)
			}
		})
	}
	final := map[string]struct {
		answer func(http.ResponseWriter, *http.Request)
		is     error
	}{
		"400":                {status(400, "/problems/invalid-request"), ErrInvalidRequest},
		"401":                {status(401, "/problems/unauthorized"), ErrUnauthorized},
		"404":                {status(404, "/problems/not-found"), ErrNotFound},
		"413":                {status(413, "/problems/body-too-large"), ErrTooLarge},
		"422 key reused":     {status(422, "/problems/idempotency-key-reused"), ErrKeyReused},
		"422 out of stock":   {status(422, "/problems/out-of-stock"), ErrRejected},
		"409 bad transition": {status(409, "/problems/invalid-transition"), ErrRejected},
	}
	for name, tc := range final {
		t.Run("does not retry "+name, func(t *testing.T) {
			srv := &script{answers: []func(http.ResponseWriter, *http.Request){tc.answer, created}}
			c, _ := newClient(t, srv)
			_, err := c.Do(context.Background(), Intent{ID: "i", Key: "k", Method: http.MethodPost, Path: "/v1/tickets", Body: []byte(`{}`)})
			if !errors.Is(err, tc.is) || len(srv.keys) != 1 {
				t.Fatalf("err %v after %d attempts, want %v after 1", err, len(srv.keys), tc.is)
			}
		})
	}
	var rej *RejectedError
	srv := &script{answers: []func(http.ResponseWriter, *http.Request){status(409, "/problems/invalid-transition")}}
	c, _ := newClient(t, srv)
	_, err := c.Do(context.Background(), Intent{Key: "k", Method: http.MethodPost, Path: "/x", Body: []byte(`{}`)})
	if !errors.As(err, &rej) || rej.Code != "out-of-stock" || rej.CurrentState != "PAID" {
		t.Fatalf("rejection details: %v", err)
	}
}

func TestRetryAfterIsHonouredAndBackoffIsCappedWithJitter(t *testing.T) {
	srv := &script{answers: []func(http.ResponseWriter, *http.Request){
		status(409, "/problems/request-in-progress", "Retry-After", "3"),
		status(503, "/problems/service-unavailable"),
		status(503, "/problems/service-unavailable"),
		status(503, "/problems/service-unavailable"),
		created,
	}}
	c, sl := newClient(t, srv)
	c.Initial, c.Max = 100*time.Millisecond, 250*time.Millisecond
	var seen []Attempt
	c.OnAttempt = func(a Attempt) { seen = append(seen, a) }
	if _, err := c.Do(context.Background(), Intent{Key: "k", Method: http.MethodPost, Path: "/x", Body: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if len(sl.d) != 4 || sl.d[0] != 3*time.Second {
		t.Fatalf("sleeps %v: want Retry-After's 3s first", sl.d)
	}
	for i, d := range sl.d[1:] {
		if ceil := min(100*time.Millisecond<<(i+1), 250*time.Millisecond); d < 0 || d > ceil {
			t.Fatalf("backoff %d = %v, outside [0, %v]", i+2, d, ceil)
		}
	}
	if len(seen) != 5 || seen[0].Status != 409 || seen[4].Status != 201 || seen[4].Wait != 0 {
		t.Fatalf("progress callbacks %+v", seen)
	}
}

func TestAcceptedIsPolledUntilDone(t *testing.T) {
	srv := &script{answers: []func(http.ResponseWriter, *http.Request){
		status(202, "", "Location", "/v1/operations/op-1", "Retry-After", "1"),
		func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, `{"status":"processing"}`) },
		func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprint(w, `{"status":"succeeded","result_status":201,"result":{"ticket_id":"t-9"}}`)
		},
	}}
	c, _ := newClient(t, srv)
	res, err := c.Do(context.Background(), Intent{Key: "k", Method: http.MethodPost, Path: "/v1/tickets", Body: []byte(`{}`)})
	// The answer is this request's own first one, not a replay: its 202
	// said it started the run it polled.
	if err != nil || res.Status != 201 || string(res.Body) != `{"ticket_id":"t-9"}` || res.Replayed {
		t.Fatalf("%v %+v", err, res)
	}
	if srv.paths[1] != "GET /v1/operations/op-1" || srv.paths[2] != "GET /v1/operations/op-1" {
		t.Fatalf("requests %v", srv.paths)
	}
}

func TestDeadlineEndsTheRetries(t *testing.T) {
	srv := &script{answers: []func(http.ResponseWriter, *http.Request){status(503, "/problems/service-unavailable")}}
	c, _ := newClient(t, srv)
	c.sleep = sleepCtx
	c.Initial, c.Max = 5*time.Millisecond, 20*time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := c.Do(ctx, Intent{Key: "k", Method: http.MethodPost, Path: "/x", Body: []byte(`{}`)})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want a deadline error, got %v", err)
	}
	attempts := func() int {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		return len(srv.keys)
	}
	n := attempts()
	if n < 2 {
		t.Fatalf("only %d attempts before the deadline", n)
	}
	// The attempt the deadline cut off may reach the server after Do
	// returned (its request was on the wire; a loaded machine delays the
	// handler): at most that one more, and then none. A retry loop still
	// running would keep adding one every 20 ms.
	time.Sleep(100 * time.Millisecond)
	settled := attempts()
	time.Sleep(200 * time.Millisecond)
	if now := attempts(); settled > n+1 || now != settled {
		t.Fatalf("attempts continued after Do returned: %d when it returned, %d 100 ms later, %d 300 ms later", n, settled, now)
	}
}

func testRestart(t *testing.T, store func() IntentStore) {
	ctx := context.Background()
	srv := &script{answers: []func(http.ResponseWriter, *http.Request){hang, created}}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	// First process: makes the intent, tries once, and "crashes".
	c1 := &Client{BaseURL: hs.URL, Token: "tok", Store: store(), AttemptTimeout: 100 * time.Millisecond}
	in1, err := c1.NewIntent(ctx, "step-7", "ticket", http.MethodPost, "/v1/tickets", map[string]string{"title": "x"})
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	_, _ = c1.Do(short, in1)
	cancel()
	// Second process: a new client over the same store resumes the intent.
	c2 := &Client{BaseURL: hs.URL, Token: "tok", Store: store()}
	in2, err := c2.NewIntent(ctx, "step-7", "ticket", http.MethodPost, "/v1/tickets", map[string]string{"title": "x"})
	if err != nil || in2.Key != in1.Key {
		t.Fatalf("resumed key %q, want %q (%v)", in2.Key, in1.Key, err)
	}
	if _, err := c2.Do(ctx, in2); err != nil {
		t.Fatal(err)
	}
	for _, k := range srv.keys {
		if k != in1.Key {
			t.Fatalf("a retry after the restart sent key %q, want %q", k, in1.Key)
		}
	}
	// The answer is stored too: resuming a finished intent needs no call.
	in3, _ := c2.Store.Load(ctx, "step-7")
	if in3.Result == nil || in3.Result.Status != 201 {
		t.Fatalf("stored result %+v", in3.Result)
	}
}

func TestKeySurvivesRestartWithFileStore(t *testing.T) {
	dir := t.TempDir()
	testRestart(t, func() IntentStore { return FileStore{Dir: dir} })
}

func TestKeySurvivesRestartWithPGStore(t *testing.T) {
	_, dbURL := testenv.Pool(t)
	testRestart(t, func() IntentStore {
		pool, err := pgxpool.New(context.Background(), dbURL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		s, err := NewPGStore(context.Background(), pool)
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestNewIntentNeedsADurableStore(t *testing.T) {
	c := &Client{BaseURL: "http://x"}
	if _, err := c.NewIntent(context.Background(), "i", "k", "POST", "/x", nil); err == nil {
		t.Fatal("NewIntent without a store must fail: the key would not survive a restart")
	}
	k := (&Client{Tenant: "acme"}).NewKey("ticket:create")
	if len(k) < len("ticket:create:acme:")+36 || k[:len("ticket:create:acme:")] != "ticket:create:acme:" {
		t.Fatalf("key %q", k)
	}
}

// An operation that ends failed with a 5xx after a 202 is retried under
// the same key, as a direct 5xx is: the server said so.
func TestAcceptedThenFailedIsRetriedWithTheSameKey(t *testing.T) {
	srv := &script{answers: []func(http.ResponseWriter, *http.Request){
		status(202, "", "Location", "/v1/operations/op-1", "Retry-After", "1"),
		func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprint(w, `{"status":"failed","result_status":500,"result":{"type":"/problems/execution-failed","status":500}}`)
		},
		created,
	}}
	c, _ := newClient(t, srv)
	res, err := c.Do(context.Background(), Intent{Key: "k", Method: http.MethodPost, Path: "/v1/tickets", Body: []byte(`{}`)})
	if err != nil || res.Status != 201 {
		t.Fatalf("%v %+v (requests %v)", err, res, srv.paths)
	}
	if len(srv.keys) != 3 || srv.keys[2] != "k" || srv.paths[2] != "POST /v1/tickets" {
		t.Fatalf("requests %v keys %v", srv.paths, srv.keys)
	}
}

// On a case-insensitive file system (macOS, Windows) two IDs that differ
// only in case must not share a file, or one intent would take the other's
// key.
func TestFileStoreNamesDoNotCollideByCase(t *testing.T) {
	s := FileStore{Dir: t.TempDir()}
	a, b := s.path("Step-A"), s.path("step-a")
	if strings.EqualFold(a, b) {
		t.Fatalf("%s and %s are one file on a case-insensitive file system", a, b)
	}
	if strings.Contains(s.path("../../etc/passwd"), "..") {
		t.Fatalf("an ID names another path: %s", s.path("../../etc/passwd"))
	}
}

// A rename is durable only once its directory is synced.
func TestFileStoreSyncsTheDirectoryAfterTheRename(t *testing.T) {
	dir := t.TempDir()
	var synced []string
	s := FileStore{Dir: dir, syncDir: func(d string) error {
		if _, err := os.Stat(filepath.Join(d, filepath.Base(FileStore{Dir: d}.path("i")))); err != nil {
			t.Errorf("directory synced before the rename: %v", err)
		}
		synced = append(synced, d)
		return nil
	}}
	if err := s.Save(context.Background(), Intent{ID: "i", Key: "k"}); err != nil {
		t.Fatal(err)
	}
	if len(synced) != 1 || synced[0] != dir {
		t.Fatalf("synced %v", synced)
	}
}

// Resuming an ID with another request is the caller's mistake to see,
// not a silent return of the stored one.
func TestNewIntentRefusesADifferentRequestUnderAStoredID(t *testing.T) {
	c := &Client{BaseURL: "http://x", Store: &MemoryStore{}}
	ctx := context.Background()
	first, err := c.NewIntent(ctx, "i", "ticket", "POST", "/v1/tickets", map[string]any{"title": "a", "customer_id": "c"})
	if err != nil {
		t.Fatal(err)
	}
	same, err := c.NewIntent(ctx, "i", "ticket", "POST", "/v1/tickets", map[string]any{"customer_id": "c", "title": "a"})
	if err != nil || same.Key != first.Key {
		t.Fatalf("the same request: %+v %v", same, err)
	}
	for _, tc := range []struct {
		method, path string
		body         any
	}{
		{"POST", "/v1/tickets", map[string]any{"title": "b", "customer_id": "c"}},
		{"POST", "/v1/orders", map[string]any{"title": "a", "customer_id": "c"}},
		{"PUT", "/v1/tickets", map[string]any{"title": "a", "customer_id": "c"}},
	} {
		if _, err := c.NewIntent(ctx, "i", "ticket", tc.method, tc.path, tc.body); !errors.Is(err, ErrIntentMismatch) {
			t.Fatalf("%s %s %v: %v", tc.method, tc.path, tc.body, err)
		}
	}
}

// After a 400 nothing was recorded, so the README's advice holds: the same
// key may carry a corrected body. NewIntent refuses the change and names
// it; ReviseIntent makes it, only for an intent refused that way. A replay
// from the agent's own store says it is one.
func TestAfterA400TheSameKeyCarriesACorrectedBody(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	ctx := context.Background()
	c := &Client{BaseURL: s.URL, Token: s.Tokens[testenv.TenantA], Store: &MemoryStore{}}
	bad := map[string]any{"customer_id": "c-1", "title": strings.Repeat("t", 201)}
	good := map[string]any{"customer_id": "c-1", "title": "Printer on fire"}
	in, err := c.NewIntent(ctx, "step-1", "ticket:create", "POST", "/v1/tickets", bad)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReviseIntent(ctx, "step-1", "POST", "/v1/tickets", good); !errors.Is(err, ErrNotRevisable) {
		t.Fatalf("revising an intent never sent: %v", err)
	}
	if _, err := c.Do(ctx, in); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("a 201-character title: %v", err)
	}
	_, err = c.NewIntent(ctx, "step-1", "ticket:create", "POST", "/v1/tickets", good)
	if !errors.Is(err, ErrIntentMismatch) || !strings.Contains(err.Error(), `asked body {"customer_id":"c-1","title":"Printer on fire"}`) ||
		!strings.Contains(err.Error(), "ReviseIntent") {
		t.Fatalf("NewIntent with the corrected body: %v", err)
	}
	revised, err := c.ReviseIntent(ctx, "step-1", "POST", "/v1/tickets", good)
	if err != nil || revised.Key != in.Key {
		t.Fatalf("revise: %+v %v", revised, err)
	}
	first, err := c.Do(ctx, revised)
	if err != nil || first.Status != 201 || first.Replayed {
		t.Fatalf("the corrected intent: %+v %v", first, err)
	}
	stored, _ := c.Store.Load(ctx, "step-1")
	again, err := c.Do(ctx, stored)
	if err != nil || !again.Replayed || !bytes.Equal(again.Body, first.Body) {
		t.Fatalf("the answer from the store: %+v %v", again, err)
	}
	if _, err := c.ReviseIntent(ctx, "step-1", "POST", "/v1/tickets", bad); !errors.Is(err, ErrNotRevisable) {
		t.Fatalf("revising an intent with its final answer: %v", err)
	}
	if n := testenv.Count(t, s.Pool, "ticket", ""); n != 1 {
		t.Fatalf("%d tickets", n)
	}
}

// deadlineSlack is how late a call may end after its context's deadline:
// the time an aborted request takes to close, on a loaded machine
// (docs/agents/go.md states it).
const deadlineSlack = 500 * time.Millisecond

// A caller's deadline is a bound: through a partition that holds every
// answer of the real gateway, a call with the client's defaults (an
// attempt of 10 s, the server's wait of 5 s) ends by its deadline, and no
// request asks the server to hold its answer past it.
func TestADeadlineIsABoundThroughAPartition(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	var mu sync.Mutex
	var prefers []string
	up, err := url.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	forward := httputil.NewSingleHostReverseProxy(up)
	partition := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		prefers = append(prefers, r.Header.Get("Prefer"))
		mu.Unlock()
		// The request takes effect upstream; its answer never comes back.
		forward.ServeHTTP(httptest.NewRecorder(), r.WithContext(context.WithoutCancel(r.Context())))
		<-r.Context().Done()
	}))
	t.Cleanup(partition.Close)
	for _, deadline := range []time.Duration{time.Second, 3 * time.Second} {
		t.Run(deadline.String(), func(t *testing.T) {
			mu.Lock()
			prefers = nil
			mu.Unlock()
			c := &Client{BaseURL: partition.URL, Token: s.Tokens[testenv.TenantA]}
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			start := time.Now()
			_, err := c.Do(ctx, Intent{Key: "bound-" + deadline.String(), Method: http.MethodPost, Path: "/v1/tickets",
				Body: []byte(`{"customer_id":"c-1","title":"Printer on fire"}`)})
			took := time.Since(start)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("want a deadline error, got %v", err)
			}
			if took > deadline+deadlineSlack {
				t.Errorf("a deadline of %s ended the call after %s", deadline, took)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(prefers) == 0 {
				t.Fatal("no request went through the partition")
			}
			for _, p := range prefers {
				n, err := strconv.Atoi(strings.TrimPrefix(p, "wait="))
				if err != nil || time.Duration(n+1)*time.Second > deadline {
					t.Errorf("with %s left a request sent Prefer %q: the server's default of 5 s, or more than leaves a second", deadline, p)
				}
			}
		})
	}
}

// A deadline that ends while the intent is recorded and running names the
// operation that will hold the answer, and whose run it is: a front end
// hands that on (an MCP task) instead of an answer that only says "no
// answer yet".
func TestADeadlineWhileTheIntentRunsNamesItsOperation(t *testing.T) {
	running := func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, `{"status":"processing"}`) }
	inProgress := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusConflict)
		fmt.Fprint(w, `{"type":"/problems/request-in-progress","title":"t","status":409,"operation_id":"op-2"}`)
	}
	for name, tc := range map[string]struct {
		answers []func(http.ResponseWriter, *http.Request)
		want    Pending
	}{
		"its own run (202)": {[]func(http.ResponseWriter, *http.Request){
			func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Location", "/v1/operations/op-1")
				w.WriteHeader(http.StatusAccepted)
				fmt.Fprint(w, `{"operation_id":"op-1","status":"processing"}`)
			}, running}, Pending{OperationID: "op-1", Owner: true}},
		"another request's run (409 in progress)": {[]func(http.ResponseWriter, *http.Request){inProgress}, Pending{OperationID: "op-2"}},
	} {
		t.Run(name, func(t *testing.T) {
			c, _ := newClient(t, &script{answers: tc.answers})
			c.sleep = sleepCtx
			c.Initial, c.Max = 5*time.Millisecond, 20*time.Millisecond
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			_, err := c.Do(ctx, Intent{Key: "k", Method: http.MethodPost, Path: "/v1/tickets", Body: []byte(`{}`)})
			var pe *PendingError
			if !errors.As(err, &pe) || pe.Pending != tc.want || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("want a deadline naming %+v, got %v", tc.want, err)
			}
		})
	}
}
