// Package testenv gives tests the real parts: a fresh PostgreSQL database
// per test on a real server, and an embedded Temporal server. A missing
// server fails the test; it is never skipped.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/internal/devserver"
	"github.com/idemflow/idemflow/internal/pgurl"
	"github.com/idemflow/idemflow/migrations"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc"
)

// DefaultAdminURL is the machine's own PostgreSQL with trust auth.
const DefaultAdminURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// AdminURL is IDEMFLOW_TEST_DATABASE_URL or DefaultAdminURL.
func AdminURL() string {
	if u := os.Getenv("IDEMFLOW_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultAdminURL
}

// Database creates an empty, migrated database (idemflow's schema and
// schemas) and drops it when the test ends. It returns the database's URL.
func Database(t testing.TB, schemas ...migrations.Schema) string {
	t.Helper()
	return DatabaseWith(t, Setup{}, schemas...)
}

// Setup shapes a test database as a user's server may: Create is added to
// CREATE DATABASE (ENCODING 'SQL_ASCII' ...), and each of Settings is set
// on it (ALTER DATABASE ... SET standard_conforming_strings = off) before
// anything connects to it.
type Setup struct {
	Create   string
	Settings []string
}

// DatabaseWith is Database on a database made as setup says.
func DatabaseWith(t testing.TB, setup Setup, schemas ...migrations.Schema) string {
	t.Helper()
	u := emptyDatabase(t, setup)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, _, err := migrations.MigrateURL(ctx, u, schemas...); err != nil {
		t.Fatalf("testenv: migrate: %v", err)
	}
	return u
}

// EmptyDatabase creates a database with no tables (for migration tests)
// and drops it when the test ends. It returns the database's URL.
func EmptyDatabase(t testing.TB) string {
	t.Helper()
	return emptyDatabase(t, Setup{})
}

func emptyDatabase(t testing.TB, setup Setup) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, AdminURL())
	if err != nil {
		t.Fatalf("testenv: PostgreSQL at %s is not reachable (run scripts/test.sh, which starts one, or set IDEMFLOW_TEST_DATABASE_URL): %v", AdminURL(), err)
	}
	defer admin.Close(context.Background())
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "idemflow_test_" + hex.EncodeToString(b)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name+" "+setup.Create); err != nil {
		t.Fatalf("testenv: create database: %v", err)
	}
	for _, set := range setup.Settings {
		if _, err := admin.Exec(ctx, "ALTER DATABASE "+name+" SET "+set); err != nil {
			t.Fatalf("testenv: set %s: %v", set, err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, AdminURL())
		if err != nil {
			t.Logf("testenv: drop %s: %v", name, err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Logf("testenv: drop %s: %v", name, err)
		}
	})
	u, err := devserver.WithDatabase(AdminURL(), name)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// Pool opens a pool on a fresh database (see Database).
func Pool(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	u := Database(t)
	return PoolOn(t, u, func(*pgxpool.Config) {}), u
}

// PoolOn opens a pool on the database at u, configured by configure.
func PoolOn(t testing.TB, u string, configure func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgurl.ParsePoolConfig(u)
	if err != nil {
		t.Fatalf("testenv: pool: %v", err)
	}
	configure(cfg)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("testenv: pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Statements is a pgx QueryTracer and BatchTracer that keeps the round
// trips a pool makes, to count what one request costs (a cost is measured
// in round trips, not in time: these machines are shared). A statement is
// one; a batch is one, however many statements it pipelines.
type Statements struct{ seen }

// seen is what a counter saw since it was last taken.
type seen struct {
	mu    sync.Mutex
	items []string
}

func (l *seen) add(item string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.items = append(l.items, item)
}

// Take returns what was seen since the last Take, and forgets it.
func (l *seen) Take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.items
	l.items = nil
	return out
}

func oneLine(sql string) string { return strings.Join(strings.Fields(sql), " ") }

// TraceQueryStart implements pgx.QueryTracer.
func (s *Statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	s.add(oneLine(data.SQL))
	return ctx
}

// TraceQueryEnd implements pgx.QueryTracer.
func (s *Statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart implements pgx.BatchTracer: the batch is one entry.
func (s *Statements) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	var sqls []string
	for _, q := range data.Batch.QueuedQueries {
		sqls = append(sqls, oneLine(q.SQL))
	}
	s.add("batch [" + strings.Join(sqls, "; ") + "]")
	return ctx
}

// TraceBatchQuery implements pgx.BatchTracer.
func (s *Statements) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// TraceBatchEnd implements pgx.BatchTracer.
func (s *Statements) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// RPCs counts the Temporal RPCs a client makes, by method, for a
// Stack's Options.Client: the worker's long polls are left out, as they
// run whether or not an intent arrives.
type RPCs struct{ seen }

// Interceptor is the gRPC client interceptor that counts.
func (r *RPCs) Interceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	name := method[strings.LastIndex(method, "/")+1:]
	if !strings.HasPrefix(name, "Poll") {
		r.add(name)
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// ClientOptions are client options with the interceptor in place.
func (r *RPCs) ClientOptions() client.Options {
	return client.Options{ConnectionOptions: client.ConnectionOptions{
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(r.Interceptor)}}}
}

// Count returns SELECT count(*) FROM table [WHERE ...].
func Count(t testing.TB, q idem.Querier, table, where string, args ...any) int {
	t.Helper()
	sql := "SELECT count(*) FROM " + table
	if where != "" {
		sql += " WHERE " + where
	}
	var n int
	if err := q.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", table, err)
	}
	return n
}
