package devserver

import (
	"testing"

	"github.com/idemflow/idemflow/internal/pgurl"
)

// The embedded Temporal store took the first host of a multi-host URL and
// dropped the others and target_session_attrs: after a failover it dialled
// the dead primary for ever (issue #55). Its address now names every host,
// in order, once, with the URL's target_session_attrs.
func TestTheTemporalStoreKeepsEveryHostOfTheURL(t *testing.T) {
	for _, c := range []struct {
		url, addr, attrs string
	}{
		{"postgres://u@a:5432,b:5433/db?target_session_attrs=read-write&sslmode=prefer", "a:5432,b:5433", "read-write"},
		{"postgres://u@a:5432,b:5433/db?sslmode=disable", "a:5432,b:5433", ""},
		{"postgres://u@127.0.0.1:54349/db?sslmode=disable", "127.0.0.1:54349", ""},
	} {
		pc, err := pgurl.ParseConfig(c.url)
		if err != nil {
			t.Fatal(err)
		}
		addr, attrs := sqlAddress(c.url, &pc.Config)
		if addr != c.addr || attrs["target_session_attrs"] != c.attrs {
			t.Errorf("%s: address %q, attributes %v; want %q and target_session_attrs %q", c.url, addr, attrs, c.addr, c.attrs)
		}
	}
}
