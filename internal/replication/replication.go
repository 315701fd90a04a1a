// Package replication says whether the PostgreSQL idemflow writes to would
// keep an acknowledged commit across a failover: its streaming standbys,
// whether they are synchronous, and synchronous_commit. An answer idemflow
// acknowledged (a 201, a stored replay) rests on a commit; a standby
// promoted before that commit reached it has neither the row nor the
// record, and the agent's retry executes again.
package replication

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Querier is what Check reads through: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Standby is one streaming standby, as the primary sees it
// (pg_stat_replication).
type Standby struct {
	// Name is its application_name.
	Name string
	// State is the WAL sender's (streaming, catchup, ...).
	State string
	// Sync is its sync_state: async, potential, sync or quorum. Empty when
	// the role idemflow connects as may not read it (grant pg_monitor).
	Sync string
}

// Synchronous reports whether a commit waits for this standby (or for a
// quorum it is part of) when synchronous_commit asks it to.
func (s Standby) Synchronous() bool { return s.Sync == "sync" || s.Sync == "quorum" }

// Report is what Check found.
type Report struct {
	// Standbys are the streaming standbys connected now.
	Standbys []Standby
	// SynchronousCommit and SynchronousStandbyNames are the settings of
	// idemflow's session.
	SynchronousCommit       string
	SynchronousStandbyNames string
}

// Safe reports whether a commit idemflow acknowledged survives the
// promotion of a standby: there is a synchronous one, and commits wait
// for it. Without standbys it is false too: nothing could be promoted.
func (r Report) Safe() bool {
	waits := r.SynchronousCommit == "on" || r.SynchronousCommit == "remote_apply" || r.SynchronousCommit == "remote_write"
	for _, s := range r.Standbys {
		if s.Synchronous() && waits {
			return true
		}
	}
	return false
}

// Warning is what an operator must be told, or "" when there is nothing
// to say: standbys exist, and a failover to one can lose commits idemflow
// acknowledged. A server without standbys gets no warning: its commits
// are as durable as its disk, and a failover is a restore.
func (r Report) Warning() string {
	if len(r.Standbys) == 0 || r.Safe() {
		return ""
	}
	names := make([]string, len(r.Standbys))
	for i, s := range r.Standbys {
		names[i] = fmt.Sprintf("%s (%s)", s.Name, orUnknown(s.Sync))
	}
	why := "no standby is synchronous (synchronous_standby_names is " + orEmpty(r.SynchronousStandbyNames) + ")"
	for _, s := range r.Standbys {
		if s.Synchronous() {
			why = "synchronous_commit is " + r.SynchronousCommit + ", so a commit does not wait for the synchronous standby"
		}
	}
	return "a failover can lose answers idemflow acknowledged: " + why + "; standbys: " + strings.Join(names, ", ") +
		". A promoted standby would lack their rows and records, and an agent's retry would execute again. Name the standbys in synchronous_standby_names, with synchronous_commit on or remote_apply"
}

// Blocked is why no commit can finish, or "" when commits are not
// waiting for a standby that is not there: synchronous_standby_names is
// set, commits wait for it (synchronous_commit on, remote_write or
// remote_apply), and no standby attached is synchronous, so every commit,
// an intent's claim first, waits with no deadline (wait_event SyncRep).
// A promoted standby that kept the old primary's setting does this. A
// standby whose sync state the role may not read (grant pg_monitor) is
// given the benefit of the doubt.
func (r Report) Blocked() string {
	waits := r.SynchronousCommit == "on" || r.SynchronousCommit == "remote_apply" || r.SynchronousCommit == "remote_write"
	if r.SynchronousStandbyNames == "" || !waits {
		return ""
	}
	for _, s := range r.Standbys {
		if s.Synchronous() || s.Sync == "" {
			return ""
		}
	}
	return fmt.Sprintf("commits wait for a synchronous standby that is not there: synchronous_standby_names is %q with synchronous_commit %s, "+
		"and %d standbys attached, none synchronous, so no intent can be recorded; attach the standby, or clear synchronous_standby_names",
		r.SynchronousStandbyNames, r.SynchronousCommit, len(r.Standbys))
}

// Summary is one line for a log or audit: the standbys and the settings.
func (r Report) Summary() string {
	if len(r.Standbys) == 0 {
		return "no streaming standby (synchronous_commit " + r.SynchronousCommit + ")"
	}
	var sync, async int
	for _, s := range r.Standbys {
		if s.Synchronous() {
			sync++
		} else {
			async++
		}
	}
	return fmt.Sprintf("%d synchronous and %d asynchronous standbys (synchronous_commit %s, synchronous_standby_names %s)",
		sync, async, r.SynchronousCommit, orEmpty(r.SynchronousStandbyNames))
}

// Check reads the replication of the server q is connected to.
func Check(ctx context.Context, q Querier) (Report, error) {
	var r Report
	if err := q.QueryRow(ctx, `SELECT current_setting('synchronous_commit'), current_setting('synchronous_standby_names')`).
		Scan(&r.SynchronousCommit, &r.SynchronousStandbyNames); err != nil {
		return r, fmt.Errorf("replication settings: %w", err)
	}
	rows, err := q.Query(ctx, `SELECT coalesce(application_name, ''), coalesce(state, ''), coalesce(sync_state, '')
		FROM pg_stat_replication ORDER BY application_name`)
	if err != nil {
		return r, fmt.Errorf("replication standbys: %w", err)
	}
	r.Standbys, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Standby, error) {
		var s Standby
		return s, row.Scan(&s.Name, &s.State, &s.Sync)
	})
	if err != nil {
		return r, fmt.Errorf("replication standbys: %w", err)
	}
	return r, nil
}

func orUnknown(s string) string {
	if s == "" {
		return "sync state unknown: grant pg_monitor"
	}
	return s
}

func orEmpty(s string) string {
	if s == "" {
		return "empty"
	}
	return s
}

// CommitsBlocked reads whether no commit can finish on q now (Blocked),
// for a gauge read at each scrape.
func CommitsBlocked(q Querier) func(ctx context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		r, err := Check(ctx, q)
		return r.Blocked() != "", err
	}
}
