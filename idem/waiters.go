package idem

import "sync"

// Waiters wakes requests waiting for an intent in the process where its
// record was settled. When the worker that completes an intent runs beside
// the gateway (serve, dev), the waiting request learns of the commit at
// once, instead of through Temporal's history long poll, and is handed the
// record as the settling transaction committed it, so that it need not
// read it again. Requests in other processes never hear of it here (they
// may through Listen, without the record) and wait on the run as before.
type Waiters struct {
	mu sync.Mutex
	m  map[waitKey][]*Settlement
}

type waitKey struct{ tenantID, key string }

// A Settlement is one request's wait for a record to be settled.
type Settlement struct {
	done  chan struct{}
	final *Record
}

// Done is closed once the record was settled (nil for a nil Settlement,
// which never is).
func (s *Settlement) Done() <-chan struct{} {
	if s == nil {
		return nil
	}
	return s.done
}

// Final is, once Done is closed, the record as the settling transaction
// committed it, or nil when the settlement was only announced (by another
// process, or by a caller that did not have it): read the record then.
func (s *Settlement) Final() *Record {
	if s == nil {
		return nil
	}
	return s.final
}

// Wait returns the Settlement of (tenantID, key)'s next settling here, and
// a function to call when no longer waiting.
func (w *Waiters) Wait(tenantID, key string) (*Settlement, func()) {
	if w == nil {
		return nil, func() {}
	}
	s := &Settlement{done: make(chan struct{})}
	k := waitKey{tenantID, key}
	w.mu.Lock()
	if w.m == nil {
		w.m = map[waitKey][]*Settlement{}
	}
	w.m[k] = append(w.m[k], s)
	w.mu.Unlock()
	return s, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		all := w.m[k]
		for i, o := range all {
			if o == s {
				all = append(all[:i], all[i+1:]...)
				break
			}
		}
		if len(all) == 0 {
			delete(w.m, k)
		} else {
			w.m[k] = all
		}
	}
}

// Settled wakes everyone waiting for (tenantID, key), handing them final
// when the caller has it (nil: they read the record). Call it after the
// transaction that settled the record committed.
func (w *Waiters) Settled(tenantID, key string, final *Record) {
	if w == nil {
		return
	}
	k := waitKey{tenantID, key}
	w.mu.Lock()
	all := w.m[k]
	delete(w.m, k)
	w.mu.Unlock()
	for _, s := range all {
		s.final = final
		close(s.done)
	}
}
