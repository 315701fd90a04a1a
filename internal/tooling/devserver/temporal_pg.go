package devserver

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/idemflow/idemflow/internal/pgurl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/log"
	pgplugin "go.temporal.io/server/common/persistence/sql/sqlplugin/postgresql"
	"go.temporal.io/server/tools/common/schema"
	sqltool "go.temporal.io/server/tools/sql"
)

// The embedded schemas Temporal's own schema tool applies, as it does for
// 'temporal-sql-tool update-schema --schema-name ...'.
const (
	pgSchema           = "postgresql/v12/temporal"
	pgVisibilitySchema = "postgresql/v12/visibility"
)

// ErrSharedSessions: the embedded Temporal's store was given a URL that
// reaches PostgreSQL through a pooler that shares sessions between clients.
var ErrSharedSessions = errors.New("temporal: the embedded Temporal server cannot keep its store behind a pooler that shares sessions between clients " +
	"(transaction pooling): it holds a session's advisory lock and prepares its statements under names. Give it a URL that reaches " +
	"PostgreSQL directly or through session pooling, or run dev with --temporal-store sqlite (docs/production.md)")

// pgPools bound each connection pool of the embedded server, to its main
// store and to its visibility store. Every service in the process
// (frontend, history, matching, worker) opens a pool of each. At 20 each
// (Temporal's sample configuration) one idle dev stack held 39 connections,
// 54 after the bench, and two of them exhausted a default server's
// max_connections of 100; at these it holds about 21, 26 after the bench,
// and the bench's throughput is the same (README, Temporal Cloud, clusters
// and settings). Idle equals max: with fewer idle connections than in use,
// each burst opens and closes connections, which cost a third of the
// throughput when measured.
var pgPools = [2]struct{ max, idle int }{{max: 5, idle: 5}, {max: 2, idle: 2}}

// sqlAddress is where Temporal's SQL store connects for the server of
// adminURL (parsed as pc): every host the URL names, in its order, and
// its target_session_attrs. Temporal's PostgreSQL plugin writes the
// address into the host part of a URL that pgx parses, so a comma-joined
// list of hosts is pgx's multi-host URL: after a failover its new
// connections find the promoted standby, as idemflow's own pools do,
// instead of dialling the first host for ever.
func sqlAddress(adminURL string, pc *pgconn.Config) (string, map[string]string) {
	var attrs map[string]string
	if _, query, ok := strings.Cut(adminURL, "?"); ok {
		if q, err := url.ParseQuery(query); err == nil && q.Get("target_session_attrs") != "" {
			attrs = map[string]string{"target_session_attrs": q.Get("target_session_attrs")}
		}
	}
	return strings.Join(pgurl.Hosts(pc), ","), attrs
}

// pgStores makes the two databases Temporal needs on the server of
// adminURL, brings their schemas to this server's versions, and returns
// their settings. It holds an advisory lock on the server for as long as
// the returned connection lives: one embedded Temporal per database, so
// that the previous run's cluster members can be pruned as dead.
//
// Behind a pooler that shares sessions between clients (transaction
// pooling) it refuses, naming the fix: the lock is a session's, and
// Temporal's store prepares its statements under names, neither of which
// such a pooler keeps (a second start failed with SQLSTATE 42P05).
func pgStores(ctx context.Context, adminURL, database string) (main, visibility *config.SQL, lock *pgx.Conn, err error) {
	pc, err := pgurl.ParseConfig(adminURL)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("temporal: PostgreSQL URL: %w", err)
	}
	if shared, err := pgurl.SharesSessions(ctx, adminURL); err == nil && shared {
		return nil, nil, nil, ErrSharedSessions
	}
	addr, attrs := sqlAddress(adminURL, &pc.Config)
	stores := make([]*config.SQL, 2)
	for i, name := range []string{database, database + "_visibility"} {
		bound := pgPools[i]
		if _, err := EnsureDatabase(ctx, adminURL, name); err != nil {
			return nil, nil, nil, fmt.Errorf("temporal: %w (or run dev with --temporal-store sqlite)", err)
		}
		stores[i] = &config.SQL{
			PluginName:        pgplugin.PluginNamePGX,
			DatabaseName:      name,
			ConnectAddr:       addr,
			ConnectAttributes: attrs,
			ConnectProtocol:   "tcp",
			User:              pc.User,
			Password:          pc.Password,
			MaxConns:          bound.max,
			MaxIdleConns:      bound.idle,
		}
	}
	lockURL, err := WithDatabase(adminURL, database)
	if err != nil {
		return nil, nil, nil, err
	}
	lock, err = pgurl.Connect(ctx, lockURL)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("temporal: connect to %s: %w", database, err)
	}
	if err := takePgLock(ctx, lock, lockGrace); err != nil {
		lock.Close(context.Background())
		return nil, nil, nil, fmt.Errorf("temporal: database %s: %w", database, err)
	}
	for i, name := range []string{pgSchema, pgVisibilitySchema} {
		if err := ensureSchema(stores[i], name); err != nil {
			lock.Close(context.Background())
			return nil, nil, nil, err
		}
	}
	return stores[0], stores[1], lock, nil
}

// pgLockKey is the advisory lock one embedded Temporal holds on its
// database.
const pgLockKey = "hashtext('idemflow-dev-temporal')"

// lockGrace is how long takePgLock waits for a lock that is held. A
// server that just stopped may still hold it for a moment: a closed
// session's backend exits after its client has gone, and behind a pooler
// in session mode the lock goes only when the pooler resets the server
// connection (DISCARD ALL), after the client closed. A restart within
// that moment found the lock held ("another idemflow dev"), once in a
// fresh-clone run behind PgBouncer.
const lockGrace = 5 * time.Second

// takePgLock takes the advisory lock on conn's session, trying again
// until within has passed while another session holds it.
func takePgLock(ctx context.Context, conn *pgx.Conn, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		var got bool
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock("+pgLockKey+")").Scan(&got); err != nil {
			return err
		}
		if got {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("another idemflow dev runs a Temporal server on it")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// releasePgLock gives the lock back before its session closes, so that it
// is free when Stop returns, whatever stands between (a pooler).
func releasePgLock(ctx context.Context, conn *pgx.Conn) {
	_, _ = conn.Exec(ctx, "SELECT pg_advisory_unlock("+pgLockKey+")")
	_ = conn.Close(ctx)
}

// ensureSchema sets a database's schema up once (version tables at 0.0),
// then applies every versioned update it lacks: a new database gets the
// whole schema, and a module upgrade brings an existing one up to date.
func ensureSchema(cfg *config.SQL, schemaName string) error {
	logger := log.NewNoopLogger()
	conn, err := sqltool.NewConnection(cfg, logger)
	if err != nil {
		return fmt.Errorf("temporal: schema of %s: %w", cfg.DatabaseName, err)
	}
	defer conn.Close()
	if _, err := conn.ReadSchemaVersion(); err != nil {
		if err := schema.NewSetupSchemaTask(conn, &schema.SetupConfig{InitialVersion: "0.0"}, logger).Run(); err != nil {
			return fmt.Errorf("temporal: set up the schema of %s: %w", cfg.DatabaseName, err)
		}
	}
	if err := schema.NewUpdateSchemaTask(conn, &schema.UpdateConfig{DBName: cfg.DatabaseName, SchemaName: schemaName}, logger).Run(); err != nil {
		return fmt.Errorf("temporal: update the schema of %s: %w", cfg.DatabaseName, err)
	}
	return nil
}
