// Package pgurl opens PostgreSQL connections from the URLs idemflow
// documents. Its one job: a URL that works for the pool works everywhere,
// with the session settings idemflow depends on pinned, and a pool built
// from it hands out only connections whose server has not ended them.
// pgxpool takes its own parameters (pool_max_conns and the other pool_*)
// out of the URL, while pgx.Connect sends every parameter it does not know
// to the server as a run-time setting, which the server refuses
// ("unrecognized configuration parameter"). So every single connection
// (LISTEN, migrations, the commands, the dev server's set-up) parses its
// URL as the pool does.
package pgurl

import (
	"context"
	"net"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ParsePoolConfig parses url for a pool, with the session settings
// idemflow's statements depend on pinned (see pinned).
func ParsePoolConfig(url string) (*pgxpool.Config, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	for _, p := range pinned {
		pc.ConnConfig.RuntimeParams[p.name] = p.value
	}
	if !strings.Contains(url, "default_query_exec_mode") {
		pc.ConnConfig.DefaultQueryExecMode = DefaultQueryExecMode
	}
	pc.ShouldPing = shouldPing
	pc.PrepareConn = prepareConn
	return pc, nil
}

// DefaultQueryExecMode is how statements run unless the URL names its own
// default_query_exec_mode: their descriptions cached per connection, each
// run as one unnamed statement. pgx's own default prepares every statement
// under a name on the server, which a connection pooler breaks: behind
// PgBouncer in transaction pooling (most hosted PostgreSQL, RDS Proxy), a
// restarted process or another replica found server connections that had
// prepared the same names, and every statement failed (SQLSTATE 42P05).
// An unnamed statement lives only until the next one, on whichever server
// connection runs it. The cost is a parse per statement on the server:
// BenchmarkQueryExecMode (internal/gateway) put a new ticket within this
// machine's noise of pgx's default and a replay (about 50 µs) a few
// microseconds slower.
const DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe

// IdlePing is how long a pooled connection may sit idle before it is
// pinged when acquired. pgxpool's default, 1 s, pinged before nearly every
// intent of an agent that calls tools seconds apart: a round trip on the
// request's path. A connection the server ended is found without one
// (prepareConn); one that dies between that look and its statement is
// replaced and the statement sent again, where that is safe
// (idem.Store.Claim). Past IdlePing, when a middlebox may have dropped it
// without a word, the ping stays.
const IdlePing = 30 * time.Second

func shouldPing(_ context.Context, p pgxpool.ShouldPingParams) bool { return p.IdleDuration > IdlePing }

// pinned are the session settings every idemflow connection asks for at
// start-up, whatever the database, its role or the URL set: the execution's
// one-statement open inlines values with pgconn's EscapeString, which
// refuses to run unless strings are standard-conforming and the client
// encoding is UTF8. A database with standard_conforming_strings = off, or
// one created SQL_ASCII (whose client encoding follows it), would
// otherwise fail every execution as retryable, and leave its intents
// PROCESSING until they gave up.
var pinned = [...]struct{ name, value string }{
	{"standard_conforming_strings", "on"},
	{"client_encoding", "UTF8"},
}

// ParseConfig parses url as ParsePoolConfig does and returns the settings
// of one connection.
func ParseConfig(url string) (*pgx.ConnConfig, error) {
	pc, err := ParsePoolConfig(url)
	if err != nil {
		return nil, err
	}
	return pc.ConnConfig, nil
}

// Connect opens one connection to url, which may carry pool parameters.
func Connect(ctx context.Context, url string) (*pgx.Conn, error) {
	cc, err := ParseConfig(url)
	if err != nil {
		return nil, err
	}
	return pgx.ConnectConfig(ctx, cc)
}

// AnyHost reports whether cfg names more than one server and lets a
// connection stay on whichever of them accepts it first: pgx's default
// target_session_attrs (any), or one that prefers or wants a standby. A
// standby named in the URL, or the old primary rebuilt as one after a
// failover, then takes connections on which every write fails (SQLSTATE
// 25006). target_session_attrs=read-write or primary keeps them on the
// primary. One host is never at risk: sslmode=prefer's second try is the
// same server.
func AnyHost(cfg *pgx.ConnConfig) bool {
	if v := cfg.ValidateConnect; v != nil {
		p := reflect.ValueOf(v).Pointer()
		if p == reflect.ValueOf(pgconn.ValidateConnectTargetSessionAttrsReadWrite).Pointer() ||
			p == reflect.ValueOf(pgconn.ValidateConnectTargetSessionAttrsPrimary).Pointer() {
			return false
		}
	}
	return len(Hosts(&cfg.Config)) > 1
}

// Hosts are the servers cfg names, as host:port, in the URL's order and
// each once: pgx also adds a fallback per host for each TLS mode it may
// try (sslmode=prefer), which names no other server.
func Hosts(cfg *pgconn.Config) []string {
	hosts := []string{net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))}
	for _, f := range cfg.Fallbacks {
		if h := net.JoinHostPort(f.Host, strconv.Itoa(int(f.Port))); !slices.Contains(hosts, h) {
			hosts = append(hosts, h)
		}
	}
	return hosts
}

// SharesSessions reports whether the server behind url shares its
// sessions between clients during their lives: a pooler in transaction
// (or statement) pooling, such as PgBouncer's or RDS Proxy's. What
// outlives a transaction there (LISTEN, a session's advisory lock) lands
// on a server connection the client no longer holds.
//
// It opens two connections: the second begins a transaction while the
// first is idle between its statements. A server of its own per client
// (PostgreSQL itself, session pooling) gives them different backends and
// the first the same backend throughout; a transaction pooler hands the
// second the backend the first just released (PgBouncer reuses the last
// released server connection first), or the first another one.
func SharesSessions(ctx context.Context, url string) (bool, error) {
	a, err := Connect(ctx, url)
	if err != nil {
		return false, err
	}
	defer a.Close(context.WithoutCancel(ctx))
	b, err := Connect(ctx, url)
	if err != nil {
		return false, err
	}
	defer b.Close(context.WithoutCancel(ctx))
	const pid = `SELECT pg_backend_pid()`
	var first, other, again int
	if err := a.QueryRow(ctx, pid).Scan(&first); err != nil {
		return false, err
	}
	tx, err := b.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read only
	if err := tx.QueryRow(ctx, pid).Scan(&other); err != nil {
		return false, err
	}
	if err := a.QueryRow(ctx, pid).Scan(&again); err != nil {
		return false, err
	}
	return other == first || again != first, nil
}
