package idem

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/idemflow/idemflow/internal/pgurl"
	"github.com/jackc/pgx/v5"
)

// SettledChannel is the PostgreSQL notification channel on which a store
// with NotifyChannel set announces settled records, as
// "<origin>/<tenant>/<key>": the store that settled it, then the record (an
// origin and a tenant ID have no '/').
const SettledChannel = "idemflow_settled"

// listenerName begins the application_name of a Listen connection; the
// store's origin follows.
const listenerName = "idemflow-listen "

// WatchInterval is how often a worker looks for listeners
// (WatchListeners).
const WatchInterval = 5 * time.Second

// WatchListeners keeps s told whether a process other than s's own
// listens for settled records, until ctx ends: while none does, s sends
// no notification (QueueSettled, Settled), which would cost PostgreSQL a
// transaction per intent and wake only s's own listener (at 64 clients on
// loopback, a tenth of the throughput). It looks every interval
// (WatchInterval in serve), so a gateway that starts listening is
// notified within that; until then a waiter it has also watches the run
// in Temporal. Before the first look, and whenever a look fails, s
// notifies.
func (s *Store) WatchListeners(ctx context.Context, q Querier, interval time.Duration, logger *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		var others bool
		err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND application_name LIKE $1 || '%' AND application_name <> $1 || $2)`,
			listenerName, s.origin).Scan(&others)
		if err != nil && ctx.Err() == nil {
			logger.Warn("looking for listeners of settled records; notifying meanwhile", "error", err)
			others = true
		}
		s.quiet.Store(!others)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// notifies reports whether s announces settled records now.
func (s *Store) notifies() bool { return s.NotifyChannel != "" && !s.quiet.Load() }

// payload is s's notification of (tenantID, key).
func (s *Store) payload(tenantID, key string) string { return s.origin + "/" + tenantID + "/" + key }

// Listen feeds s's Waiters with the settled-record notifications of every
// other store whose NotifyChannel is set, until ctx ends, reconnecting
// after errors. A gateway in another process than the worker can then
// wake its waiting requests without Temporal's history long poll. s's own
// notifications are skipped: its waiters were told at once, with the
// record (Waiters.Settled), and a wake-up without it would cost a read.
//
// Through a pooler that shares sessions between clients (transaction
// pooling: pgurl.SharesSessions), LISTEN would land on a server
// connection the listener no longer holds, and it would hear nothing
// without a word. Listen then says so and returns: waiting requests learn
// of other processes' settles from Temporal's history poll
// (starter.HistoryPollAfter later), which is correct without them. A
// direct or session-pooled URL for Listen alone brings them back
// (IDEMFLOW_LISTEN_DATABASE_URL).
func (s *Store) Listen(ctx context.Context, databaseURL string, logger *slog.Logger) {
	for ctx.Err() == nil {
		shared, err := pgurl.SharesSessions(ctx, databaseURL)
		if err == nil && shared {
			logger.Warn("not listening for settled records: the database URL reaches PostgreSQL through a pooler that shares sessions between clients " +
				"(transaction pooling), which delivers no notifications; a waiting request learns that another process settled its intent " +
				"from Temporal's history poll, half a second later. Set IDEMFLOW_LISTEN_DATABASE_URL to a URL that reaches PostgreSQL " +
				"directly or through session pooling (docs/production.md)")
			return
		}
		if err == nil {
			err = s.listenOnce(ctx, databaseURL)
		}
		if ctx.Err() != nil {
			return
		}
		logger.Warn("listening for settled records; reconnecting", "error", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (s *Store) listenOnce(ctx context.Context, databaseURL string) error {
	cc, err := pgurl.ParseConfig(databaseURL)
	if err != nil {
		return err
	}
	// Named, so that workers can tell whether a process other than their
	// own listens (WatchListeners).
	cc.RuntimeParams["application_name"] = listenerName + s.origin
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+SettledChannel); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		origin, record, ok := strings.Cut(n.Payload, "/")
		if !ok || origin == s.origin {
			continue
		}
		if tenantID, key, ok := strings.Cut(record, "/"); ok {
			s.Waiters.Settled(tenantID, key, nil)
		}
	}
}
