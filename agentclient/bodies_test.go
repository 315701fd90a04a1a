package agentclient

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// bodyVectors is clients/testdata/bodies.json: when a stored intent's body
// and the one asked for again are one request, in every client's store.
type bodyVectors struct {
	Same, Different []struct{ Name, Stored, Asked string }
}

func TestTheSharedBodyVectors(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "clients", "testdata", "bodies.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v bodyVectors
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Same) == 0 || len(v.Different) == 0 {
		t.Fatal("no vectors")
	}
	ctx := context.Background()
	c := &Client{Store: FileStore{Dir: t.TempDir()}}
	for i, cases := range [][]struct{ Name, Stored, Asked string }{v.Same, v.Different} {
		same := i == 0
		for _, tc := range cases {
			first, err := c.NewIntent(ctx, tc.Name, "t", "POST", "/v1/tickets", json.RawMessage(tc.Stored))
			if err != nil {
				t.Fatalf("%s: %v", tc.Name, err)
			}
			again, err := c.NewIntent(ctx, tc.Name, "t", "POST", "/v1/tickets", json.RawMessage(tc.Asked))
			switch {
			case same && (err != nil || again.Key != first.Key):
				t.Errorf("%s: %s asked again as %s: %v, want the stored intent", tc.Name, tc.Stored, tc.Asked, err)
			case !same && !errors.Is(err, ErrIntentMismatch):
				t.Errorf("%s: %s asked again as %s: %v, want ErrIntentMismatch", tc.Name, tc.Stored, tc.Asked, err)
			}
		}
	}
}
