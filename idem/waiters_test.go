package idem

import (
	"testing"
	"time"
)

func TestWaitersWakeEveryoneWaitingForTheKeyOnly(t *testing.T) {
	var w Waiters
	a1, stopA1 := w.Wait("acme", "k")
	a2, stopA2 := w.Wait("acme", "k")
	b, stopB := w.Wait("globex", "k")
	defer stopA1()
	defer stopA2()
	defer stopB()
	final := &Record{TenantID: "acme", Key: "k", Status: StatusSuccess}
	w.Settled("acme", "k", final)
	for _, s := range []*Settlement{a1, a2} {
		select {
		case <-s.Done():
		case <-time.After(time.Second):
			t.Fatal("a waiter was not woken")
		}
		// The committed record is handed over: no read after the wake-up.
		if s.Final() != final {
			t.Fatalf("a waiter was handed %v, want the settled record", s.Final())
		}
	}
	select {
	case <-b.Done():
		t.Fatal("another tenant's waiter was woken")
	default:
	}
	// A waiter that stopped is forgotten; settling twice is harmless; a
	// settlement announced without the record hands over none.
	stopB()
	c, stopC := w.Wait("globex", "k")
	defer stopC()
	w.Settled("globex", "k", nil)
	<-c.Done()
	if c.Final() != nil {
		t.Fatal("an announcement without the record handed one over")
	}
	w.Settled("acme", "k", nil)
	if len(w.m) != 0 {
		t.Fatalf("waiters left behind: %v", w.m)
	}
	var none *Waiters
	s, stop := none.Wait("acme", "k")
	stop()
	none.Settled("acme", "k", nil)
	if s.Done() != nil || s.Final() != nil {
		t.Fatal("a nil Waiters must hand out no settlement")
	}
}
