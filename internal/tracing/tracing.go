// Package tracing wires OpenTelemetry traces through idemflow: one trace
// per intent, from the agent's request (its W3C traceparent honoured)
// through the claim, the workflow start, the workflow task and the
// activity in the worker (Temporal's OpenTelemetry interceptor carries the
// context across), and every SQL statement (a pgx tracer), to the answer.
//
// It is configured by the standard OTEL_* variables and off unless they
// ask for an exporter: a process without them installs no instrumentation
// at all, and its spans are the no-op tracer's.
package tracing

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5/multitracer"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"
)

// Name is the instrumentation scope of idemflow's own spans.
const Name = "github.com/idemflow/idemflow"

// Propagator is the W3C trace context (traceparent, tracestate) and
// baggage: what idemflow reads from agents and sends on.
var Propagator propagation.TextMapPropagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// Tracing is one process's tracing: on (a provider that exports) or off
// (the zero value, or nil).
type Tracing struct {
	provider trace.TracerProvider
	shutdown func(context.Context) error
}

// New is tracing into provider (tests pass one with an in-memory
// exporter).
func New(provider trace.TracerProvider) *Tracing { return &Tracing{provider: provider} }

// FromEnv reads the standard variables through lookup (os.LookupEnv):
// tracing is on when OTEL_TRACES_EXPORTER is otlp, or unset with an OTLP
// endpoint given (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), and OTEL_SDK_DISABLED is not true.
// OTEL_EXPORTER_OTLP_PROTOCOL picks grpc or http/protobuf (the default);
// the exporter reads the headers, TLS and timeout variables itself, the
// provider OTEL_TRACES_SAMPLER, and the resource OTEL_SERVICE_NAME
// (service by default) and OTEL_RESOURCE_ATTRIBUTES.
func FromEnv(ctx context.Context, lookup func(string) (string, bool), service string) (*Tracing, error) {
	get := func(k string) string { v, _ := lookup(k); return strings.TrimSpace(v) }
	if strings.EqualFold(get("OTEL_SDK_DISABLED"), "true") {
		return &Tracing{}, nil
	}
	switch exp := strings.ToLower(get("OTEL_TRACES_EXPORTER")); exp {
	case "none":
		return &Tracing{}, nil
	case "":
		if get("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return &Tracing{}, nil
		}
	case "otlp":
	default:
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%s: idemflow exports traces over OTLP only (otlp, or none)", exp)
	}
	protocol := get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = get("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	// The endpoint is passed on as read here (the exporter reads the
	// other variables, headers and TLS, itself): a signal's own endpoint
	// is used as it is, the general one gets the signal's path (HTTP).
	endpoint, path := get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), ""
	if endpoint == "" {
		endpoint, path = get("OTEL_EXPORTER_OTLP_ENDPOINT"), "/v1/traces"
	}
	var exporter sdktrace.SpanExporter
	var err error
	switch protocol {
	case "grpc":
		var opts []otlptracegrpc.Option
		if endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(endpoint))
		}
		exporter, err = otlptracegrpc.New(ctx, opts...)
	case "", "http/protobuf":
		var opts []otlptracehttp.Option
		if endpoint != "" {
			opts = append(opts, otlptracehttp.WithEndpointURL(strings.TrimRight(endpoint, "/")+path))
		}
		exporter, err = otlptracehttp.New(ctx, opts...)
	default:
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%s: want grpc or http/protobuf", protocol)
	}
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(semconv.ServiceName(service)))
	if err != nil {
		return nil, err
	}
	// The variables win over the default service name.
	if fromEnv, err := resource.New(ctx, resource.WithFromEnv()); err == nil {
		if merged, err := resource.Merge(res, fromEnv); err == nil {
			res = merged
		}
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))
	return &Tracing{provider: tp, shutdown: tp.Shutdown}, nil
}

// On reports whether spans are exported.
func (t *Tracing) On() bool { return t != nil && t.provider != nil }

// Shutdown flushes the spans not exported yet.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil || t.shutdown == nil {
		return nil
	}
	return t.shutdown(ctx)
}

// Tracer is idemflow's own tracer: the claim, the start, the wait.
func (t *Tracing) Tracer() trace.Tracer {
	if !t.On() {
		return noop.NewTracerProvider().Tracer(Name)
	}
	return t.provider.Tracer(Name)
}

// Handler makes every request a span, a child of the caller's
// traceparent when it sent one.
func (t *Tracing) Handler(h http.Handler) http.Handler {
	if !t.On() {
		return h
	}
	// Named by its method until routed: the gateway names it by route.
	return otelhttp.NewHandler(h, "idemflow", otelhttp.WithTracerProvider(t.provider), otelhttp.WithPropagators(Propagator),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method }))
}

// Pool adds the pgx tracer to a pool's configuration: a span per
// statement and per batch, as a child of the caller's span (the claim's,
// or the activity's), with the SQL text but never its parameters.
func (t *Tracing) Pool(cfg *pgxpool.Config) {
	if !t.On() {
		return
	}
	tracer := otelpgx.NewTracer(otelpgx.WithTracerProvider(t.provider), otelpgx.WithTrimSQLInSpanName())
	if cfg.ConnConfig.Tracer == nil {
		cfg.ConnConfig.Tracer = tracer
		return
	}
	cfg.ConnConfig.Tracer = multitracer.New(cfg.ConnConfig.Tracer, tracer)
}

// Interceptors are the Temporal client's: its tracing interceptor starts
// a span for the workflow start and carries the context in the run's
// headers, so that the worker's workflow task and activity spans (and the
// SQL under them) join the intent's trace.
func (t *Tracing) Interceptors() ([]interceptor.ClientInterceptor, error) {
	if !t.On() {
		return nil, nil
	}
	i, err := temporalotel.NewTracingInterceptor(temporalotel.TracerOptions{
		Tracer: t.provider.Tracer("temporal-sdk-go"), TextMapPropagator: Propagator,
		// A run started before tracing was turned on has no span in
		// its header; it must still run.
		AllowInvalidParentSpans: true,
	})
	if err != nil {
		return nil, fmt.Errorf("temporal tracing interceptor: %w", err)
	}
	return []interceptor.ClientInterceptor{i}, nil
}

// Inject writes ctx's trace context into h (traceparent, tracestate):
// what a client sends so that the server's spans join its trace. Nothing
// is written when ctx carries none.
func Inject(ctx context.Context, h http.Header) {
	Propagator.Inject(ctx, propagation.HeaderCarrier(h))
}

// Extract returns ctx with the trace context of carrier (traceparent,
// tracestate) as its remote parent, when it has a valid one.
func Extract(ctx context.Context, carrier map[string]string) context.Context {
	return Propagator.Extract(ctx, propagation.MapCarrier(carrier))
}
