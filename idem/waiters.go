package idem

import "sync"

// Waiters wakes requests waiting for an intent in the process where its
// record was settled. When the worker that completes an intent runs beside
// the gateway (serve, dev), the waiting request learns of the commit at
// once, instead of through Temporal's history long poll; it then reads the
// record, which stays the only source of the answer. Requests in other
// processes never hear of it and wait on the run as before.
type Waiters struct {
	mu sync.Mutex
	m  map[waitKey][]chan struct{}
}

type waitKey struct{ tenantID, key string }

// Wait returns a channel closed when (tenantID, key) is next settled here,
// and a function to call when no longer waiting.
func (w *Waiters) Wait(tenantID, key string) (<-chan struct{}, func()) {
	if w == nil {
		return nil, func() {}
	}
	ch := make(chan struct{})
	k := waitKey{tenantID, key}
	w.mu.Lock()
	if w.m == nil {
		w.m = map[waitKey][]chan struct{}{}
	}
	w.m[k] = append(w.m[k], ch)
	w.mu.Unlock()
	return ch, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		chans := w.m[k]
		for i, c := range chans {
			if c == ch {
				chans = append(chans[:i], chans[i+1:]...)
				break
			}
		}
		if len(chans) == 0 {
			delete(w.m, k)
		} else {
			w.m[k] = chans
		}
	}
}

// Settled wakes everyone waiting for (tenantID, key). Call it after the
// transaction that settled the record committed.
func (w *Waiters) Settled(tenantID, key string) {
	if w == nil {
		return
	}
	k := waitKey{tenantID, key}
	w.mu.Lock()
	chans := w.m[k]
	delete(w.m, k)
	w.mu.Unlock()
	for _, c := range chans {
		close(c)
	}
}
