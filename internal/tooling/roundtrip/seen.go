package roundtrip

import "sync"

// seen is what a counter saw: the round trips since it was last taken,
// and how many in all.
type seen struct {
	mu    sync.Mutex
	trips []string
	total int
}

func (s *seen) add(trip string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.trips = append(s.trips, trip)
	s.total++
}

// Take returns the round trips since the last Take, one line each, and
// forgets them.
func (s *seen) Take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.trips
	s.trips = nil
	return out
}

// Total is the number of round trips counted since the counter was made.
func (s *seen) Total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total
}
