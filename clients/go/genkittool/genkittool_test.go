package genkittool

import (
	"errors"
	"testing"

	"github.com/firebase/genkit/go/ai"

	"github.com/idemflow/idemflow/agentclient"
	"github.com/idemflow/idemflow/intent"
)

func call(customer, title string) *ai.Part {
	return ai.NewToolRequestPart(&ai.ToolRequest{Name: "create_ticket", Input: map[string]any{"customer_id": customer, "title": title}})
}

func model(parts ...*ai.Part) *ai.Message { return &ai.Message{Role: ai.RoleModel, Content: parts} }

func user(text string) *ai.Message { return ai.NewUserTextMessage(text) }

func answer() *ai.Message {
	return &ai.Message{Role: ai.RoleTool, Content: []*ai.Part{ai.NewToolResponsePart(&ai.ToolResponse{Name: "create_ticket", Output: map[string]any{"http_status": 201}})}}
}

// The rule of gk1: what keeps a call one intent, and what makes two.
func TestAKeyNamesTheIntendedCall(t *testing.T) {
	fields := map[string]intent.Fields{"create_ticket": {{Name: "customer_id", Norm: intent.ID}}}
	key := func(history []*ai.Message, response *ai.Message, i int) string {
		t.Helper()
		keys, err := IntendedCallKeys("conv-1", history, response, fields)
		if err != nil {
			t.Fatal(err)
		}
		return keys[i].Key
	}
	turn := []*ai.Message{user("Open a ticket: the printer is on fire.")}
	first := key(turn, model(call("c-1", "Printer on fire")), 0)
	answeredTurn := append(append([]*ai.Message{}, turn...), model(call("c-1", "Printer on fire")), answer(), model(ai.NewTextPart("The ticket is open.")))
	killedTurn := append(append([]*ai.Message{}, turn...), model(call("c-1", "Printer on fire")))
	for _, c := range []struct {
		name string
		got  string
		same bool
	}{
		{"the message sent again, the call reworded and spaced", key(turn, model(call(" c-1 ", "The printer is smoking")), 0), true},
		{"the message sent again on a history that kept the killed turn's call unanswered", key(append(killedTurn, user("Open a ticket: the printer is on fire.")), model(call("c-1", "Printer on fire")), 0), true},
		{"another customer", key(turn, model(call("c-2", "Printer on fire")), 0), false},
		{"a second call for the customer in the same response", key(turn, model(call("c-1", "A"), call("c-1", "B")), 1), false},
		{"a second call for the customer in a later response of the turn", key(append(append([]*ai.Message{}, turn...), model(call("c-1", "A")), answer()), model(call("c-1", "B")), 0), false},
		{"the same words after the turn was answered", key(append(answeredTurn, user("Open a ticket: the printer is on fire.")), model(call("c-1", "Printer on fire")), 0), false},
	} {
		if (c.got == first) != c.same {
			t.Errorf("%s: key %s, first %s; want the same: %v", c.name, c.got, first, c.same)
		}
	}
	if _, err := IntendedCallKeys("conv-1", nil, model(call("c-1", "x")), fields); !errors.Is(err, agentclient.ErrNoDurableIdentity) {
		t.Errorf("calls no message of the user's asks for: %v, want ErrNoDurableIdentity", err)
	}
}
