package agentclient

import (
	"context"
	"fmt"
	"testing"

	"github.com/idemflow/idemflow/internal/tooling/modeltext"
)

// What a framework's tool hands its model after a pending answer invites
// no new call (the rule every client's texts are held to), and a final
// refusal is the model's to read, not an error of the run.
func TestAToolsAnswersInviteNoNewCall(t *testing.T) {
	rule, err := modeltext.Load()
	if err != nil {
		t.Fatal(err)
	}
	_, pending := ToolAnswer("create_ticket", "ad3_k", Result{}, fmt.Errorf("waiting: %w", context.DeadlineExceeded), "send the same message on the session to wait for its answer")
	if pending == nil {
		t.Fatal("a call whose context ended has no error")
	}
	if s := rule.Invitation(pending.Error()); s != "" {
		t.Fatalf("the pending text invites a new call at %q: %s", s, pending)
	}
	refusal, err := ToolAnswer("create_ticket", "ad3_k", Result{}, &ProblemError{Status: 422, Problem: Problem{Type: "/problems/key-reused"}, kind: ErrKeyReused}, "")
	if err != nil || refusal["http_status"] != 422 || refusal["key"] != "ad3_k" {
		t.Fatalf("a final refusal is %v, %v; want the model's to read", refusal, err)
	}
}
