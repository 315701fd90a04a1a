// Package netdelay is a loopback TCP proxy that delays every byte by a
// fixed time in each direction, as a network link does, so that a
// benchmark on one machine sees what each round trip to PostgreSQL or
// Temporal costs across a network.
//
// It is a delay line, not a throttle: each chunk is due a fixed time after
// it was read and chunks in flight overlap, so many requests multiplexed on
// one connection (gRPC) are each delayed once, not queued behind each
// other's delay.
package netdelay

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"
)

// Link forwards connections from Addr to a target, delaying each direction
// by half the round trip it was made with.
type Link struct {
	// Addr is where the link listens (loopback).
	Addr   string
	target string
	oneWay time.Duration
	ln     net.Listener
	wg     sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

// Listen opens a link to target that adds rtt to every round trip.
func Listen(target string, rtt time.Duration) (*Link, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	l := &Link{Addr: ln.Addr().String(), target: target, oneWay: rtt / 2, ln: ln, conns: map[net.Conn]struct{}{}}
	l.wg.Add(1)
	go l.serve()
	return l, nil
}

// Close stops the link and the connections through it.
func (l *Link) Close() error {
	err := l.ln.Close()
	l.mu.Lock()
	for c := range l.conns {
		_ = c.Close()
	}
	l.mu.Unlock()
	l.wg.Wait()
	return err
}

func (l *Link) serve() {
	defer l.wg.Done()
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.handle(c)
		}()
	}
}

func (l *Link) track(c net.Conn, on bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if on {
		l.conns[c] = struct{}{}
	} else {
		delete(l.conns, c)
	}
}

func (l *Link) handle(client net.Conn) {
	server, err := net.DialTimeout("tcp", l.target, 5*time.Second)
	if err != nil {
		_ = client.Close()
		return
	}
	l.track(client, true)
	l.track(server, true)
	defer func() {
		l.track(client, false)
		l.track(server, false)
		_ = client.Close()
		_ = server.Close()
	}()
	done := make(chan struct{}, 2)
	go func() { delayCopy(server, client, l.oneWay); done <- struct{}{} }()
	go func() { delayCopy(client, server, l.oneWay); done <- struct{}{} }()
	<-done
	// One side hung up: so does the other, as a peer across a network
	// would see it.
	_ = client.Close()
	_ = server.Close()
	<-done
}

type chunk struct {
	b   []byte
	due time.Time
}

// delayCopy copies src to dst, each chunk written d after it was read.
func delayCopy(dst, src net.Conn, d time.Duration) {
	line := make(chan chunk, 4096)
	go func() {
		defer close(line)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				line <- chunk{b: buf[:n], due: time.Now().Add(d)}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range line {
		if wait := time.Until(c.due); wait > 0 {
			time.Sleep(wait)
		}
		if _, err := dst.Write(c.b); err != nil {
			// Drain, so that the reader ends when src closes.
			for range line {
			}
			return
		}
	}
	if tc, ok := dst.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}

// Measure times n round trips made by ping, directly and through the
// link (both as the caller sets them up), and returns the median added
// round-trip time: what the link really costs, which can exceed what it
// was asked for (a Go timer here sleeps at least about a millisecond).
func Measure(ctx context.Context, n int, direct, linked func(context.Context) error) (time.Duration, error) {
	med := func(ping func(context.Context) error) (time.Duration, error) {
		var took []time.Duration
		for range max(n, 1) {
			t0 := time.Now()
			if err := ping(ctx); err != nil {
				return 0, err
			}
			took = append(took, time.Since(t0))
		}
		return median(took), nil
	}
	d, err := med(direct)
	if err != nil {
		return 0, fmt.Errorf("direct: %w", err)
	}
	l, err := med(linked)
	if err != nil {
		return 0, fmt.Errorf("through the link: %w", err)
	}
	return max(l-d, 0), nil
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
