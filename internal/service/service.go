// Package service assembles one idemflow process from its list of
// operations, on a pool and a Temporal client it is given: the record
// store, the activities, the gateway, the worker's registrations and the
// settled records' notifications between processes. serve, worker,
// gateway, dev, bench's replica (internal/cli) and the test kit
// (idemflowtest, through testenv) all build through New, so that no
// process's wiring drifts from another's or from what the tests run.
package service

import (
	"context"
	"log/slog"
	"time"

	"github.com/idemflow/idemflow/activities"
	"github.com/idemflow/idemflow/httptool"
	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/internal/gateway"
	"github.com/idemflow/idemflow/internal/metrics"
	"github.com/idemflow/idemflow/internal/registry"
	"github.com/idemflow/idemflow/internal/tracing"
	"github.com/idemflow/idemflow/worker"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
)

// Config is what a process opened, and what it serves.
type Config struct {
	Pool     *pgxpool.Pool
	Temporal client.Client
	// Set is the process's operations: the built-ins, the declared ones
	// and its HTTP tools'.
	Set *registry.Set
	// Tools are the HTTP tools the worker calls (nil: none).
	Tools *httptool.Set
	// Retention is how long a finished record is kept.
	Retention idem.Retention
	Logger    *slog.Logger
	// Metrics, when set, is where the gateway and the worker count.
	Metrics *metrics.Registry
	// Tracing, when set, traces the gateway, the starts and the tools'
	// calls (the pool and the client are traced by whoever opens them).
	Tracing *tracing.Tracing
	// Searchable: the namespace has the intents' search attributes, so
	// the runs are started with them.
	Searchable bool
}

// Service is one process's parts. The gateway and the worker of one
// process share its record store, so a waiting request hears of its
// intent's record from the worker in the same process at once.
type Service struct {
	Config
	Records    *idem.Store
	Activities *activities.Activities
}

// New assembles cfg's parts.
func New(cfg Config) *Service {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	records := idem.NewStore(cfg.Pool, cfg.Retention, cfg.Set.Recall)
	records.Waiters = &idem.Waiters{}
	acts := activities.New(cfg.Pool, records, cfg.Temporal, cfg.Logger)
	acts.Tools = cfg.Tools
	acts.Tracer = cfg.Tracing.Tracer()
	if cfg.Metrics != nil {
		acts.Observer = cfg.Metrics.Worker
		// Every series an alert may watch exists from the start, at 0.
		for _, v := range activities.Verdicts() {
			cfg.Metrics.Worker.ExportVerdict(string(v))
		}
		for bizType, codes := range cfg.Set.Rejections() {
			for _, code := range codes {
				cfg.Metrics.Worker.ExportRejection(bizType, code)
			}
		}
	}
	return &Service{Config: cfg, Records: records, Activities: acts}
}

// Gateway returns a gateway over the service's parts.
func (s *Service) Gateway() *gateway.Gateway {
	g := gateway.New(s.Pool, s.Temporal, s.Records, s.Set, s.Logger)
	g.Starter.SearchAttributes = s.Searchable
	if s.Metrics != nil {
		g.Metrics = gateway.NewMetricsOn(s.Metrics.Registry)
		g.Starter.Stages = g.Metrics.Stage
	}
	g.Tracing = s.Tracing
	g.Starter.Tracer = s.Tracing.Tracer()
	return g
}

// Worker returns a worker on the service's Temporal client.
func (s *Service) Worker() sdkworker.Worker {
	return worker.New(s.Temporal, s.Activities, s.Set.Operations())
}

// Roles are what one process runs.
type Roles struct{ Gateway, Worker bool }

// Notify connects the process's records to the other processes', until
// ctx ends. A gateway listens at databaseURL for records that other
// processes' workers settled (other replicas, a separate worker), and
// hears of them sooner than from Temporal's long poll. A worker announces
// what it settles while another process listens, which it looks for on
// watch every interval (idem.WatchInterval; a separate pool keeps the
// looks out of the counts of a test that counts the service's round
// trips).
func (s *Service) Notify(ctx context.Context, r Roles, databaseURL string, watch idem.Querier, interval time.Duration) {
	if r.Gateway {
		go s.Records.Listen(ctx, databaseURL, s.Logger)
	}
	if r.Worker {
		s.Records.NotifyChannel = idem.SettledChannel
		go s.Records.WatchListeners(ctx, watch, interval, s.Logger)
		if s.Metrics != nil {
			s.Metrics.WatchProcessing(s.Logger, s.Records.Processing)
		}
	}
}
