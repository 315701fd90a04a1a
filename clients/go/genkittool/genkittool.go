// Package genkittool makes Genkit for Go (github.com/firebase/genkit/go)
// tools that run one of idemflow's operations once per intended call,
// under a key derived from the conversation the app keeps.
//
// What Genkit keeps, read in v1.4.0: nothing of its own. A generate call
// runs the model and the tools it asks for in a loop, and the app keeps
// the conversation (ModelResponse.History, saved where it likes) and
// sends it with the next message (ai.WithMessages). A tool is told
// neither its call's ID nor the conversation. A process killed mid call
// never saved its turn; the app sends the user's message again on the
// history it saved, and the model writes the call again.
//
// So the key (gk1) names the intended call: the conversation (an ID the
// app gives, Keys.Conversation), the turn, the tool, the call's intent
// fields (the operation's, as it declares them: a ticket's customer_id;
// for a tool that declares none, its arguments in RFC 8785 form, less a
// model-written idempotency_key) and their occurrence among the turn's
// calls of that tool with that intent. The turn is the user's message and
// its place: how many earlier messages of the user's in the history were
// answered to the end (a message of the model's that asks for no tool).
// The model middleware Conversation returns reads each model response's
// tool requests and the history before it, and plans their keys; each
// tool takes its call's key from that plan. A turn killed mid call was
// never answered, so the message sent again is the same turn, and the
// call written again, reworded or not, has the same key and gets the first
// answer, a replay; the same words after the first were answered are
// another turn.
package genkittool

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/firebase/genkit/go/ai"
	"github.com/firebase/genkit/go/genkit"

	"github.com/idemflow/idemflow/agentclient"
	"github.com/idemflow/idemflow/intent"
)

// KeyScheme is the scheme of a Genkit call's key: the intended call,
// named by its intent fields.
const KeyScheme = "gk1"

// Keys plans the keys of the calls of a conversation's turns, for the
// tools it defines.
type Keys struct {
	client *agentclient.Client

	mu    sync.Mutex
	tools map[string]toolInfo
}

// toolInfo is what the plan needs of a tool: its intent fields, and its
// arguments as the tool reads them (the model's, through the tool's type),
// so that the plan and the tool name a call alike.
type toolInfo struct {
	fields intent.Fields
	read   func(input any) (map[string]any, error)
}

// New is the Keys of the tools that call idemflow through client.
func New(client *agentclient.Client) *Keys {
	return &Keys{client: client, tools: map[string]toolInfo{}}
}

// Config declares a tool: the operation it runs.
type Config = agentclient.Tool

// plan holds the keys planned for one generate call's tool requests, by
// the tool and the call's intent; a tool takes the first one left.
type plan struct {
	conversation string
	mu           sync.Mutex
	keys         map[string][]string
}

type planKey struct{}

// Conversation is what a generate call of the conversation named id needs
// for its tools' keys: the context to run it in, and the model middleware
// to give it (ai.WithMiddleware). The history sent with it
// (ai.WithMessages) is the one the app saved after the last answered turn.
func (k *Keys) Conversation(ctx context.Context, id string) (context.Context, ai.ModelMiddleware) {
	p := &plan{conversation: id, keys: map[string][]string{}}
	mw := func(next ai.ModelFunc) ai.ModelFunc {
		return func(ctx context.Context, req *ai.ModelRequest, cb ai.ModelStreamCallback) (*ai.ModelResponse, error) {
			resp, err := next(ctx, req, cb)
			if err != nil || resp == nil || resp.Message == nil {
				return resp, err
			}
			return resp, k.plan(p, req.Messages, resp.Message)
		}
	}
	return context.WithValue(ctx, planKey{}, p), mw
}

// plan names each tool request of response, the model's answer to history.
func (k *Keys) plan(p *plan, history []*ai.Message, response *ai.Message) error {
	k.mu.Lock()
	keys, err := intendedCallKeys(p.conversation, history, response, k.tools)
	k.mu.Unlock()
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range keys {
		p.keys[c.slot] = append(p.keys[c.slot], c.Key)
	}
	return nil
}

// take is the key planned for a call of tool with call (CallIntent's
// text), removed from the plan.
func (p *plan) take(tool, call string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	slot := tool + "\x00" + call
	if len(p.keys[slot]) == 0 {
		return "", false
	}
	key := p.keys[slot][0]
	p.keys[slot] = p.keys[slot][1:]
	return key, true
}

// PlannedKey is the key of one tool request of a model response.
type PlannedKey struct {
	Tool string
	Key  string
	slot string
}

// IntendedCallKeys is the gk1 key of each tool request of response, the
// model's answer to history: derive("turn", how many earlier messages of
// the user's were answered to the end, the RFC 8785 form of the turn's
// message's texts), the tool, the digest of the call's intent (its tool's
// intent fields, or its arguments) and its occurrence among the turn's
// calls of that tool with that intent, those of earlier responses of the
// turn and those before it in response.
func IntendedCallKeys(conversation string, history []*ai.Message, response *ai.Message, fields map[string]intent.Fields) ([]PlannedKey, error) {
	tools := map[string]toolInfo{}
	for name, f := range fields {
		tools[name] = toolInfo{fields: f, read: agentclient.Arguments}
	}
	return intendedCallKeys(conversation, history, response, tools)
}

func intendedCallKeys(conversation string, history []*ai.Message, response *ai.Message, tools map[string]toolInfo) ([]PlannedKey, error) {
	prompts := []int{}
	for i, m := range history {
		if isPrompt(m) {
			prompts = append(prompts, i)
		}
	}
	if len(prompts) == 0 {
		return nil, fmt.Errorf("genkittool: no message of the user's asks for these calls: %w", agentclient.ErrNoDurableIdentity)
	}
	start := prompts[len(prompts)-1]
	answered := 0
	for j, at := range prompts[:len(prompts)-1] {
		for _, m := range history[at+1 : prompts[j+1]] {
			if m.Role == ai.RoleModel && len(requests(m)) == 0 {
				answered++
				break
			}
		}
	}
	texts, err := intent.RFC8785(textsOf(history[start]))
	if err != nil {
		return nil, err
	}
	turn := agentclient.DeriveKey("turn", fmt.Sprint(answered), texts)
	seen := map[string]int{}
	var out []PlannedKey
	for _, m := range append(append([]*ai.Message{}, history[start+1:]...), response) {
		if m.Role != ai.RoleModel {
			continue
		}
		for _, r := range requests(m) {
			info, ok := tools[r.Name]
			if !ok {
				info = toolInfo{read: agentclient.Arguments}
			}
			args, err := info.read(r.Input)
			if err != nil {
				return nil, fmt.Errorf("genkittool: a call of %s: %w", r.Name, err)
			}
			call, err := agentclient.CallIntent(info.fields, args)
			if err != nil {
				return nil, err
			}
			slot := r.Name + "\x00" + call
			seen[slot]++
			if m == response {
				out = append(out, PlannedKey{Tool: r.Name, slot: slot,
					Key: agentclient.DeriveKey(KeyScheme, conversation, turn, r.Name, agentclient.CallDigest(call), fmt.Sprint(seen[slot]))})
			}
		}
	}
	return out, nil
}

// isPrompt: a message of the user's own, with text.
func isPrompt(m *ai.Message) bool {
	return m.Role == ai.RoleUser && len(textsOf(m)) > 0
}

func textsOf(m *ai.Message) []string {
	var texts []string
	for _, p := range m.Content {
		if p.IsText() {
			texts = append(texts, p.Text)
		}
	}
	return texts
}

func requests(m *ai.Message) []*ai.ToolRequest {
	var out []*ai.ToolRequest
	for _, p := range m.Content {
		if p.IsToolRequest() && p.ToolRequest != nil {
			out = append(out, p.ToolRequest)
		}
	}
	return out
}

// DefineTool defines a Genkit tool that runs one of idemflow's operations
// (a ticket, an order, a declared operation, an HTTP tool) once per
// intended call, in a generate call run as Conversation says. Args is the
// arguments' type (its JSON schema is the tool's input schema).
//
// The call waits for its final answer as long as its context allows,
// retrying under its key; the model reads {http_status, replayed, result}
// (and, on a replay whose other arguments differed, differed and a note),
// or for a final refusal {http_status, error, problem, body, replayed,
// key}. A call with no planned key (a generate call run without the
// conversation's middleware) fails the generate call, and nothing is
// sent; so does a context that ends first, whose error says the call is
// pending under its key: the same message sent again waits for it.
func DefineTool[Args any](g *genkit.Genkit, k *Keys, cfg Config) ai.Tool {
	// What the tool reads of a call, for the plan too.
	read := func(input any) (map[string]any, error) {
		raw, err := json.Marshal(input)
		if err != nil {
			return nil, err
		}
		var typed Args
		if err := json.Unmarshal(raw, &typed); err != nil {
			return nil, fmt.Errorf("invalid arguments: %w", err)
		}
		return agentclient.Arguments(typed)
	}
	k.mu.Lock()
	k.tools[cfg.Name] = toolInfo{fields: cfg.Intent, read: read}
	k.mu.Unlock()
	return genkit.DefineTool(g, cfg.Name, cfg.Description, func(tc *ai.ToolContext, typed Args) (map[string]any, error) {
		args, err := agentclient.Arguments(typed)
		if err != nil {
			return nil, err
		}
		call, err := agentclient.CallIntent(cfg.Intent, args)
		if err != nil {
			return nil, err
		}
		key, ok := "", false
		if p, _ := tc.Value(planKey{}).(*plan); p != nil {
			key, ok = p.take(cfg.Name, call)
		}
		if !ok {
			return nil, fmt.Errorf("%s: no key was planned for this call (run the generate call in Keys.Conversation's context, with its middleware); nothing was sent: %w", cfg.Name, agentclient.ErrNoDurableIdentity)
		}
		return cfg.Call(tc, k.client, key, args, "send the same message on the saved history to wait for its answer")
	})
}
