package pgurl_test

import (
	"strings"
	"testing"

	"github.com/idemflow/idemflow/internal/pgurl"
	"github.com/idemflow/idemflow/internal/testenv"
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
