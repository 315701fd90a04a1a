package tcpproxy

import (
	"context"
	"fmt"
	"net"
	"slices"
	"time"
)

// DelayLine is the Shaper of a link that adds rtt to every round trip:
// each direction delays every byte by half of it.
//
// It is a delay line, not a throttle: each chunk is due a fixed time after
// it was read and chunks in flight overlap, so many requests multiplexed on
// one connection (gRPC) are each delayed once, not queued behind each
// other's delay.
func DelayLine(rtt time.Duration) Shaper {
	return func(client, server net.Conn) {
		Both(client, server, func() { delayCopy(server, client, rtt/2) }, func() { delayCopy(client, server, rtt/2) })
	}
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
	CloseWrite(dst)
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
