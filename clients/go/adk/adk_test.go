package adk

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/adk/session"
	"google.golang.org/genai"

	"github.com/idemflow/idemflow/intent"
)

// vectorEvent is an event of clients/testdata/keys.json's adk_calls.
type vectorEvent struct {
	ID         string `json:"id"`
	Invocation string `json:"invocation"`
	Author     string `json:"author"`
	Text       string `json:"text"`
	Rewind     string `json:"rewind"`
	Calls      []struct {
		ID   string         `json:"id"`
		Name string         `json:"name"`
		Args map[string]any `json:"args"`
	} `json:"calls"`
	Responses []string `json:"responses"`
}

func (v vectorEvent) event() *session.Event {
	e := &session.Event{ID: v.ID, InvocationID: v.Invocation, Author: v.Author}
	if e.Author == "" {
		e.Author = "support"
	}
	role := "model"
	if e.Author == "user" {
		role = "user"
	}
	content := &genai.Content{Role: role}
	if v.Text != "" {
		content.Parts = append(content.Parts, &genai.Part{Text: v.Text})
	}
	for _, c := range v.Calls {
		content.Parts = append(content.Parts, &genai.Part{FunctionCall: &genai.FunctionCall{ID: c.ID, Name: c.Name, Args: c.Args}})
	}
	for _, r := range v.Responses {
		content.Parts = append(content.Parts, &genai.Part{FunctionResponse: &genai.FunctionResponse{ID: r, Name: "create_ticket", Response: map[string]any{"ok": true}}})
	}
	e.Content = content
	return e
}

// The shared vectors of ad3, the rule the Python integration keys by: the
// same events give the same key in Go. Entries of ad2 (the whole
// arguments, Python's scheme before ad3) and those with a rewind (ADK for
// Go has none) are not this package's; they are named, never dropped
// silently, and at least the ad3 ones must run.
func TestTheSharedVectorsGiveTheKeysPythonGives(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "testdata", "keys.json"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Calls []struct {
			Name       string        `json:"name"`
			Scheme     string        `json:"scheme"`
			Intent     intent.Fields `json:"intent"`
			App        string        `json:"app"`
			User       string        `json:"user"`
			Session    string        `json:"session"`
			Events     []vectorEvent `json:"events"`
			Invocation string        `json:"invocation"`
			CallID     string        `json:"call_id"`
			Tool       string        `json:"tool"`
			Key        *string       `json:"key"`
		} `json:"adk_calls"`
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, c := range file.Calls {
		rewound := false
		var events []*session.Event
		for _, e := range c.Events {
			rewound = rewound || e.Rewind != ""
			events = append(events, e.event())
		}
		if c.Scheme != KeyScheme || rewound {
			t.Logf("not this package's: %q (scheme %q, a rewind: %v)", c.Name, c.Scheme, rewound)
			continue
		}
		ran++
		t.Run(c.Name, func(t *testing.T) {
			key, ok, err := IntendedCallKey(c.App, c.User, c.Session, events, c.Invocation, c.CallID, c.Tool, c.Intent)
			if err != nil {
				t.Fatal(err)
			}
			if c.Key == nil {
				if ok {
					t.Fatalf("key %s, want none", key)
				}
				return
			}
			if !ok || key != *c.Key {
				t.Fatalf("key %q (found %v), want %q", key, ok, *c.Key)
			}
		})
	}
	if ran < 8 {
		t.Fatalf("%d ad3 vectors ran, want at least 8", ran)
	}
}
