package mcpserver

import (
	"context"
	"fmt"
	"testing"

	"github.com/idemflow/idemflow/agentclient"
	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/internal/tooling/modeltext"
)

// No text a model reads after a refusal or a pending answer invites it to
// make the call again as a new one: a model cannot choose keys, and reads
// "use a new key" as "call again". Every answer explain gives, and the
// key-reused detail the integrations pass on from the HTTP answer, go
// through the rule all clients share (clients/testdata/modeltexts.json),
// whose own examples show it catches what it should.
func TestNoTextAfterARefusalOrAPendingAnswerInvitesANewCall(t *testing.T) {
	rule, err := modeltext.Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range rule.Invite {
		if rule.Invitation(s) == "" {
			t.Errorf("the check lets through an invitation: %q", s)
		}
	}
	for _, s := range rule.Allow {
		if got := rule.Invitation(s); got != "" {
			t.Errorf("the check refuses %q at %q", s, got)
		}
	}
	rejected := func(code string, status int, body string) error {
		return &agentclient.RejectedError{ProblemError: agentclient.ProblemError{Status: status, Body: []byte(body), Settled: true,
			Problem: agentclient.Problem{Type: "/problems/" + code, Detail: "not enough stock"}}, Code: code}
	}
	texts := map[string]string{
		"conflict":                            explain("k-1", fmt.Errorf("422: %w", agentclient.ErrKeyReused)).Error(),
		"downstream rejected":                 explain("k-1", rejected(agentclient.CodeDownstreamRejected, 422, `{"error":"amount_exceeds_capture"}`)).Error(),
		"rejected":                            explain("k-1", rejected("out-of-stock", 409, `{}`)).Error(),
		"outcome unknown":                     explain("k-1", fmt.Errorf("502: %w", agentclient.ErrOutcomeUnknown)).Error(),
		"invalid arguments":                   explain("k-1", fmt.Errorf("400: %w", agentclient.ErrInvalidRequest)).Error(),
		"no answer yet":                       explain("k-1", fmt.Errorf("waited: %w", context.DeadlineExceeded)).Error(),
		"ended without an answer":             explain("k-1", fmt.Errorf("%w: 500", agentclient.ErrUnfinished)).Error(),
		"key reused, HTTP":                    (&idem.KeyReusedError{Key: "k-1", BizType: "ticket.create"}).Error(),
		"key reused, another operation, HTTP": (&idem.KeyReusedError{Key: "k-1", BizType: "ticket.create", Asked: "order.create"}).Error(),
	}
	for name, text := range texts {
		if s := rule.Invitation(text); s != "" {
			t.Errorf("%s: %q invites a new call: %q", name, text, s)
		}
	}
}
