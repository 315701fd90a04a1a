package testenv

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/idemflow/idemflow/activities"
	"github.com/idemflow/idemflow/httptool"
	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/internal/audit"
	"github.com/idemflow/idemflow/internal/gateway"
	"github.com/idemflow/idemflow/internal/registry"
	"github.com/idemflow/idemflow/internal/schedule"
	"github.com/idemflow/idemflow/internal/service"
	"github.com/idemflow/idemflow/internal/tenant"
	"github.com/idemflow/idemflow/internal/tooling/roundtrip"
	"github.com/idemflow/idemflow/internal/tracing"
	"github.com/idemflow/idemflow/op"
	"github.com/idemflow/idemflow/worker"
	"github.com/idemflow/idemflow/workflows"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/server/temporaltest"
)

// Tenants every Stack has, with their tokens in Stack.Tokens.
const (
	TenantA = "acme"
	TenantB = "globex"
)

// Stack is the whole service in-process: a fresh database, an embedded
// Temporal server, the worker and the gateway behind an httptest server.
type Stack struct {
	URL         string
	DatabaseURL string
	Pool        *pgxpool.Pool
	Temporal    client.Client
	Server      *temporaltest.TestServer
	Records     *idem.Store
	Activities  *activities.Activities
	Gateway     *gateway.Gateway
	Tokens      map[string]string
	Logger      *slog.Logger
	Set         *registry.Set
	// Contract is the OpenAPI document the gateway serves.
	Contract []byte

	t      testing.TB
	worker sdkworker.Worker
}

// WatchInterval is how often a Stack's worker looks for other processes'
// listeners (idem.WatchInterval in serve), short so that a test need not
// wait.
const WatchInterval = 50 * time.Millisecond

// Options tune a Stack.
type Options struct {
	// Operations are declared operations the stack serves and runs
	// beside the built-ins; their own migrations are applied.
	Operations []*op.Operation
	// Tools are HTTP tools the stack serves and calls, beside the
	// operations.
	Tools *httptool.Set
	// NoWorker leaves the worker stopped (StartWorker starts it), so that
	// intents stay running.
	NoWorker bool
	// Wire, if set, counts the round trips of the stack's pool (the
	// gateway's and the worker's), at the protocol level.
	Wire *roundtrip.SQL
	// Client are the base options of the Temporal client the gateway and
	// the worker share (interceptors: see roundtrip.RPCs).
	Client client.Options
	// Tracing, when on, traces the stack as serve does: its pool, its
	// Temporal client and its gateway.
	Tracing *tracing.Tracing
	// Database shapes the stack's database (DatabaseWith).
	Database Setup
	// Gateway, if set, configures the gateway before it serves (its
	// OAuth resource server, for instance).
	Gateway func(*gateway.Gateway)
}

// NewStack starts a Stack; everything stops when the test ends.
func NewStack(t testing.TB, opts Options) *Stack {
	t.Helper()
	opts.Operations = append(slices.Clone(opts.Operations), opts.Tools.Operations()...)
	set, err := registry.New(opts.Operations...)
	if err != nil {
		t.Fatal(err)
	}
	dbURL := DatabaseWith(t, opts.Database, set.Schemas()...)
	pool := PoolOn(t, dbURL, func(c *pgxpool.Config) {
		if opts.Wire != nil {
			opts.Wire.Pool(c)
		}
		opts.Tracing.Pool(c)
	})
	// As every role refuses to start (cli.openDeps), so does a test's
	// stack, the kit's among them: an operation's table without its
	// unique key is not served.
	if err := audit.RequireConstraints(context.Background(), pool, set.Guards()); err != nil {
		t.Fatal(err)
	}
	interceptors, err := opts.Tracing.Interceptors()
	if err != nil {
		t.Fatal(err)
	}
	opts.Client.Interceptors = append(opts.Client.Interceptors, interceptors...)
	var ts *temporaltest.TestServer
	if tt, ok := t.(*testing.T); ok {
		ts = temporaltest.NewServer(temporaltest.WithT(tt), temporaltest.WithBaseClientOptions(opts.Client))
	} else {
		ts = temporaltest.NewServer(temporaltest.WithBaseClientOptions(opts.Client))
		t.Cleanup(ts.Stop)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if err := schedule.EnsureSearchAttributes(context.Background(), ts.GetDefaultClient(), ts.GetDefaultNamespace()); err != nil {
		t.Fatal(err)
	}
	// Assembled as serve assembles it (service.New), without metrics.
	svc := service.New(service.Config{Pool: pool, Temporal: ts.GetDefaultClient(), Set: set, Tools: opts.Tools,
		Logger: logger, Tracing: opts.Tracing, Searchable: true})
	listenCtx, stopListening := context.WithCancel(context.Background())
	t.Cleanup(stopListening)
	// The worker's looks for listeners go on a pool of their own: they
	// are not the stack's round trips.
	svc.Notify(listenCtx, service.Roles{Gateway: true, Worker: true}, dbURL, PoolOn(t, dbURL, func(*pgxpool.Config) {}), WatchInterval)
	s := &Stack{
		DatabaseURL: dbURL,
		Pool:        pool,
		Temporal:    ts.GetDefaultClient(),
		Server:      ts,
		Records:     svc.Records,
		Activities:  svc.Activities,
		Gateway:     svc.Gateway(),
		Tokens:      map[string]string{},
		Logger:      logger,
		Set:         set,
		t:           t,
	}
	tenants := tenant.NewStore(pool)
	for _, id := range []string{TenantA, TenantB} {
		tok, err := tenant.NewToken()
		if err != nil {
			t.Fatal(err)
		}
		if err := tenants.AddToken(context.Background(), id, tok, "test"); err != nil {
			t.Fatal(err)
		}
		if err := set.Seed(context.Background(), pool, id); err != nil {
			t.Fatal(err)
		}
		s.Tokens[id] = tok
	}
	if s.Contract, err = gateway.Contract(set); err != nil {
		t.Fatal(err)
	}
	if opts.Gateway != nil {
		opts.Gateway(s.Gateway)
	}
	srv := httptest.NewServer(s.Gateway.Handler())
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	if !opts.NoWorker {
		s.StartWorker()
	}
	return s
}

// StartWorker starts the worker (once).
func (s *Stack) StartWorker() {
	if s.worker != nil {
		return
	}
	s.worker = s.Server.NewWorker(workflows.TaskQueue, func(r sdkworker.Registry) {
		worker.Register(r, s.Activities, s.Set.Operations())
	})
}

// Response is an HTTP answer, read whole.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Request is one HTTP call to the gateway.
type Request struct {
	Method string
	Path   string
	Token  string
	Key    string
	Body   string
	Header map[string]string
}

// Do sends req to the stack's gateway and checks the exchange against the
// contract it serves (its declared operations' paths included).
func (s *Stack) Do(req Request) Response {
	s.t.Helper()
	return doWith(s.t, s.Contract, s.URL, req)
}

// Do sends req to the gateway at base and checks the exchange against the
// gateway's OpenAPI document (CheckContract); a transport error fails the
// test. Call it only from the test's goroutine: from others, use Send.
func Do(t testing.TB, base string, req Request) Response {
	t.Helper()
	return doWith(t, builtinContract(t), base, req)
}

func doWith(t testing.TB, contract []byte, base string, req Request) Response {
	t.Helper()
	if req.Method == "" {
		req.Method = http.MethodPost
	}
	resp, err := Send(base, req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.Path, err)
	}
	CheckContractOf(t, contract, req.Method, base+req.Path, req.header(), []byte(req.Body), resp)
	return resp
}

// header is the request's headers as Send sets them.
func (req Request) header() http.Header {
	h := http.Header{}
	if req.Token != "" {
		h.Set("Authorization", "Bearer "+req.Token)
	}
	if req.Key != "" {
		h.Set("Idempotency-Key", req.Key)
	}
	if req.Body != "" {
		h.Set("Content-Type", "application/json")
	}
	for k, v := range req.Header {
		if v == "" {
			h.Del(k) // a test sends no such header at all
			continue
		}
		h.Set(k, v)
	}
	return h
}

// Send sends req to the gateway at base.
func Send(base string, req Request) (Response, error) {
	if req.Method == "" {
		req.Method = http.MethodPost
	}
	r, err := http.NewRequest(req.Method, base+req.Path, bytes.NewReader([]byte(req.Body)))
	if err != nil {
		return Response{}, err
	}
	r.Header = req.header()
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		return Response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return Response{}, err
	}
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: b}, nil
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}
