//go:build !nodev

package cli

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/internal/tooling/roundtrip"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
)

// The bench's network mode takes the database URL the README recommends,
// pool_max_conns included: its single connections (the links' measures)
// must parse it as the pool does (pgurl), not send it to the server as a
// setting. The replica it starts behind the links then answers.
func TestTheDelayedReplicaTakesAPoolURL(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{NoWorker: true})
	sep := "?"
	if strings.Contains(s.DatabaseURL, "?") {
		sep = "&"
	}
	env := &Env{Stdout: io.Discard, Stderr: io.Discard, Logger: s.Logger, Set: s.Set}
	c := common{databaseURL: s.DatabaseURL + sep + "pool_max_conns=8", temporal: s.Server.GetFrontendHostPort(),
		namespace: s.Server.GetDefaultNamespace(), retention: durationFlag(idem.DefaultRetention)}
	c.sql, c.rpcs = &roundtrip.SQL{}, &roundtrip.RPCs{}
	d, err := delayedReplica(context.Background(), env, c, time.Millisecond, time.Millisecond, s.Temporal, &roundtrip.RPCs{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	if len(d.links) != 2 || d.links[0].Measured <= 0 {
		t.Errorf("links %+v", d.links)
	}
	if r := testenv.Do(t, d.url, testenv.Request{Method: "GET", Path: "/v1/tenant", Token: s.Tokens[testenv.TenantA]}); r.Status != 200 {
		t.Fatalf("the replica: %d %s", r.Status, r.Body)
	}
	// Its round trips are counted, for the report (bench.Config.SQL).
	sql0, rpcs0 := c.sql.Total(), c.rpcs.Total()
	if r := testenv.Do(t, d.url, testenv.Request{Path: "/v1/tickets", Token: s.Tokens[testenv.TenantA], Key: "replica-1",
		Body: `{"customer_id":"c-1","title":"Through the links"}`}); r.Status != 201 {
		t.Fatalf("the replica: %d %s", r.Status, r.Body)
	}
	if c.sql.Total() == sql0 || c.rpcs.Total() == rpcs0 {
		t.Errorf("the replica's round trips were not counted: SQL %d→%d, RPCs %d→%d", sql0, c.sql.Total(), rpcs0, c.rpcs.Total())
	}
}
