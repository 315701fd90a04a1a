// Package metrics is idemflow's Prometheus instrumentation. Its one job:
// give each process one registry, shared by its gateway, its worker and
// the Temporal SDK (whose own metrics reach it through tally), and the
// worker-side counters that the dashboards and alerts in deploy/ read.
package metrics

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/IBM/pgxpoolprometheus"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/uber-go/tally/v4"
	tallyprom "github.com/uber-go/tally/v4/prometheus"
	"go.temporal.io/sdk/client"
	sdktally "go.temporal.io/sdk/contrib/tally"
)

// Registry is one process's metrics.
type Registry struct {
	*prometheus.Registry
	// SDK is given to the Temporal client: its request, poll, workflow and
	// activity metrics (temporal_*) land in this registry.
	SDK    client.MetricsHandler
	closer func() error
	Worker *Worker
}

// New makes a process's registry, with Go's runtime and process metrics.
func New() *Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reporter := tallyprom.NewReporter(tallyprom.Options{Registerer: reg})
	scope, closer := tally.NewRootScope(tally.ScopeOptions{
		CachedReporter:  reporter,
		Separator:       tallyprom.DefaultSeparator,
		SanitizeOptions: &sdktally.PrometheusSanitizeOptions,
	}, time.Second)
	r := &Registry{Registry: reg, SDK: sdktally.NewMetricsHandler(sdktally.NewPrometheusNamingScope(scope)), closer: closer.Close}
	r.Worker = newWorker(reg)
	return r
}

// WatchPool exports the process's PostgreSQL pool's statistics
// (pgxpool_*: acquires and their time, waits on an empty pool,
// connections by state), so that an operator, and bench's accounting, see
// whether requests wait for a connection.
func (r *Registry) WatchPool(pool *pgxpool.Pool) {
	r.MustRegister(pgxpoolprometheus.NewCollector(pool, map[string]string{"pool": PoolName}))
}

// PoolName is the pool label of the pgxpool_* series WatchPool exports.
const PoolName = "idemflow"

// Handler serves the registry in the Prometheus text format.
func (r *Registry) Handler() http.Handler {
	return promhttp.HandlerFor(r.Registry, promhttp.HandlerOpts{})
}

// Close flushes and stops the SDK's reporting.
func (r *Registry) Close() error { return r.closer() }

// Worker counts what the worker's activities did.
type Worker struct {
	reconciled *prometheus.CounterVec
	purged     prometheus.Counter
	rejected   *prometheus.CounterVec
	executed   *prometheus.HistogramVec
}

func newWorker(reg prometheus.Registerer) *Worker {
	w := &Worker{
		reconciled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemflow_reconcile_intents_total",
			Help: "Stale PROCESSING intents reconcile looked at, by verdict (from-row, from-workflow, failed, running, already-final, error).",
		}, []string{"verdict"}),
		purged: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idemflow_records_purged_total",
			Help: "Expired idempotency records deleted by purge.",
		}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemflow_business_rejections_total",
			Help: "Intents refused by a business rule (out of stock, coupon, transition), by business type and code.",
		}, []string{"biz_type", "code"}),
		executed: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "idemflow_intent_execution_seconds",
			Help:    "One business step (its PostgreSQL transaction) by business type and result (done, rejected, error).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		}, []string{"biz_type", "result"}),
	}
	reg.MustRegister(w.reconciled, w.purged, w.rejected, w.executed)
	return w
}

// ExportVerdict exports a reconcile verdict's series at 0 before it first
// happens, so that an alert on one (deploy/alerts.yml) has a series from
// the start. The worker calls it for each verdict it can give
// (activities.Verdicts).
func (w *Worker) ExportVerdict(verdict string) {
	if w != nil {
		w.reconciled.WithLabelValues(verdict)
	}
}

// Reconciled counts one reconcile verdict. A nil Worker counts nothing.
func (w *Worker) Reconciled(verdict string) {
	if w != nil {
		w.reconciled.WithLabelValues(verdict).Inc()
	}
}

// Purged counts deleted records.
func (w *Worker) Purged(n int64) {
	if w != nil && n > 0 {
		w.purged.Add(float64(n))
	}
}

// Executed observes one business step.
func (w *Worker) Executed(bizType, result string, took time.Duration) {
	if w != nil {
		w.executed.WithLabelValues(bizType, result).Observe(took.Seconds())
	}
}

// ExportRejection exports a business rejection's series at 0 before it
// first happens, as ExportVerdict does for reconcile's verdicts: an alert on
// a rate of rejections has a series from the start.
func (w *Worker) ExportRejection(bizType, code string) {
	if w != nil {
		w.rejected.WithLabelValues(bizType, code)
	}
}

// Rejected counts a business rejection.
func (w *Worker) Rejected(bizType, code string) {
	if w != nil {
		w.rejected.WithLabelValues(bizType, code).Inc()
	}
}

// WatchProcessing exports how many records are PROCESSING and how old the
// oldest is, read at each scrape: an oldest age past the reconcile horizon
// means reconcile is not keeping up (deploy/alerts.yml).
// A failed read fails the scrape with a fixed message (the target shows
// down, as it should), and the error itself goes to logger only: its text
// names the database's user, name and host, which a scrape must not show.
func (r *Registry) WatchProcessing(logger *slog.Logger, read func(ctx context.Context) (count int, oldest time.Duration, err error)) {
	c := &processing{read: read, logger: logger,
		count:  prometheus.NewDesc("idemflow_processing_records", "Idempotency records in PROCESSING, all tenants.", nil, nil),
		oldest: prometheus.NewDesc("idemflow_processing_oldest_seconds", "Age of the oldest PROCESSING record (0 when none).", nil, nil),
	}
	r.MustRegister(c)
}

type processing struct {
	read          func(ctx context.Context) (int, time.Duration, error)
	logger        *slog.Logger
	count, oldest *prometheus.Desc
}

// errProcessingUnread is all a scrape learns of a failed read.
var errProcessingUnread = errors.New("idemflow_processing_records: PostgreSQL could not be read (the process's log says why)")

func (p *processing) Describe(ch chan<- *prometheus.Desc) { ch <- p.count; ch <- p.oldest }

func (p *processing) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	n, age, err := p.read(ctx)
	if err != nil {
		p.logger.Warn("metrics: read the PROCESSING records", "error", err)
		ch <- prometheus.NewInvalidMetric(p.count, errProcessingUnread)
		return
	}
	ch <- prometheus.MustNewConstMetric(p.count, prometheus.GaugeValue, float64(n))
	ch <- prometheus.MustNewConstMetric(p.oldest, prometheus.GaugeValue, age.Seconds())
}

// WatchCommits exports idemflow_database_commits_blocked, read at each
// scrape by blocked (2 s at most): 1 while no commit can finish (commits
// wait for a synchronous standby that is not there), else 0. Unlike the
// replication gauges, it follows a failover that happens after start:
// that is when a promoted standby keeps the old primary's setting.
func (r *Registry) WatchCommits(logger *slog.Logger, blocked func(ctx context.Context) (bool, error)) {
	r.MustRegister(&commits{blocked: blocked, logger: logger,
		desc: prometheus.NewDesc("idemflow_database_commits_blocked",
			"1 while commits wait for a synchronous standby that is not there, so that no intent can be recorded; read at each scrape.", nil, nil)})
}

type commits struct {
	blocked func(ctx context.Context) (bool, error)
	logger  *slog.Logger
	desc    *prometheus.Desc
}

func (c *commits) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *commits) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	blocked, err := c.blocked(ctx)
	if err != nil {
		c.logger.Warn("metrics: read whether commits are blocked", "error", err)
		ch <- prometheus.NewInvalidMetric(c.desc, errCommitsUnread)
		return
	}
	v := 0.0
	if blocked {
		v = 1
	}
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, v)
}

// errCommitsUnread is all a scrape learns of a failed read.
var errCommitsUnread = errors.New("idemflow_database_commits_blocked: PostgreSQL could not be read (the process's log says why)")

// Replication records what replication.Check found at the process's
// start: whether a commit idemflow acknowledges survives the promotion
// of a standby (1) or not (0), and the streaming standbys by kind.
func (r *Registry) Replication(safe bool, sync, async int) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "idemflow_database_failover_safe",
		Help: "1 when an acknowledged commit survives a standby's promotion (a synchronous standby, and commits wait for it), else 0; read at start.",
	})
	standbys := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "idemflow_database_standbys",
		Help: "Streaming standbys of the database at start, by kind (sync: a commit waits for it; async).",
	}, []string{"kind"})
	if safe {
		g.Set(1)
	}
	standbys.WithLabelValues("sync").Set(float64(sync))
	standbys.WithLabelValues("async").Set(float64(async))
	r.MustRegister(g, standbys)
}
