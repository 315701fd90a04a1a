package agentclient

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemflow/idemflow/intent"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"
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
		Scheme        string `json:"scheme"`
		WorkflowID    string `json:"workflow_id"`
		Lineage       string `json:"lineage"`
		Turn          int    `json:"turn"`
		Args          string `json:"args"`
		N             int    `json:"n"`
		OriginalRunID string `json:"original_run_id"`
		Call          int    `json:"call"`
		ActivityID    string `json:"activity_id"`
		Tool          string `json:"tool"`
		Scope         string `json:"scope"`
		Key           string `json:"key"`
	} `json:"temporal"`
	TemporalArgs []struct {
		Name     string `json:"name"`
		Payloads []struct {
			Encoding   string `json:"encoding"`
			Data       string `json:"data"`
			DataBase64 []byte `json:"data_base64"`
		} `json:"payloads"`
		// Intent: the activity's declared intent fields (tp4): the
		// digest is its intent's, or Error where the call has none.
		Intent intent.Fields `json:"intent"`
		Digest string        `json:"digest"`
		Error  string        `json:"error"`
	} `json:"temporal_args"`
	TemporalLineage []struct {
		Name           string   `json:"name"`
		Attempt        int32    `json:"attempt"`
		ContinuedRunID string   `json:"continued_run_id"`
		CronSchedule   string   `json:"cron_schedule"`
		FirstRunID     string   `json:"first_run_id"`
		OriginalRunID  string   `json:"original_run_id"`
		Header         *lineage `json:"header"`
		Lineage        string   `json:"lineage"`
		Turn           int      `json:"turn"`
	} `json:"temporal_lineage"`
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
	if len(v.Derive) == 0 || len(v.Temporal) == 0 || len(v.TemporalArgs) == 0 || len(v.TemporalLineage) == 0 {
		t.Fatal("the vectors are empty")
	}
	for _, d := range v.Derive {
		if got := DeriveKey(d.Scheme, d.Parts...); got != d.Key {
			t.Errorf("DeriveKey(%q, %q) = %s, want %s", d.Scheme, d.Parts, got, d.Key)
		}
	}
	for _, c := range v.Temporal {
		// The scope goes in as a caller passes it, empty or not: an
		// empty one is no scope.
		var got string
		switch c.Scheme {
		case "tp4":
			got = activityKey(c.WorkflowID, callID{Lineage: c.Lineage, Turn: c.Turn, Args: c.Args, Intent: true, N: c.N}, c.Tool, c.Scope)
		case "tp3":
			got = activityKey(c.WorkflowID, callID{Lineage: c.Lineage, Turn: c.Turn, Args: c.Args, N: c.N}, c.Tool, c.Scope)
		case "tp2":
			got = placeActivityKey(c.WorkflowID, callID{Run: c.OriginalRunID, N: c.Call}, c.Tool, c.Scope)
		case "tp1":
			got = legacyActivityKey(c.WorkflowID, c.ActivityID, c.Tool, c.Scope)
		default:
			t.Fatalf("%s: scheme %q", c.Name, c.Scheme)
		}
		if got != c.Key {
			t.Errorf("%s: %s, want %s", c.Name, got, c.Key)
		}
	}
	for _, c := range v.TemporalArgs {
		ps := &commonpb.Payloads{}
		for _, p := range c.Payloads {
			data := []byte(p.Data)
			if p.DataBase64 != nil {
				data = p.DataBase64
			}
			ps.Payloads = append(ps.Payloads, &commonpb.Payload{Metadata: map[string][]byte{converter.MetadataEncoding: []byte(p.Encoding)}, Data: data})
		}
		if c.Intent == nil {
			if got := argsDigest(ps); got != c.Digest {
				t.Errorf("the arguments' digest, %s: %s, want %s", c.Name, got, c.Digest)
			}
			continue
		}
		got, err := intentDigest(c.Intent, ps)
		if c.Error != "" {
			if err == nil || !strings.Contains(err.Error(), c.Error) {
				t.Errorf("the intent's digest, %s: %s %v, want an error naming %q", c.Name, got, err, c.Error)
			}
		} else if err != nil || got != c.Digest {
			t.Errorf("the intent's digest, %s: %s %v, want %s", c.Name, got, err, c.Digest)
		}
	}
	for _, c := range v.TemporalLineage {
		header := map[string]*commonpb.Payload{}
		if c.Header != nil {
			header[lineageHeader] = mustPayload(c.Header)
		}
		info := &workflow.Info{Attempt: c.Attempt, ContinuedExecutionRunID: c.ContinuedRunID, CronSchedule: c.CronSchedule, FirstRunID: c.FirstRunID, OriginalRunID: c.OriginalRunID}
		if got := lineageOf(info, header); got.ID != c.Lineage || got.Turn != c.Turn {
			t.Errorf("the lineage of %s: %+v, want %s turn %d", c.Name, got, c.Lineage, c.Turn)
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
	_, err := ActivityKey(context.Background(), "create_ticket")
	var app *temporal.ApplicationError
	if !errors.Is(err, ErrNoDurableIdentity) || !errors.As(err, &app) || !app.NonRetryable() {
		t.Fatalf("outside an activity: %v, want a non-retryable ErrNoDurableIdentity", err)
	}
}
