package patroni_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemflow/idemflow/internal/tooling/devserver"
	"github.com/idemflow/idemflow/internal/tooling/patroni"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
)

// On a Patroni cluster in synchronous mode strict (Debian's patroni and
// etcd, three members), reached through its multi-host URL and through
// HAProxy at once, under load: the leader SIGKILLed with every backend,
// the killed member started again, a switchover, and another leader
// SIGKILLed. No process of idemflow is restarted. Every intent an agent
// was answered 201 has its one ticket on the last leader and replays its
// first answer; none is left PROCESSING.
func TestAPatroniClusterLosesNoAcknowledgedIntentAcrossFailovers(t *testing.T) {
	ctx := context.Background()
	c := startCluster(t, patroni.Config{})
	routes := []route{{name: "multi-host", url: c.MultiHostURL("postgres")}, {name: "haproxy", url: c.HAProxyURL("postgres")}}
	for i := range routes {
		routes[i].stack = testenv.NewStack(t, testenv.Options{Database: testenv.Setup{Server: routes[i].url}})
	}
	load := startLoad(routes)

	pause := func() { time.Sleep(3 * time.Second) }
	pause()
	for round := range 2 {
		killed := killLeader(t, c)
		if err := c.Restart(ctx, killed); err != nil {
			t.Fatal(err)
		}
		if err := c.WaitHealthy(ctx, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
		pause()
		if round == 0 {
			to, err := c.Switchover(ctx)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("switched over to %s", to)
			if err := c.WaitHealthy(ctx, 2*time.Minute); err != nil {
				t.Fatal(err)
			}
			pause()
		}
	}
	load.finish(t)
	for _, r := range routes {
		rep := check(t, r, load)
		t.Logf("%s: %s", r.name, rep)
		if rep.acked == 0 || rep.lost != 0 || rep.badReplays != 0 || rep.processing != 0 || rep.unfinished != 0 {
			t.Errorf("%s: %s; want every acknowledged intent kept, replayed as first answered, none PROCESSING or unfinished", r.name, rep)
		}
	}
}

// The control: the same cluster with Patroni's synchronous mode off and
// 300 ms on its replication links, a leader SIGKILLed under load. Commits
// acknowledged before a standby had them are gone from the new leader,
// and the check says so: it can fail.
func TestAnAsynchronousPatroniClusterLosesAcknowledgedIntentsAndTheCheckSaysSo(t *testing.T) {
	c := startCluster(t, patroni.Config{Async: true, ReplicationDelay: 300 * time.Millisecond})
	routes := []route{{name: "multi-host", url: c.MultiHostURL("postgres")}}
	routes[0].stack = testenv.NewStack(t, testenv.Options{Database: testenv.Setup{Server: routes[0].url}})
	load := startLoad(routes)
	time.Sleep(3 * time.Second)
	killLeader(t, c)
	time.Sleep(3 * time.Second)
	load.finish(t)
	rep := check(t, routes[0], load)
	t.Logf("asynchronous: %s", rep)
	if rep.lost == 0 {
		t.Fatalf("the asynchronous control lost no acknowledged intent (%s): the check proved nothing", rep)
	}
}

// killLeader SIGKILLs the leader and waits for another to lead; it names
// the member killed.
func killLeader(t *testing.T, c *patroni.Cluster) string {
	t.Helper()
	ctx := context.Background()
	killed, err := c.KillLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leader, err := c.Leader(ctx, time.Minute, killed)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("SIGKILLed leader %s; %s leads", killed, leader)
	return killed
}

func startCluster(t *testing.T, cfg patroni.Config) *patroni.Cluster {
	t.Helper()
	cfg.Dir = t.TempDir()
	cfg.Ports = func() (int, error) { return testenv.FreePort(t), nil }
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := patroni.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}

// route is one way to the cluster, with a stack on it.
type route struct {
	name, url string
	stack     *testenv.Stack
}

// load is agents creating tickets through every route: each key is sent
// until it is answered 201 (the same key after an error or a 503, as an
// agent retries), then the next. acked holds each key's first 201.
type load struct {
	stop  context.CancelFunc
	wg    sync.WaitGroup
	mu    sync.Mutex
	acked map[string]map[string]ack // route -> key -> its first 201
	open  map[string]int            // route -> keys never answered 201
}

// ack is an intent an agent was answered 201, and that answer.
type ack struct {
	req   testenv.Request
	first []byte
}

const agentsPerRoute = 6

func startLoad(routes []route) *load {
	ctx, stop := context.WithCancel(context.Background())
	l := &load{stop: stop, acked: map[string]map[string]ack{}, open: map[string]int{}}
	for _, r := range routes {
		l.acked[r.name] = map[string]ack{}
		tok := r.stack.Tokens[testenv.TenantA]
		for a := range agentsPerRoute {
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				for i := 0; ctx.Err() == nil; i++ {
					key := fmt.Sprintf("%s-%d-%d", r.name, a, i)
					req := testenv.Request{Path: "/v1/tickets", Token: tok, Key: key,
						Body: fmt.Sprintf(`{"customer_id":"c-%d","title":"%s"}`, a, key)}
					// An intent begun is retried to its end, past the
					// load's stop: the agent holds its key.
					answered := false
					for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
						resp, err := testenv.Send(r.stack.URL, req)
						if err == nil && resp.Status == 201 {
							l.mu.Lock()
							l.acked[r.name][key] = ack{req: req, first: resp.Body}
							l.mu.Unlock()
							answered = true
							break
						}
					}
					if !answered {
						l.mu.Lock()
						l.open[r.name]++
						l.mu.Unlock()
					}
				}
			}()
		}
	}
	return l
}

// finish stops the agents taking new keys and waits for the ones they
// hold.
func (l *load) finish(t *testing.T) {
	l.stop()
	done := make(chan struct{})
	go func() { l.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Minute):
		t.Fatal("the agents' last intents did not end within 3 minutes")
	}
}

// report is what the check found on one route.
type report struct {
	acked, lost, badReplays, processing, unfinished int
	lostKeys                                        []string // the first ten
}

func (r report) String() string {
	return fmt.Sprintf("%d acknowledged, %d lost %v, %d replays not their first answer, %d PROCESSING, %d never answered",
		r.acked, r.lost, r.lostKeys, r.badReplays, r.processing, r.unfinished)
}

// check compares what the agents were answered with what the leader
// holds now: each acknowledged key's ticket (a key without one is lost;
// the unique key makes two impossible), its replay (the first answer,
// byte for byte), and the records left PROCESSING.
func check(t *testing.T, r route, l *load) report {
	t.Helper()
	s := r.stack
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rows, err := s.Pool.Query(ctx, `SELECT idem_key FROM ticket WHERE tenant_id = $1`, testenv.TenantA)
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		have[k] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rep := report{acked: len(l.acked[r.name]), unfinished: l.open[r.name]}
	for key, a := range l.acked[r.name] {
		if !have[key] {
			// Not replayed: a replay of a lost intent would execute it
			// again, and hide the loss.
			rep.lost++
			if len(rep.lostKeys) < 10 {
				rep.lostKeys = append(rep.lostKeys, key)
			}
			continue
		}
		resp, err := testenv.Send(s.URL, a.req)
		if err != nil || resp.Status != 201 || resp.Header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(resp.Body, a.first) {
			rep.badReplays++
		}
	}
	if err := s.Pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_record WHERE status = 'PROCESSING'`).Scan(&rep.processing); err != nil {
		t.Fatal(err)
	}
	return rep
}

// TestMain lets the test binary be a program that starts a cluster in
// the directory its one argument names, and holds it until killed.
func TestMain(m *testing.M) {
	testenv.Main(m, func(ctx context.Context, args []string, stdout, _ io.Writer) int {
		c, err := patroni.Start(ctx, patroni.Config{Dir: args[0], Ports: devserver.FreePort})
		if err != nil {
			fmt.Fprintln(stdout, err)
			return 1
		}
		fmt.Fprintln(stdout, "cluster up:", c.HAProxyAddr())
		<-ctx.Done()
		c.Stop()
		return 0
	})
}

// A cluster whose program is SIGKILLed, so that Stop never runs, does not
// outlive it: no member, no PostgreSQL, no etcd or HAProxy is left
// running. (chaos --pg-cluster patroni killed mid teardown left etcd, a
// member and its PostgreSQL serving with nobody to stop them.)
func TestAClusterDiesWithTheProgramThatStartedIt(t *testing.T) {
	dir := t.TempDir()
	child := testenv.StartChild(t, nil, "cluster up:", dir)
	child.WaitUp(t, 3*time.Minute)
	if n := len(testenv.ProcessesNaming(dir)); n < 8 {
		t.Fatalf("only %d processes name %s: the check below would miss what it looks for", n, dir)
	}
	_ = child.Cmd.Process.Kill()
	<-child.Done
	if left := testenv.Survivors(dir, time.Minute); len(left) > 0 {
		t.Fatalf("a minute after its program was SIGKILLed, the cluster still runs:\n%s", strings.Join(left, "\n"))
	}
}
