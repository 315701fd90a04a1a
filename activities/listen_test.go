package activities_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/idemflow/idemflow/activities"
	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/registry"
)

// A gateway in another process learns of a settled record through
// PostgreSQL: the worker's store notifies in the settling transaction, and
// Listen wakes the gateway's waiters.
func TestSettledRecordsReachListenersInOtherProcesses(t *testing.T) {
	f := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gatewaySide := &idem.Waiters{}
	go idem.Listen(ctx, f.dbURL, gatewaySide, slog.New(slog.NewTextHandler(io.Discard, nil)))
	// Until LISTEN is in place, probe.
	deadline := time.Now().Add(10 * time.Second)
	for {
		ch, stop := gatewaySide.Wait("probe", "p")
		if _, err := f.pool.Exec(ctx, `SELECT pg_notify($1, 'probe/p')`, idem.SettledChannel); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ch:
		case <-time.After(100 * time.Millisecond):
		}
		stop()
		if ch != nil && isClosed(ch) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("LISTEN never took")
		}
	}
	in := f.claim(t, "notified")
	settled, stop := gatewaySide.Wait("acme", "notified")
	defer stop()
	workerSide := idem.NewStore(f.pool, idem.Retention{}, registry.Recall)
	workerSide.Notify = true
	if _, err := activities.New(f.pool, workerSide, nil, nil).CreateTicket(ctx, in); err != nil {
		t.Fatal(err)
	}
	select {
	case <-settled:
	case <-time.After(5 * time.Second):
		t.Fatal("the settled record was not announced")
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
