package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// A case's targets are measured in turn, after a warm-up of each, in
// reverse order every other round, so that what the machine does during
// the run falls on each alike; and a client's request numbers go on
// across the slices, so that a new key is new in every one of them (were
// they numbered afresh, a "new key" slice would replay the keys of the
// slice before). The ratio is the first target's throughput over the
// second's, between the lowest and the highest round's own.
func TestCompareTakesTheTargetsInTurnAndNeverReusesAKey(t *testing.T) {
	var mu sync.Mutex
	var calls []string
	seen := map[string]bool{}
	var repeated []string
	fake := func(name string) target {
		return target{name: name, do: func(_ context.Context, c, n int) (int, error) {
			time.Sleep(200 * time.Microsecond)
			key := fmt.Sprintf("%s/%d/%d", name, c, n)
			mu.Lock()
			defer mu.Unlock()
			if seen[key] {
				repeated = append(repeated, key)
			}
			seen[key] = true
			if len(calls) == 0 || calls[len(calls)-1] != name {
				calls = append(calls, name)
			}
			return 201, nil
		}}
	}
	ticks := 0
	rows := compare(context.Background(), "case", []target{fake("A"), fake("B")}, 2, 4, 80*time.Millisecond, nil, func() { ticks++ })

	// Warm-ups A, B; rounds A B, B A, A B, B A: consecutive calls to one
	// target are one entry.
	if got, want := strings.Join(calls, " "), "A B A B A B A"; got != want {
		t.Errorf("the targets ran in the order %q, want %q (warm-up A B, then A B | B A | A B | B A)", got, want)
	}
	if len(repeated) > 0 {
		t.Errorf("%d keys were sent twice, e.g. %s", len(repeated), repeated[0])
	}
	if ticks != 2*(1+4) {
		t.Errorf("%d progress ticks, want one per warm-up and slice: 10", ticks)
	}
	if len(rows) != 2 || rows[0].RatioTo != "B" || rows[1].RatioTo != "" {
		t.Fatalf("rows %+v", rows)
	}
	r := rows[0]
	if r.Requests == 0 || r.Throughput <= 0 || r.Ratio <= 0 || r.RatioLow > r.Ratio || r.Ratio > r.RatioHigh {
		t.Errorf("row %s: %d requests, %.0f/s, ratio %.2f (rounds %.2f-%.2f)", r.Target, r.Requests, r.Throughput, r.Ratio, r.RatioLow, r.RatioHigh)
	}
	if !slices.Equal([]string{rows[0].Target, rows[1].Target}, []string{"A", "B"}) {
		t.Errorf("rows %s, %s", rows[0].Target, rows[1].Target)
	}
}

// The throughput counts the answers that arrived within the slices: a
// slice's tail, while its last requests drain and fewer clients send, is
// not charged to the target.
func TestThroughputCountsTheAnswersWithinTheSlice(t *testing.T) {
	st := merge([]sample{
		{statuses: map[int]int{201: 12}, lat: make([]time.Duration, 12), inWindow: 10, window: time.Second, elapsed: 2 * time.Second},
		{statuses: map[int]int{201: 6}, lat: make([]time.Duration, 6), inWindow: 4, window: time.Second, elapsed: 3 * time.Second},
	})
	if st.Requests != 18 || st.Throughput != 7 {
		t.Errorf("%d requests at %.1f/s, want 18 at 7/s (14 answers within 2 s of slices)", st.Requests, st.Throughput)
	}
	// A client sends until a request ends past the slice's end: that
	// last one is measured, not counted in the throughput.
	s := load(context.Background(), 1, 30*time.Millisecond, func(context.Context, int) (int, error) {
		time.Sleep(7 * time.Millisecond)
		return 201, nil
	})
	if len(s.lat) < 2 || s.inWindow != len(s.lat)-1 {
		t.Errorf("%d requests, %d counted within the slice; want all but the last", len(s.lat), s.inWindow)
	}
	slow := merge([]sample{{statuses: map[int]int{201: 2}, lat: make([]time.Duration, 2), window: time.Second, elapsed: 4 * time.Second}})
	if slow.Throughput != 0.5 {
		t.Errorf("no answer within the slice: %.2f/s, want the measured ones over the elapsed time, 0.5/s", slow.Throughput)
	}
}
