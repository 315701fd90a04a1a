package tracing_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/idemflow/idemflow/internal/tracing"
	"github.com/jackc/pgx/v5/pgxpool"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// Off unless the variables ask for an exporter, and then nothing is
// installed: no handler wrapped, no pgx tracer, no interceptor.
func TestTracingIsOffUnlessTheVariablesAskForIt(t *testing.T) {
	for _, vars := range []map[string]string{
		{},
		{"OTEL_SERVICE_NAME": "x"},
		{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"},
		{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"},
	} {
		tr, err := tracing.FromEnv(context.Background(), env(vars), "idemflow")
		if err != nil {
			t.Fatalf("%v: %v", vars, err)
		}
		if tr.On() {
			t.Errorf("%v: tracing is on", vars)
		}
		h := &http.ServeMux{}
		if got, ok := tr.Handler(h).(*http.ServeMux); !ok || got != h {
			t.Errorf("%v: the handler was wrapped", vars)
		}
		cfg, err := pgxpool.ParseConfig("postgres://127.0.0.1/x")
		if err != nil {
			t.Fatal(err)
		}
		if tr.Pool(cfg); cfg.ConnConfig.Tracer != nil {
			t.Errorf("%v: a pgx tracer was installed", vars)
		}
		if is, err := tr.Interceptors(); err != nil || len(is) != 0 {
			t.Errorf("%v: interceptors %v %v", vars, is, err)
		}
	}
	for _, vars := range []map[string]string{
		{"OTEL_TRACES_EXPORTER": "zipkin"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
	} {
		if _, err := tracing.FromEnv(context.Background(), env(vars), "idemflow"); err == nil {
			t.Errorf("%v: accepted", vars)
		}
	}
}

// With an OTLP endpoint, spans are exported there over OTLP/HTTP (the
// default protocol), flushed at Shutdown.
func TestSpansAreExportedOverOTLP(t *testing.T) {
	var posts atomic.Int64
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/traces" && r.Header.Get("Content-Type") == "application/x-protobuf" {
			if b, _ := io.ReadAll(r.Body); len(b) > 0 {
				posts.Add(1)
			}
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer collector.Close()
	tr, err := tracing.FromEnv(context.Background(), env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": collector.URL}), "idemflow")
	if err != nil {
		t.Fatal(err)
	}
	if !tr.On() {
		t.Fatal("an OTLP endpoint did not turn tracing on")
	}
	_, span := tr.Tracer().Start(context.Background(), "idemflow.claim")
	span.End()
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if posts.Load() == 0 {
		t.Fatal("no span reached the collector")
	}
}
