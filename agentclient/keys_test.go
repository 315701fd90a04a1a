package agentclient

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"
)

// keyVectors is clients/testdata/keys.json: how every client derives a key.
// The TypeScript and Python clients' tests read it too.
type keyVectors struct {
	Derive []struct {
		Scheme string   `json:"scheme"`
		Parts  []string `json:"parts"`
		Key    string   `json:"key"`
	} `json:"derive"`
	Temporal []struct {
		Name          string `json:"name"`
		WorkflowID    string `json:"workflow_id"`
		OriginalRunID string `json:"original_run_id"`
		Call          int    `json:"call"`
		ActivityID    string `json:"activity_id"`
		Tool          string `json:"tool"`
		Scope         string `json:"scope"`
		Key           string `json:"key"`
	} `json:"temporal"`
}

func TestTheSharedKeyVectors(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "clients", "testdata", "keys.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v keyVectors
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Derive) == 0 || len(v.Temporal) == 0 {
		t.Fatal("the vectors are empty")
	}
	for _, d := range v.Derive {
		if got := DeriveKey(d.Scheme, d.Parts...); got != d.Key {
			t.Errorf("DeriveKey(%q, %q) = %s, want %s", d.Scheme, d.Parts, got, d.Key)
		}
	}
	for _, c := range v.Temporal {
		var scope []string
		if c.Scope != "" {
			scope = []string{c.Scope}
		}
		got := activityKey(c.WorkflowID, callID{Run: c.OriginalRunID, N: c.Call}, c.Tool, scope...)
		if c.OriginalRunID == "" {
			got = legacyActivityKey(c.WorkflowID, c.ActivityID, c.Tool, scope...)
		}
		if got != c.Key {
			t.Errorf("%s: %s, want %s", c.Name, got, c.Key)
		}
	}
}

// ActivityKey refuses to make a key outside an activity, and in one whose
// worker lacks KeyInterceptor (the SDK's test environment runs a real
// activity). TestActivityKeysTellIntendedCallsApart covers the keys made.
func TestActivityKeyNeedsAnActivityAndTheInterceptor(t *testing.T) {
	env := (&testsuite.WorkflowTestSuite{}).NewTestActivityEnvironment()
	env.RegisterActivityWithOptions(func(ctx context.Context) (string, error) {
		return ActivityKey(ctx, "")
	}, activity.RegisterOptions{Name: "create_ticket"})
	if _, err := env.ExecuteActivity("create_ticket"); err == nil || !strings.Contains(err.Error(), "KeyInterceptor") {
		t.Fatalf("without the interceptor: %v, want a refusal that names KeyInterceptor", err)
	}
	if _, err := ActivityKey(context.Background(), "create_ticket"); !errors.Is(err, ErrNoDurableIdentity) {
		t.Fatalf("outside an activity: %v, want ErrNoDurableIdentity", err)
	}
}
