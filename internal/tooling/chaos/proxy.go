package chaos

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemflow/idemflow/internal/tooling/tcpproxy"
)

// Proxy is a loopback TCP proxy (tcpproxy) that injects faults on the
// link it sits on. In front of a gateway (one request per connection, as
// the agents disable keep-alive) it forwards the request and then drops or
// delays the reply; in front of PostgreSQL or Temporal it adds latency.
type Proxy struct {
	*tcpproxy.Proxy

	mu sync.Mutex
	// dropRate: share of connections whose reply is discarded once the
	// server has begun to answer (the server acted; the caller never hears).
	dropRate float64
	// delayRate: share of connections whose reply is held for delay, past
	// the caller's timeout, before it is sent on.
	delayRate float64
	delay     time.Duration
	// latencyRate: share of connections that get latency added to each
	// chunk in both directions.
	latencyRate float64
	latency     time.Duration
	rng         *rand.Rand

	dropped, delayed, slowed atomic.Int64
}

// NewProxy listens on a free loopback port and forwards to target.
func NewProxy(target string, seed uint64) (*Proxy, error) {
	p := &Proxy{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	tp, err := tcpproxy.Listen(target, p.shape)
	if err != nil {
		return nil, err
	}
	p.Proxy = tp
	return p, nil
}

// SetReplyFaults sets the drop and delay rates (0 switches them off).
func (p *Proxy) SetReplyFaults(drop, delayRate float64, delay time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropRate, p.delayRate, p.delay = drop, delayRate, delay
}

// SetLatency sets the share of connections slowed, and by how much.
func (p *Proxy) SetLatency(rate float64, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latencyRate, p.latency = rate, d
}

type plan struct {
	drop, delay bool
	hold, lag   time.Duration
}

func (p *Proxy) plan() plan {
	p.mu.Lock()
	defer p.mu.Unlock()
	var pl plan
	r := p.rng.Float64()
	switch {
	case r < p.dropRate:
		pl.drop = true
	case r < p.dropRate+p.delayRate:
		pl.delay, pl.hold = true, p.delay
	}
	if p.latencyRate > 0 && p.rng.Float64() < p.latencyRate {
		// Jitter between half and the whole latency.
		pl.lag = p.latency/2 + time.Duration(p.rng.Int64N(int64(p.latency/2)+1))
	}
	return pl
}

// shape copies one connection as its plan says; it returns once both
// directions have ended.
func (p *Proxy) shape(client, server net.Conn) {
	pl := p.plan()
	if pl.lag > 0 {
		p.slowed.Add(1)
	}
	done := make(chan struct{}, 2)
	go func() { tcpproxy.CopyLagged(server, client, pl.lag); done <- struct{}{} }()
	go func() {
		switch {
		case pl.drop:
			// Wait for the server to begin its answer, so that it has
			// acted, then hang up on the caller without a word.
			buf := make([]byte, 1)
			if _, err := server.Read(buf); err == nil {
				p.dropped.Add(1)
			}
			client.Close()
			_, _ = io.Copy(io.Discard, server)
		case pl.delay:
			buf := make([]byte, 32<<10)
			n, err := server.Read(buf)
			if err == nil || errors.Is(err, io.EOF) {
				p.delayed.Add(1)
				time.Sleep(pl.hold)
				_, _ = client.Write(buf[:n])
			}
			tcpproxy.CopyLagged(client, server, 0)
		default:
			tcpproxy.CopyLagged(client, server, pl.lag)
		}
		done <- struct{}{}
	}()
	<-done
	<-done
}

// waitDial waits until addr accepts connections, or ctx ends.
func waitDial(ctx context.Context, addr string) error {
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			return c.Close()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
