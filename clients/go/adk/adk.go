// Package adk makes tools for Google's Agent Development Kit for Go
// (google.golang.org/adk) that run one of idemflow's operations once per
// intended call, under a key derived from what ADK's session service holds
// of the call.
//
// What ADK keeps, read in google.golang.org/adk v1.7.0: its runner appends
// every event to the session service (session/database on SQLite or
// PostgreSQL, Vertex AI) as the agent yields it, so the model's event that
// asks for a call is stored before the call runs, with an ID for each call
// (adk-<uuid> where the model gave none). ADK for Go has no resumable
// invocations and no rewind: a process killed mid call is resumed the way
// an app resumes a conversation, by sending the user's message again on
// the same session, a new invocation whose model writes the call again
// under a new ID.
//
// So the key (ad3, the rule of idemflow.adk in Python, held to the same
// vectors, clients/testdata/keys.json's adk_calls) names the intended
// call: the app, the user and the session, the turn, the tool, the call's
// intent fields (the operation's, as it declares them: a ticket's
// customer_id; for a tool that declares none, its arguments in RFC 8785
// form, less a model-written idempotency_key) and their occurrence among
// the invocation's calls of that tool with that intent. The turn is the
// user's message the invocation answers and its place: how many earlier
// invocations of the session answered a user's message to the end. A
// killed invocation never ended, so the message sent again is the same
// turn, and the call written again, reworded or not, has the same key and
// gets the first answer, a replay; the same words after the first were
// answered are another turn.
package adk

import (
	"errors"
	"fmt"

	"google.golang.org/adk/agent"
	"google.golang.org/adk/session"
	"google.golang.org/adk/tool"
	"google.golang.org/adk/tool/functiontool"
	"google.golang.org/genai"

	"github.com/idemflow/idemflow/agentclient"
	"github.com/idemflow/idemflow/intent"
)

// KeyScheme is the scheme of an ADK call's key: the intended call, named
// by its intent fields (the Python integration's newest scheme, ad3).
const KeyScheme = "ad3"

// Config declares a tool: the operation it runs, and the session service
// the app's runner appends to, which the tool reads its calls from.
type Config struct {
	agentclient.Tool
	Sessions session.Service
}

// NewTool is an ADK tool (a function tool) that runs one of idemflow's
// operations (a ticket, an order, a declared operation, an HTTP tool) once
// per intended call, under the call's durable key (DurableKey).
//
// The call waits for its final answer as long as ctx allows, retrying
// under its key; the model reads {http_status, replayed, result} (and, on
// a replay whose other arguments differed, differed and a note), or for a
// final refusal {http_status, error, problem, body, replayed, key}. A
// context that ends first ends the call with an error that says the call
// is pending under its key and must not be made again: the same message
// sent again on the session waits for it under the same key.
func NewTool[Args any](c *agentclient.Client, cfg Config) (tool.Tool, error) {
	if cfg.Sessions == nil {
		return nil, errors.New("adk: Config.Sessions is the runner's session service; the tool reads its calls from it")
	}
	handler := func(ctx agent.ToolContext, typed Args) (map[string]any, error) {
		args, err := agentclient.Arguments(typed)
		if err != nil {
			return nil, err
		}
		key, err := DurableKey(ctx, cfg.Sessions, cfg.Name, cfg.Intent)
		if err != nil {
			return nil, err
		}
		return cfg.Call(ctx, c, key, args, "send the same message on the session to wait for its answer")
	}
	return functiontool.New(functiontool.Config{Name: cfg.Name, Description: cfg.Description}, handler)
}

// DurableKey is the key of the call ctx runs, from the events the session
// service holds of its session (IntendedCallKey). It wraps
// agentclient.ErrNoDurableIdentity where the call has no ID or no event of
// its invocation holds it: nothing that survives a restart would name it.
func DurableKey(ctx agent.ToolContext, sessions session.Service, name string, fields intent.Fields) (string, error) {
	if ctx.FunctionCallID() == "" {
		return "", fmt.Errorf("adk: %s: the call has no ID: %w", name, agentclient.ErrNoDurableIdentity)
	}
	got, err := sessions.Get(ctx, &session.GetRequest{AppName: ctx.AppName(), UserID: ctx.UserID(), SessionID: ctx.SessionID()})
	if err != nil {
		return "", fmt.Errorf("adk: %s: reading session %s: %w", name, ctx.SessionID(), err)
	}
	var events []*session.Event
	for e := range got.Session.Events().All() {
		events = append(events, e)
	}
	key, ok, err := IntendedCallKey(ctx.AppName(), ctx.UserID(), ctx.SessionID(), events, ctx.InvocationID(), ctx.FunctionCallID(), name, fields)
	if err != nil {
		return "", err
	}
	if !ok {
		return "", fmt.Errorf("adk: %s: no event of invocation %s in session %s holds call %s: %w", name, ctx.InvocationID(), ctx.SessionID(), ctx.FunctionCallID(), agentclient.ErrNoDurableIdentity)
	}
	return key, nil
}

// IntendedCallKey is the ad3 key of call callID of invocation, from the
// session's events: derive("turn", the number of earlier invocations that
// answered a user's message to the end, the RFC 8785 form of this
// invocation's message's texts), the tool, the digest of the call's intent
// (its intent fields, or for another tool's call, or a tool that declares
// none, its arguments) and its occurrence among the invocation's calls of
// that tool with that intent. ok is false when no event of the invocation
// holds the call.
func IntendedCallKey(app, user, sessionID string, events []*session.Event, invocation, callID, tool string, fields intent.Fields) (key string, ok bool, err error) {
	at := -1
	for i := len(events) - 1; i >= 0 && at < 0; i-- {
		if events[i].InvocationID == invocation && holds(events[i], callID) {
			at = i
		}
	}
	if at < 0 {
		return "", false, nil
	}
	start := 0
	for events[start].InvocationID != invocation {
		start++
	}
	var turn string
	message, found := invocationMessage(events, invocation)
	if !found {
		// An invocation started by no message of the user's (a
		// sub-agent's own): its ID is all that names its turn.
		turn = agentclient.DeriveKey("turn", "invocation", invocation)
	} else {
		asked, answered := map[string]bool{}, map[string]bool{}
		for _, e := range events[:start] {
			if userTexts(e) != nil {
				asked[e.InvocationID] = true
			}
		}
		for _, e := range events[:start] {
			if e.Author != "user" && e.IsFinalResponse() && asked[e.InvocationID] {
				answered[e.InvocationID] = true
			}
		}
		texts, err := intent.RFC8785(message)
		if err != nil {
			return "", false, err
		}
		turn = agentclient.DeriveKey("turn", fmt.Sprint(len(answered)), texts)
	}
	// The invocation's calls up to the event that holds this one, in
	// their order; the last one with callID is the call (a later response
	// may bring an ID back).
	type named struct{ id, tool, call string }
	var seen []named
	for _, e := range events[start : at+1] {
		if e.InvocationID != invocation {
			continue
		}
		for _, c := range calls(e) {
			var use intent.Fields
			if c.Name == tool {
				use = fields
			}
			call, err := agentclient.CallIntent(use, c.Args)
			if err != nil {
				return "", false, err
			}
			seen = append(seen, named{c.ID, c.Name, call})
		}
	}
	last := 0
	for i, c := range seen {
		if c.id == callID {
			last = i
		}
	}
	n := 0
	for _, c := range seen[:last+1] {
		if c.tool == seen[last].tool && c.call == seen[last].call {
			n++
		}
	}
	return agentclient.DeriveKey(KeyScheme, app, user, sessionID, turn, tool, agentclient.CallDigest(seen[last].call), fmt.Sprint(n)), true, nil
}

func holds(e *session.Event, callID string) bool {
	for _, c := range calls(e) {
		if c.ID == callID {
			return true
		}
	}
	return false
}

func calls(e *session.Event) []*genai.FunctionCall {
	var out []*genai.FunctionCall
	if e.Content == nil {
		return nil
	}
	for _, p := range e.Content.Parts {
		if p != nil && p.FunctionCall != nil {
			out = append(out, p.FunctionCall)
		}
	}
	return out
}

// userTexts is the texts of a user's message, or nil for another event (a
// model's, or a user event of function responses: a confirmation).
func userTexts(e *session.Event) []string {
	if e.Author != "user" || e.Content == nil {
		return nil
	}
	var texts []string
	for _, p := range e.Content.Parts {
		if p != nil && p.Text != "" {
			texts = append(texts, p.Text)
		}
	}
	return texts
}

// invocationMessage is the texts of the user's message that started
// invocation.
func invocationMessage(events []*session.Event, invocation string) ([]string, bool) {
	for _, e := range events {
		if e.InvocationID == invocation {
			if t := userTexts(e); t != nil {
				return t, true
			}
		}
	}
	return nil, false
}
