package tcpproxy_test

import (
	"bufio"
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/idemflow/idemflow/internal/tooling/tcpproxy"
)

// echo serves a line-echo server and returns its address.
func echo(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadBytes('\n')
					if err != nil {
						return
					}
					if _, err := c.Write(line); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(c net.Conn, r *bufio.Reader) error {
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	_, err := r.ReadBytes('\n')
	return err
}

// The link adds its round trip to each exchange, as Measure reports, and
// exchanges in flight at once on one connection each wait it once: a
// delay line, not a queue (gRPC multiplexes every call on one connection).
func TestALinkDelaysEachRoundTripOnceAndOverlapsThem(t *testing.T) {
	target := echo(t)
	const rtt = 20 * time.Millisecond
	l, err := tcpproxy.Listen(target, tcpproxy.DelayLine(rtt))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dial := func(addr string) func(context.Context) error {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		r := bufio.NewReader(c)
		return func(context.Context) error { return roundTrip(c, r) }
	}
	added, err := tcpproxy.Measure(context.Background(), 9, dial(target), dial(l.Addr))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("asked %v, measured %v", rtt, added)
	if added < rtt || added > rtt+15*time.Millisecond {
		t.Errorf("the link added %v per round trip, want about %v", added, rtt)
	}

	// 50 exchanges written at once on one connection come back within a
	// few round trips, not 50.
	c, err := net.Dial("tcp", l.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	start := time.Now()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 50 {
			if _, err := r.ReadBytes('\n'); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for range 50 {
		if _, err := c.Write([]byte("ping\n")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	wg.Wait()
	if took := time.Since(start); took > 50*time.Millisecond+5*rtt {
		t.Errorf("50 overlapping exchanges took %v: the link queues them", took)
	}
}

// A proxy that moves (a failover's virtual IP) hangs up on the
// connections it carried, and the next connection reaches the new
// target.
func TestAMovedProxyCutsItsConnectionsAndReachesTheNewTarget(t *testing.T) {
	second, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	go func() {
		for {
			c, err := second.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("second\n"))
			_ = c.Close()
		}
	}()
	p, err := tcpproxy.Listen(echo(t), tcpproxy.DelayLine(0))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	old, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	r := bufio.NewReader(old)
	if err := roundTrip(old, r); err != nil {
		t.Fatal(err)
	}
	p.Move(second.Addr().String())
	_ = old.SetDeadline(time.Now().Add(5 * time.Second))
	if err := roundTrip(old, r); err == nil {
		t.Fatal("a connection to the old target still works after the move")
	}
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || line != "second\n" {
		t.Fatalf("a new connection after the move read %q, %v; want the new target's greeting", line, err)
	}
}
