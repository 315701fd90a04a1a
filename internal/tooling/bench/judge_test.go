package bench

import (
	"testing"
)

// soakOf is a soak's samples, one live heap (MiB) per interval for one
// process, 617 intents an interval.
func soakOf(heapMiB ...float64) SoakReport {
	var r SoakReport
	for _, h := range heapMiB {
		r.Samples = append(r.Samples, SoakSample{Intents: 617,
			Processes: []ProcessSample{{HeapLive: h * (1 << 20), Goroutines: 3650}}, Connections: 27})
	}
	return r
}

// The soak's judgement reads the level of each third, not one sample: a
// run whose live heap levelled off at about 110-118 MiB, with one sample
// in the middle third caught low (97 MiB, as a dev stack's did in a run of
// TestADevStacksMemoryIsFlatUnderASoakAndTheUnboundedCacheIsNot), is
// flat; a heap that keeps climbing is not.
func TestTheSoakJudgesTheLevelOfEachThirdNotOneSample(t *testing.T) {
	levelled := soakOf(68, 76, 94, 107, 109, 113, 97, 110, 113, 118, 120, 119, 118, 118, 116)
	levelled.judge([]string{"http://127.0.0.1:1/metrics"})
	if !levelled.Flat {
		t.Errorf("a levelled heap with one low sample judged growing: %v", levelled.Growths)
	}
	climbing := soakOf(60, 85, 110, 135, 160, 185, 210, 235, 260, 285, 310, 335, 360, 385, 410)
	climbing.judge([]string{"http://127.0.0.1:1/metrics"})
	if climbing.Flat {
		t.Error("a heap growing by 25 MiB an interval judged flat")
	}
}
