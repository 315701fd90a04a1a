package activities_test

import (
	"slices"
	"testing"

	"github.com/idemflow/idemflow/activities"
	"github.com/idemflow/idemflow/metrics"
)

// metrics.Verdicts exports every verdict at 0 (alerts need the series
// before the first event); it cannot import this package, so this test
// keeps the two lists equal.
func TestEveryVerdictIsExportedByMetrics(t *testing.T) {
	all := []activities.Verdict{activities.VerdictRunning, activities.VerdictFromWorkflow, activities.VerdictFromRow,
		activities.VerdictFailed, activities.VerdictSettled, activities.VerdictError}
	if len(all) != len(metrics.Verdicts) {
		t.Fatalf("metrics.Verdicts %v, verdicts %v", metrics.Verdicts, all)
	}
	for _, v := range all {
		if !slices.Contains(metrics.Verdicts, string(v)) {
			t.Errorf("verdict %q is not in metrics.Verdicts", v)
		}
	}
}
