package pgurl_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemflow/idemflow/internal/pgurl"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The README recommends ?pool_max_conns=N on DATABASE_URL; a single
// connection from that URL must work too (pgx.Connect sends it to the
// server, which refuses it).
func TestConnectAcceptsPoolParameters(t *testing.T) {
	_, dbURL := testenv.Pool(t)
	sep := "?"
	if strings.Contains(dbURL, "?") {
		sep = "&"
	}
	conn, err := pgurl.Connect(t.Context(), dbURL+sep+"pool_max_conns=20&pool_min_conns=1")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(t.Context())
	if err := conn.Ping(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// A connection idle for seconds is not pinged before use (an agent's
// cadence); one idle past IdlePing, which a middlebox may have dropped, is.
func TestAnIdleConnectionIsPingedOnlyPastIdlePing(t *testing.T) {
	pc, err := pgurl.ParsePoolConfig("postgres://u@127.0.0.1:1/db")
	if err != nil {
		t.Fatal(err)
	}
	for idle, want := range map[time.Duration]bool{2 * time.Second: false, 20 * time.Second: false, pgurl.IdlePing + time.Second: true} {
		if got := pc.ShouldPing(context.Background(), pgxpool.ShouldPingParams{IdleDuration: idle}); got != want {
			t.Errorf("idle %v: ping %v, want %v", idle, got, want)
		}
	}
}
