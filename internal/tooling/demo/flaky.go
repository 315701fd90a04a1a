package demo

import (
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// errResponseLost is what an agent sees when the server did the work and
// the answer never came back.
var errResponseLost = errors.New("connection reset: response lost after the server processed the request")

// flakyTransport forwards every request to the server, then loses a share
// of the answers and delays another share past the client's timeout: the
// network of the incident the demo replays, where a timeout is not a failure.
type flakyTransport struct {
	base     http.RoundTripper
	drop     float64
	delay    float64
	lateBy   time.Duration
	mu       sync.Mutex
	rng      *rand.Rand
	lost     atomic.Int64
	late     atomic.Int64
	requests atomic.Int64
}

func newFlaky(base http.RoundTripper, drop, delay float64, lateBy time.Duration, seed uint64) *flakyTransport {
	return &flakyTransport{base: base, drop: drop, delay: delay, lateBy: lateBy, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

func (f *flakyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	f.requests.Add(1)
	f.mu.Lock()
	roll := f.rng.Float64()
	f.mu.Unlock()
	resp, err := f.base.RoundTrip(req)
	if err != nil || req.Method != http.MethodPost {
		return resp, err
	}
	switch {
	case roll < f.drop:
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		f.lost.Add(1)
		return nil, errResponseLost
	case roll < f.drop+f.delay:
		// The answer arrives after the client stopped waiting.
		f.late.Add(1)
		t := time.NewTimer(f.lateBy)
		defer t.Stop()
		select {
		case <-req.Context().Done():
			resp.Body.Close()
			return nil, req.Context().Err()
		case <-t.C:
		}
	}
	return resp, nil
}
