package activities_test

import (
	"bytes"
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
	"github.com/idemflow/idemflow/internal/tooling/testenv"
	"github.com/jackc/pgx/v5"
)

// A gateway in another process learns of a settled record through
// PostgreSQL: the worker's store notifies once the settling transaction
// has committed, and Listen wakes the gateway's waiters.
func TestSettledRecordsReachListenersInOtherProcesses(t *testing.T) {
	f := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gateway := idem.NewStore(f.pool, idem.Retention{}, f.recall)
	gateway.Waiters = &idem.Waiters{}
	gatewaySide := gateway.Waiters
	workerSide := idem.NewStore(f.pool, idem.Retention{}, f.recall)
	workerSide.NotifyChannel = idem.SettledChannel
	listening(t, ctx, f, gateway, workerSide)
	in := f.claim(t, "notified")
	settled, stop := gatewaySide.Wait("acme", "notified")
	defer stop()
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

// listening starts listener's Listen and returns once it hears notifier.
func listening(t *testing.T, ctx context.Context, f fixture, listener, notifier *idem.Store) {
	t.Helper()
	go listener.Listen(ctx, f.dbURL, slog.New(slog.NewTextHandler(io.Discard, nil)))
	deadline := time.Now().Add(10 * time.Second)
	for {
		probe, stop := listener.Waiters.Wait("probe", "p")
		ch := probe.Done()
		b := &pgx.Batch{}
		notifier.QueueSettled(b, "probe", "p")
		if err := f.pool.SendBatch(ctx, b).Close(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ch:
		case <-time.After(100 * time.Millisecond):
		}
		stop()
		if isClosed(ch) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("LISTEN never took")
		}
	}
}

// In a process that is gateway and worker at once (serve, dev), the
// worker's settle wakes the waiting request at once, with the record; its
// notification, on its way to other processes, comes back to the same
// process's listener too, sometimes first, and must not wake the request
// without the record (which then costs it a read: a fourth round trip on
// a new intent). Notifications are delivered in the order sent: once
// another store's has arrived, the process's own has been skipped.
func TestAProcessDoesNotWakeItselfByItsOwnNotification(t *testing.T) {
	f := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	process := idem.NewStore(f.pool, idem.Retention{}, f.recall)
	process.Waiters, process.NotifyChannel = &idem.Waiters{}, idem.SettledChannel
	other := idem.NewStore(f.pool, idem.Retention{}, f.recall)
	other.NotifyChannel = idem.SettledChannel
	listening(t, ctx, f, process, other)

	mine, stopMine := process.Waiters.Wait("acme", "mine")
	defer stopMine()
	theirs, stopTheirs := process.Waiters.Wait("acme", "theirs")
	defer stopTheirs()
	for _, n := range []struct {
		store *idem.Store
		key   string
	}{{process, "mine"}, {other, "theirs"}} {
		b := &pgx.Batch{}
		n.store.QueueSettled(b, "acme", n.key)
		if err := f.pool.SendBatch(ctx, b).Close(); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-theirs.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("another store's notification was not heard")
	}
	if isClosed(mine.Done()) {
		t.Fatal("the process's own notification woke its waiter, without the record")
	}
}

// A worker notifies only while a process other than its own listens: a
// serve or dev process alone would pay PostgreSQL a transaction per intent
// to wake nobody. Its own listener does not count; another's, once seen,
// does, and no longer once it has gone.
func TestAWorkerNotifiesOnlyWhileAnotherProcessListens(t *testing.T) {
	f := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	worker := idem.NewStore(f.pool, idem.Retention{}, f.recall)
	worker.Waiters, worker.NotifyChannel = &idem.Waiters{}, idem.SettledChannel
	notifies := func() bool {
		b := &pgx.Batch{}
		worker.QueueSettled(b, "acme", "k")
		return b.Len() > 0
	}
	if !notifies() {
		t.Fatal("a worker that has not looked yet must notify")
	}
	go worker.Listen(ctx, f.dbURL, logger)
	go worker.WatchListeners(ctx, f.pool, 20*time.Millisecond, logger)
	eventually := func(what string, want bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); notifies() != want; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: notifies %v, want %v", what, !want, want)
			}
		}
	}
	eventually("its own listener alone", false)
	gctx, stop := context.WithCancel(ctx)
	gateway := idem.NewStore(f.pool, idem.Retention{}, f.recall)
	gateway.Waiters = &idem.Waiters{}
	go gateway.Listen(gctx, f.dbURL, logger)
	eventually("a gateway in another process listening", true)
	stop()
	eventually("that gateway gone", false)
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
	store := idem.NewStore(f.pool, idem.Retention{}, f.recall)
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

// Behind PgBouncer in transaction pooling, LISTEN lands on a server
// connection the listener does not keep, and no notification reaches it:
// before, it listened on and heard nothing, without a word. It now says
// why and stops (waiting requests then rely on Temporal's history poll).
// Behind session pooling it listens and hears, as on PostgreSQL itself.
func TestListenBehindATransactionPoolerSaysItWouldHearNothing(t *testing.T) {
	f := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logged bytes.Buffer
	gateway := idem.NewStore(f.pool, idem.Retention{}, f.recall)
	gateway.Waiters = &idem.Waiters{}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		gateway.Listen(ctx, testenv.PgBouncer(t, f.dbURL, "transaction"), slog.New(slog.NewTextHandler(&logged, nil)))
	}()
	select {
	case <-stopped:
	case <-time.After(15 * time.Second):
		t.Fatal("Listen through a transaction pooler listened on: it hears nothing there, and said nothing")
	}
	if !strings.Contains(logged.String(), "level=WARN") || !strings.Contains(logged.String(), "IDEMFLOW_LISTEN_DATABASE_URL") {
		t.Fatalf("Listen stopped without a warning that names the fix:\n%s", logged.String())
	}

	session := f
	session.dbURL = testenv.PgBouncer(t, f.dbURL, "session")
	listener := idem.NewStore(f.pool, idem.Retention{}, f.recall)
	listener.Waiters = &idem.Waiters{}
	notifier := idem.NewStore(f.pool, idem.Retention{}, f.recall)
	notifier.NotifyChannel = idem.SettledChannel
	listening(t, ctx, session, listener, notifier)
}
