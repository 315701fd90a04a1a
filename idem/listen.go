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
// with NotifyChannel set announces settled records, as "<tenant>/<key>" (a tenant
// ID has no '/').
const SettledChannel = "idemflow_settled"

// Listen feeds w with the settled-record notifications of every process
// whose store has NotifyChannel set, until ctx ends, reconnecting after errors. A
// gateway in another process than the worker can then wake its waiting
// requests without Temporal's history long poll.
func Listen(ctx context.Context, databaseURL string, w *Waiters, logger *slog.Logger) {
	for ctx.Err() == nil {
		err := listenOnce(ctx, databaseURL, w)
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

func listenOnce(ctx context.Context, databaseURL string, w *Waiters) error {
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
		if tenantID, key, ok := strings.Cut(n.Payload, "/"); ok {
			w.Settled(tenantID, key, nil)
		}
	}
}
