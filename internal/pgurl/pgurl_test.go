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

// A DATABASE_URL that names a primary and its standbys must keep its
// connections on the primary (target_session_attrs=read-write or
// primary): otherwise one may stay on a standby, where every write
// fails, and the roles warn at start.
func TestAnyHostNamesAMultiHostURLThatMayLandOnAStandby(t *testing.T) {
	for u, want := range map[string]bool{
		"postgres://u@a:5432,b:5432/db":                                        true,
		"postgres://u@a:5432,b:5432/db?target_session_attrs=any":               true,
		"postgres://u@a:5432,b:5432/db?target_session_attrs=prefer-standby":    true,
		"postgres://u@a:5432,b:5432/db?target_session_attrs=read-write":        false,
		"postgres://u@a:5432,b:5432/db?target_session_attrs=primary":           false,
		"host=a,b port=5432,5433 dbname=db":                                    true,
		"host=a,b port=5432,5433 dbname=db target_session_attrs=read-write":    false,
		"postgres://u@a:5432/db":                                               false, // sslmode=prefer tries a twice
		"postgres://u@a:5432/db?sslmode=disable":                               false,
		"postgres://u@a:5432/db?target_session_attrs=standby&pool_max_conns=4": false,
	} {
		cfg, err := pgurl.ParseConfig(u)
		if err != nil {
			t.Fatalf("%s: %v", u, err)
		}
		if got := pgurl.AnyHost(cfg); got != want {
			t.Errorf("%s: AnyHost %v, want %v", u, got, want)
		}
	}
}
