package idem

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/idemflow/idemflow/internal/pgurl"
)

// SettledChannel is the PostgreSQL notification channel on which a store
// with NotifyChannel set announces settled records, as
// "<origin>/<tenant>/<key>": the store that settled it, then the record (an
// origin and a tenant ID have no '/').
const SettledChannel = "idemflow_settled"

// payload is s's notification of (tenantID, key).
func (s *Store) payload(tenantID, key string) string { return s.origin + "/" + tenantID + "/" + key }

// Listen feeds s's Waiters with the settled-record notifications of every
// other store whose NotifyChannel is set, until ctx ends, reconnecting
// after errors. A gateway in another process than the worker can then
// wake its waiting requests without Temporal's history long poll. s's own
// notifications are skipped: its waiters were told at once, with the
// record (Waiters.Settled), and a wake-up without it would cost a read.
func (s *Store) Listen(ctx context.Context, databaseURL string, logger *slog.Logger) {
	for ctx.Err() == nil {
		err := s.listenOnce(ctx, databaseURL)
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
	conn, err := pgurl.Connect(ctx, databaseURL)
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
