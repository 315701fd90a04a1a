package activities_test

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemflow/idemflow/activities"
	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/internal/registry"
	"github.com/idemflow/idemflow/internal/testenv"
	"github.com/jackc/pgx/v5"
)

// A gateway in another process learns of a settled record through
// PostgreSQL: the worker's store notifies once the settling transaction
// has committed, and Listen wakes the gateway's waiters.
func TestSettledRecordsReachListenersInOtherProcesses(t *testing.T) {
	f := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gatewaySide := &idem.Waiters{}
	go idem.Listen(ctx, f.dbURL, gatewaySide, slog.New(slog.NewTextHandler(io.Discard, nil)))
	// Until LISTEN is in place, probe.
	deadline := time.Now().Add(10 * time.Second)
	for {
		probe, stop := gatewaySide.Wait("probe", "p")
		ch := probe.Done()
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
	workerSide.NotifyChannel = idem.SettledChannel
	if _, err := createTicket(activities.New(f.pool, workerSide, nil, nil), ctx, in); err != nil {
		t.Fatal(err)
	}
	select {
	case <-settled.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the settled record was not announced")
	}
	if settled.Final() != nil {
		t.Fatal("a notification from another process handed over a record: it carries none")
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

// A notification is never part of the business transaction (#17, item
// 17): PostgreSQL serialises notifying commits on one lock, and a stalled
// listener can fill the notification queue, after which a notify fails.
// Here every notify fails (a channel name PostgreSQL refuses), and the
// intent still commits.
func TestAFailingNotifyCannotFailABusinessCommit(t *testing.T) {
	f := setup(t)
	in := f.claim(t, "notify-fails")
	store := idem.NewStore(f.pool, idem.Retention{}, registry.Recall)
	store.NotifyChannel = strings.Repeat("x", 100) // pg_notify: channel name too long
	if _, err := f.pool.Exec(context.Background(), `SELECT pg_notify($1, 'x')`, store.NotifyChannel); err == nil {
		t.Fatal("the stand-in for a full queue does not fail")
	}
	if _, err := createTicket(activities.New(f.pool, store, nil, nil), context.Background(), in); err != nil {
		t.Fatalf("the business step failed with its notification: %v", err)
	}
	if rec, err := store.Get(context.Background(), "acme", "notify-fails"); err != nil || rec.Status != idem.StatusSuccess {
		t.Fatalf("record %+v %v", rec, err)
	}
}

// BenchmarkNotifyingCommits measures what #17 (item 17) suspected:
// PostgreSQL serialises the commits of transactions that NOTIFY (one
// global lock on the notification queue), so concurrent settles that
// notify inside their transaction queue behind each other. "inside" is
// how settles notified before; "after" is how they do now (the statement
// on its own, after the commit, which a settle sends off its own path);
// "none" is the commit alone. Compare the ns/op within one run.
func BenchmarkNotifyingCommits(b *testing.B) {
	pool, _ := testenv.Pool(b)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE TABLE bench_notify (id int PRIMARY KEY, n int NOT NULL DEFAULT 0);
		INSERT INTO bench_notify (id) SELECT generate_series(0, 1023)`); err != nil {
		b.Fatal(err)
	}
	for _, mode := range []string{"none", "inside", "after"} {
		b.Run(mode, func(b *testing.B) {
			var next atomic.Int64
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					id := next.Add(1) % 1024
					err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
						if _, err := tx.Exec(ctx, `UPDATE bench_notify SET n = n + 1 WHERE id = $1`, id); err != nil {
							return err
						}
						if mode == "inside" {
							_, err := tx.Exec(ctx, `SELECT pg_notify('bench_notify', $1)`, strconv.FormatInt(id, 10))
							return err
						}
						return nil
					})
					if err == nil && mode == "after" {
						_, err = pool.Exec(ctx, `SELECT pg_notify('bench_notify', $1)`, strconv.FormatInt(id, 10))
					}
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
