package gateway

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics count what each submission came to, claims, replays and
// conflicts apart: replays are normal, while a rising conflict count means
// an agent runtime reuses keys wrongly (README, "Reads").
type Metrics struct {
	registry *prometheus.Registry
	intents  *prometheus.CounterVec
	waiting  prometheus.Gauge
	requests *prometheus.HistogramVec
	stages   *prometheus.HistogramVec
}

// Labels: what a submission came to, the metric's "outcome" label. (Not an
// idem.Outcome, which is the stored answer itself.)
const (
	LabelExecuted    = "executed"     // this request ran the intent
	LabelReplayed    = "replayed"     // answered from an earlier execution
	LabelConflict    = "key_reused"   // same key, other parameters: 422
	LabelAccepted    = "accepted"     // still running: 202
	LabelInProgress  = "in_progress"  // duplicate while running: 409
	LabelUnavailable = "unavailable"  // PostgreSQL or Temporal down: 503
	LabelFailed      = "failed"       // the run ended without an answer
	LabelInvalid     = "invalid_body" // 400 before anything was recorded
	LabelClientGone  = "client_gone"  // the caller hung up before the answer
)

// NewMetrics registers the gateway's metrics, and Go's runtime ones, on a
// registry of its own (gateway.New's default, and tests'). The commands
// give the gateway their process's registry instead (NewMetricsOn).
func NewMetrics() *Metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return NewMetricsOn(reg)
}

// NewMetricsOn registers the gateway's metrics on reg, the process's
// registry, which /metrics then serves whole.
func NewMetricsOn(reg *prometheus.Registry) *Metrics {
	m := &Metrics{
		registry: reg,
		intents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemflow_intents_total",
			Help: "starter.Intent submissions by business type and outcome.",
		}, []string{"biz_type", "outcome"}),
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "idemflow_waiting_requests",
			Help: "Requests waiting for their intent to finish.",
		}),
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "idemflow_http_request_duration_seconds",
			Help:    "HTTP requests by route, method and status code.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"route", "method", "code"}),
		stages: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "idemflow_intent_stage_seconds",
			Help:    "How long an intent's claim, start and wait took (starter.Starter.Stages).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"stage"}),
	}
	reg.MustRegister(m.intents, m.waiting, m.requests, m.stages)
	return m
}

// Stage observes how long one of an intent's stages took; it is the
// starter's Stages.
func (m *Metrics) Stage(stage string, took time.Duration) {
	if m != nil {
		m.stages.WithLabelValues(stage).Observe(took.Seconds())
	}
}

func (m *Metrics) observe(route, method string, code int, took time.Duration) {
	if m != nil {
		m.requests.WithLabelValues(route, methodLabel(method), strconv.Itoa(code)).Observe(took.Seconds())
	}
}

// methodLabel bounds the method label to the standard methods: a client
// can send any token as a method, and 405s are answered before
// authentication, so a raw method would let anyone add series without end.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "other"
}

func (m *Metrics) count(bizType, outcome string) {
	if m != nil {
		m.intents.WithLabelValues(bizType, outcome).Inc()
	}
}

func (m *Metrics) waitingAdd(n float64) {
	if m != nil {
		m.waiting.Add(n)
	}
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}
