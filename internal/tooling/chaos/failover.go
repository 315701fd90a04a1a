package chaos

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"strconv"
	"time"

	"github.com/idemflow/idemflow/internal/tooling/devserver"
	"github.com/idemflow/idemflow/internal/tooling/patroni"
	"github.com/idemflow/idemflow/internal/tooling/tcpproxy"
	"github.com/jackc/pgx/v5"
)

// failover is one pg-failover: when the primary was killed, and how many
// bytes of WAL its standby had not flushed just before (what an
// asynchronous standby loses).
type failover struct {
	at     time.Time
	behind int64
	// promoted and rebuilt: how long after at the standby took writes,
	// and the old primary streamed as the new standby.
	promoted, rebuilt time.Duration
}

// startPostgres starts the run's PostgreSQL: a private server, or a
// Patroni cluster (Config.Cluster). It returns a superuser's URL and the
// address every process reaches the primary at (HAProxy's, for Patroni).
func (r *run) startPostgres(ctx context.Context) (adminURL, addr string, err error) {
	if r.cfg.Cluster == ClusterPatroni {
		r.cluster, err = patroni.Start(ctx, patroni.Config{Dir: filepath.Join(r.dir, "patroni"), Async: r.cfg.Replication == ReplicationAsync,
			ReplicationDelay: r.cfg.ReplicationLag, Ports: r.ports.port, Logger: r.log})
		if err != nil {
			return "", "", err
		}
		return r.cluster.HAProxyURL("postgres"), r.cluster.HAProxyAddr(), nil
	}
	port, err := r.ports.port()
	if err != nil {
		return "", "", err
	}
	if r.pg, err = devserver.StartPrivatePostgres(ctx, r.dir, port, r.log); err != nil {
		return "", "", err
	}
	return r.pg.AdminURL, r.pg.Addr(), nil
}

// startReplication gives the primary a streaming standby, over a link
// with Config.ReplicationLag, and puts the address that moves in front of
// the primary.
func (r *run) startReplication(ctx context.Context) error {
	var err error
	if r.replLink, err = tcpproxy.Listen(r.pg.Addr(), tcpproxy.DelayLine(r.cfg.ReplicationLag)); err != nil {
		return err
	}
	port, err := r.ports.port()
	if err != nil {
		return err
	}
	if r.standby, err = r.newStandby(ctx, r.pg, port); err != nil {
		return err
	}
	r.vip, err = tcpproxy.Listen(r.pg.Addr(), tcpproxy.DelayLine(0))
	return err
}

// newStandby makes a standby of primary on port from a fresh base backup,
// streaming over the replication link, and waits until it streams; in
// synchronous mode the primary then waits for it at each commit.
func (r *run) newStandby(ctx context.Context, primary *devserver.Postgres, port int) (*devserver.Postgres, error) {
	r.pgGen++
	s, err := primary.StartStandby(ctx, filepath.Join(r.dir, "pg-"+strconv.Itoa(r.pgGen)), port, standbyName, r.replLink.Addr)
	if err != nil {
		return nil, err
	}
	conn, err := pgx.Connect(ctx, primary.AdminURL)
	if err != nil {
		return s, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	// A synchronous standby counts once it streams; an asynchronous one
	// over a slow link may stay in catch-up under load for long, and is
	// a standby as soon as it receives.
	states := []string{"streaming"}
	if r.cfg.Replication == ReplicationAsync {
		states = append(states, "catchup")
	}
	deadline := time.Now().Add(time.Minute)
	for {
		var streaming bool
		err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_replication WHERE application_name = $1 AND state = ANY($2))`,
			standbyName, states).Scan(&streaming)
		if err == nil && streaming {
			break
		}
		if time.Now().After(deadline) {
			return s, fmt.Errorf("the standby on port %d does not stream (%v)", port, err)
		}
		select {
		case <-ctx.Done():
			return s, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return s, r.replicate(ctx, conn)
}

// replicate sets the primary on conn to the run's mode: synchronous
// (synchronous_standby_names names the standby; synchronous_commit is on
// by default) or asynchronous.
func (r *run) replicate(ctx context.Context, conn *pgx.Conn) error {
	names := ""
	if r.cfg.Replication == ReplicationSync {
		names = standbyName
	}
	if _, err := conn.Exec(ctx, `ALTER SYSTEM SET synchronous_standby_names = '`+names+`'`); err != nil {
		return fmt.Errorf("set synchronous_standby_names: %w", err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_reload_conf()`); err != nil {
		return fmt.Errorf("reload: %w", err)
	}
	return nil
}

// failover kills the primary with all its backends, promotes the standby,
// moves the address everyone reaches PostgreSQL at to it, and rebuilds
// the old primary as its standby, waiting until it streams: the next
// failover has a standby to promote.
func (r *run) failover(ctx context.Context) error {
	old, next := r.pg, r.standby
	var behind int64
	if conn, err := pgx.Connect(ctx, old.AdminURL); err == nil {
		_ = conn.QueryRow(ctx, `SELECT coalesce(max(pg_wal_lsn_diff(pg_current_wal_lsn(), flush_lsn)), 0)::bigint
			FROM pg_stat_replication WHERE application_name = $1`, standbyName).Scan(&behind)
		conn.Close(ctx)
	}
	at := time.Now()
	// The machine goes with its link: WAL still on the wire to the
	// standby is lost, not delivered after the crash.
	r.replLink.Cut()
	if err := old.Kill(); err != nil {
		return err
	}
	if err := next.Promote(ctx); err != nil {
		return err
	}
	promoted := time.Since(at)
	conn, err := pgx.Connect(ctx, next.AdminURL)
	if err != nil {
		return err
	}
	// Synchronous at once, before it has a standby: no commit is
	// acknowledged from this machine alone. They wait for the rebuild.
	err = r.replicate(ctx, conn)
	conn.Close(ctx)
	if err != nil {
		return err
	}
	r.vip.Move(next.Addr())
	r.replLink.Move(next.Addr())
	r.admin.Reset()
	r.pg, r.standby = next, nil
	r.faultMu.Lock()
	r.failovers = append(r.failovers, failover{at: at, behind: behind, promoted: promoted})
	r.faultMu.Unlock()
	if err := old.RemoveData(); err != nil {
		return err
	}
	if r.standby, err = r.newStandby(ctx, next, old.Port()); err != nil {
		return fmt.Errorf("rebuild the old primary as the new one's standby: %w", err)
	}
	r.faultMu.Lock()
	r.failovers[len(r.failovers)-1].rebuilt = time.Since(at)
	r.faultMu.Unlock()
	return nil
}

// patroniFailover SIGKILLs the Patroni cluster's leader with every
// backend and its links, waits for Patroni to elect another (HAProxy
// follows its checks), then starts the killed member again and waits
// until it is a standby (in synchronous mode, until a synchronous standby
// is back, without which no commit finishes).
func (r *run) patroniFailover(ctx context.Context) error {
	var behind int64
	_ = r.admin.QueryRow(ctx, `SELECT coalesce(max(pg_wal_lsn_diff(pg_current_wal_lsn(), flush_lsn)), 0)::bigint
		FROM pg_stat_replication`).Scan(&behind)
	at := time.Now()
	killed, err := r.cluster.KillLeader(ctx)
	if err != nil {
		return err
	}
	if _, err := r.cluster.Leader(ctx, 2*time.Minute, killed); err != nil {
		return err
	}
	promoted := time.Since(at)
	r.admin.Reset()
	r.faultMu.Lock()
	r.failovers = append(r.failovers, failover{at: at, behind: behind, promoted: promoted})
	r.faultMu.Unlock()
	if err := r.cluster.Restart(ctx, killed); err != nil {
		return err
	}
	if err := r.cluster.WaitHealthy(ctx, 2*time.Minute); err != nil {
		return fmt.Errorf("the killed leader %s did not rejoin: %w", killed, err)
	}
	r.faultMu.Lock()
	r.failovers[len(r.failovers)-1].rebuilt = time.Since(at)
	r.faultMu.Unlock()
	return nil
}

// lostBefore is how long before the next failover an answer given at was
// lost (ok false when no failover followed it).
func (r *run) lostBefore(at time.Time) (time.Duration, bool) {
	r.faultMu.Lock()
	defer r.faultMu.Unlock()
	for _, f := range r.failovers {
		if !f.at.Before(at) {
			return f.at.Sub(at), true
		}
	}
	return 0, false
}

// withHost is dbURL with its host and port replaced by addr.
func withHost(dbURL, addr string) (string, error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return "", err
	}
	u.Host = addr
	return u.String(), nil
}
