package gateway_test

import (
	"context"
	"fmt"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemflow/idemflow/activities"
	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
	"github.com/idemflow/idemflow/internal/tracing"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// BenchmarkFirstTicket: a new intent each time, through HTTP, PostgreSQL
// and a Temporal workflow. "history-poll" is the same with the in-process
// wake-up off: the waiting request learns of the end from Temporal only.
func BenchmarkFirstTicket(b *testing.B) {
	b.Run("wake", func(b *testing.B) { benchFirstTicket(b, true) })
	b.Run("history-poll", func(b *testing.B) { benchFirstTicket(b, false) })
}

func benchFirstTicket(b *testing.B, wake bool) {
	s := testenv.NewStack(b, testenv.Options{})
	if !wake {
		s.Records.Waiters = nil
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if r := benchSend(b, s, "/v1/tickets", fmt.Sprintf("bench-first-%d", i), ticketBody); r.Status != 201 {
			b.Fatalf("%d %s", r.Status, r.Body)
		}
	}
}

// BenchmarkFirstTicketTracing: a new ticket with tracing "off", as serve
// runs without OTEL_* variables (nothing installed; the starter's spans
// are the no-op tracer's), beside "untraced" (no tracer at all: what off
// costs is the difference) and "on" (every span recorded in memory).
func BenchmarkFirstTicketTracing(b *testing.B) {
	for _, mode := range []string{"untraced", "off", "on"} {
		b.Run(mode, func(b *testing.B) {
			var tr *tracing.Tracing
			if mode == "on" {
				tr = tracing.New(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tracetest.NewSpanRecorder())))
			}
			s := testenv.NewStack(b, testenv.Options{Tracing: tr})
			if mode == "untraced" {
				s.Gateway.Starter.Tracer = nil
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if r := benchSend(b, s, "/v1/tickets", fmt.Sprintf("bench-traced-%d", i), ticketBody); r.Status != 201 {
					b.Fatalf("%d %s", r.Status, r.Body)
				}
			}
		})
	}
}

// BenchmarkReplay: the same intent again, answered from the record
// without a Temporal round trip.
func BenchmarkReplay(b *testing.B) {
	s := testenv.NewStack(b, testenv.Options{})
	if r := ticket(s, testenv.TenantA, "bench-replay", ticketBody); r.Status != 201 {
		b.Fatalf("%d %s", r.Status, r.Body)
	}
	b.ReportAllocs()
	for b.Loop() {
		if r := benchSend(b, s, "/v1/tickets", "bench-replay", ticketBody); r.Status != 201 || r.Header.Get("Idempotent-Replayed") != "true" {
			b.Fatalf("%d %s", r.Status, r.Body)
		}
	}
}

// BenchmarkReplayParallel: replays from concurrent agents.
func BenchmarkReplayParallel(b *testing.B) {
	s := testenv.NewStack(b, testenv.Options{})
	if r := ticket(s, testenv.TenantA, "bench-par", ticketBody); r.Status != 201 {
		b.Fatalf("%d %s", r.Status, r.Body)
	}
	var bad atomic.Int64
	b.ResetTimer() // unlike b.Loop, RunParallel would count the stack's boot
	req := testenv.Request{Path: "/v1/tickets", Token: s.Tokens[testenv.TenantA], Key: "bench-par", Body: ticketBody}
	b.RunParallel(func(pb *testing.PB) {
		// Not s.Do: it fails the benchmark with FailNow, which only the
		// benchmark's own goroutine may call.
		for pb.Next() {
			if r, err := testenv.Send(s.URL, req); err != nil || r.Status != 201 {
				bad.Add(1)
			}
		}
	})
	if bad.Load() != 0 {
		b.Fatalf("%d failed replays", bad.Load())
	}
}

// BenchmarkCreateOrder: a new order each time (pricing, stock, event).
func BenchmarkCreateOrder(b *testing.B) {
	s := testenv.NewStack(b, testenv.Options{})
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if r := benchSend(b, s, "/v1/orders", fmt.Sprintf("bench-order-%d", i), `{"customer_id":"c","items":[{"sku":"SKU-CABLE","quantity":1}]}`); r.Status != 201 {
			b.Fatalf("%d %s", r.Status, r.Body)
		}
	}
}

// BenchmarkFirstTicketAcrossProcesses: the gateway and the worker share no
// memory, as when they run in separate processes (gateway + worker rather
// than serve). "history-poll": the waiting request learns of the end from
// Temporal's history long poll; "listen-notify": from PostgreSQL's
// NOTIFY, sent in the settling transaction, on one LISTEN connection.
func BenchmarkFirstTicketAcrossProcesses(b *testing.B) {
	for _, clients := range []int{1, 32} {
		b.Run(fmt.Sprintf("history-poll/clients=%d", clients), func(b *testing.B) { benchAcrossProcesses(b, false, clients) })
		b.Run(fmt.Sprintf("listen-notify/clients=%d", clients), func(b *testing.B) { benchAcrossProcesses(b, true, clients) })
	}
}

func benchAcrossProcesses(b *testing.B, notify bool, clients int) {
	s := testenv.NewStack(b, testenv.Options{NoWorker: true})
	s.Records.Waiters = nil
	workerRecords := idem.NewStore(s.Pool, idem.Retention{}, s.Set.Recall)
	if notify {
		workerRecords.NotifyChannel = idem.SettledChannel
		s.Records.Waiters = &idem.Waiters{}
		ctx, cancel := context.WithCancel(context.Background())
		b.Cleanup(cancel)
		go s.Records.Listen(ctx, s.DatabaseURL, s.Logger)
		time.Sleep(200 * time.Millisecond) // LISTEN is in place
	}
	s.Activities = activities.New(s.Pool, workerRecords, s.Temporal, s.Logger)
	s.StartWorker()
	var n, bad atomic.Int64
	b.SetParallelism(clients) // clients per GOMAXPROCS, as RunParallel counts
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req := testenv.Request{Path: "/v1/tickets", Token: s.Tokens[testenv.TenantA],
				Key: fmt.Sprintf("bench-across-%d", n.Add(1)), Body: ticketBody}
			if r, err := testenv.Send(s.URL, req); err != nil || r.Status != 201 {
				bad.Add(1)
			}
		}
	})
	if bad.Load() != 0 {
		b.Fatalf("%d failed intents", bad.Load())
	}
}

// benchSend posts one intent for tenant A inside a benchmark's loop. It
// uses Send, not s.Do: s.Do also checks the exchange against the OpenAPI
// document, which would be measured with the gateway.
func benchSend(b *testing.B, s *testenv.Stack, path, key, body string) testenv.Response {
	r, err := testenv.Send(s.URL, testenv.Request{Path: path, Token: s.Tokens[testenv.TenantA], Key: key, Body: body})
	if err != nil {
		b.Fatal(err)
	}
	return r
}

// BenchmarkQueryExecMode: a new ticket and a replay with idemflow's
// statements run as unnamed statements whose descriptions are cached
// (pgurl.DefaultQueryExecMode, which works behind a transaction pooler),
// beside pgx's own default, "cache_statement", which prepares each under
// a name on the server (the reference: what the unnamed statements'
// parsing costs is the difference).
func BenchmarkQueryExecMode(b *testing.B) {
	for _, mode := range []string{"cache_statement", "default"} {
		server := testenv.AdminURL()
		if mode != "default" {
			u, err := url.Parse(server)
			if err != nil {
				b.Fatal(err)
			}
			q := u.Query()
			q.Set("default_query_exec_mode", mode)
			u.RawQuery = q.Encode()
			server = u.String()
		}
		s := testenv.NewStack(b, testenv.Options{Database: testenv.Setup{Server: server}})
		seq := 0 // -count runs a sub-benchmark again on the same stack
		b.Run("first/"+mode, func(b *testing.B) {
			b.ReportAllocs()
			for ; b.Loop(); seq++ {
				if r := benchSend(b, s, "/v1/tickets", fmt.Sprintf("bench-mode-%d", seq), ticketBody); r.Status != 201 {
					b.Fatalf("%d %s", r.Status, r.Body)
				}
			}
		})
		b.Run("replay/"+mode, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if r := benchSend(b, s, "/v1/tickets", "bench-mode-0", ticketBody); r.Status != 201 || r.Header.Get("Idempotent-Replayed") != "true" {
					b.Fatalf("%d %s", r.Status, r.Body)
				}
			}
		})
	}
}
