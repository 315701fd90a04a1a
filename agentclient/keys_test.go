package agentclient

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
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
		Name       string `json:"name"`
		WorkflowID string `json:"workflow_id"`
		ActivityID string `json:"activity_id"`
		Tool       string `json:"tool"`
		Scope      string `json:"scope"`
		Key        string `json:"key"`
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
		if got := activityKey(c.WorkflowID, c.ActivityID, c.Tool, scope...); got != c.Key {
			t.Errorf("%s: %s, want %s", c.Name, got, c.Key)
		}
	}
}

// ActivityKey reads the running activity's IDs (the SDK's test
// environment runs a real activity), and refuses to make a key outside one.
func TestActivityKeyIsTheRunningActivitys(t *testing.T) {
	env := (&testsuite.WorkflowTestSuite{}).NewTestActivityEnvironment()
	env.RegisterActivityWithOptions(func(ctx context.Context) ([]string, error) {
		info := activity.GetInfo(ctx)
		key, err := ActivityKey(ctx, "")
		return []string{key, activityKey(info.WorkflowExecution.ID, info.ActivityID, "create_ticket"), info.WorkflowExecution.ID, info.ActivityID}, err
	}, activity.RegisterOptions{Name: "create_ticket"})
	val, err := env.ExecuteActivity("create_ticket")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	if err := val.Get(&got); err != nil {
		t.Fatal(err)
	}
	if got[2] == "" || got[3] == "" || got[0] != got[1] {
		t.Fatalf("ActivityKey %s, want %s from workflow %q and activity %q", got[0], got[1], got[2], got[3])
	}
	if _, err := ActivityKey(context.Background(), "create_ticket"); !errors.Is(err, ErrNoDurableIdentity) {
		t.Fatalf("outside an activity: %v, want ErrNoDurableIdentity", err)
	}
}
