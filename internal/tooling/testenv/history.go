package testenv

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/temporalproto"
	"go.temporal.io/sdk/client"
)

// SaveHistory writes a workflow's whole history as JSON (the format replay
// tests read), for recording testdata from a real run. It first waits for
// the run to close: an intent's answer can arrive (woken in-process) before
// its run does, and a history cut short would replay less than it should.
func SaveHistory(t testing.TB, c client.Client, workflowID, runID, path string) {
	t.Helper()
	// A run that failed (a rejection) is closed too: only its end matters.
	_ = c.GetWorkflow(context.Background(), workflowID, runID).Get(context.Background(), nil)
	iter := c.GetWorkflowHistory(context.Background(), workflowID, runID, false, 0)
	var h historypb.History
	for iter.HasNext() {
		ev, err := iter.Next()
		if err != nil {
			t.Fatal(err)
		}
		h.Events = append(h.Events, ev)
	}
	b, err := temporalproto.CustomJSONMarshalOptions{Indent: "  "}.Marshal(&h)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
