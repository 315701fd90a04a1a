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
	w.Settled("acme", "k")
	for _, ch := range []<-chan struct{}{a1, a2} {
		select {
		case <-ch:
		case <-time.After(time.Second):
			t.Fatal("a waiter was not woken")
		}
	}
	select {
	case <-b:
		t.Fatal("another tenant's waiter was woken")
	default:
	}
	// A waiter that stopped is forgotten; settling twice is harmless.
	stopB()
	w.Settled("globex", "k")
	w.Settled("acme", "k")
	if len(w.m) != 0 {
		t.Fatalf("waiters left behind: %v", w.m)
	}
	var none *Waiters
	ch, stop := none.Wait("acme", "k")
	stop()
	none.Settled("acme", "k")
	if ch != nil {
		t.Fatal("a nil Waiters must hand out no channel")
	}
}
