package agentclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/idemflow/idemflow/intent"
)

// Tool declares the operation a framework's tool runs (its integrations
// in clients/go): its name and description as the model reads them, the
// operation's path, how its request's body is made, and its intent
// fields.
type Tool struct {
	Name        string
	Description string
	// Path is the operation's route; PathOf, if set, makes
	// it from the call's arguments instead.
	Path   string
	PathOf func(args map[string]any) string
	// Body makes the request's body from the call's arguments (default:
	// the arguments).
	Body func(args map[string]any) any
	// Intent is the operation's intent fields (members of the call's
	// arguments): a call whose model rewords free text is the same call,
	// and the request says so (Intent.ByIntent). Empty, the call is
	// named by its whole arguments.
	Intent intent.Fields
}

// Arguments is a tool call's arguments (a map as the model wrote them, or
// the tool's typed struct) as the JSON object Call and CallIntent read.
func Arguments(v any) (map[string]any, error) {
	if m, ok := v.(map[string]any); ok {
		return m, nil
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("a tool's arguments are a JSON object: %w", err)
	}
	return m, nil
}

// Call sends the call with args under key, waits for its final answer as
// long as ctx allows, and returns what the model reads of it
// (ToolAnswer; resume says how the framework waits for a pending one).
func (t Tool) Call(ctx context.Context, c *Client, key string, args map[string]any, resume string) (map[string]any, error) {
	path := t.Path
	if t.PathOf != nil {
		path = t.PathOf(args)
	}
	var body any = args
	if t.Body != nil {
		body = t.Body(args)
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("%s: the request's body: %w", t.Name, err)
	}
	res, err := c.Do(ctx, Intent{Key: key, Method: "POST", Path: path, Body: raw, ByIntent: len(t.Intent) > 0})
	return ToolAnswer(t.Name, key, res, err, resume)
}

// DifferedNote is what a replay whose other arguments differed tells the
// model, in every client's words: the answer holds what was made, not
// this call's wording.
const DifferedNote = "this intent was already done: the result is what was made then, not the arguments of this call"

// ToolAnswer is what a framework's tool named name hands its model of the
// end of a call under key (Do's res and err), as every client's tools
// shape it: a final answer {http_status, replayed, result} (and, on a
// replay whose other arguments differed, differed and DifferedNote); a
// final refusal {http_status, error, problem, body, replayed, key}, which
// is the model's to read, not a crash of the run. A context that ended
// first is an error saying the call is pending under key and must not be
// made again, and resume, how the framework waits for it under the same
// key: a model that read it as a failure would retry under a new key.
func ToolAnswer(name, key string, res Result, err error, resume string) (map[string]any, error) {
	var problem *ProblemError
	switch {
	case err == nil:
		out := map[string]any{"http_status": res.Status, "replayed": res.Replayed, "result": res.Body}
		if len(res.Differed) > 0 {
			out["differed"], out["note"] = res.Differed, DifferedNote
		}
		return out, nil
	case errors.As(err, &problem):
		return map[string]any{"http_status": problem.Status, "error": problem.Problem.Type, "problem": problem.Problem, "body": problem.Body, "replayed": false, "key": key}, nil
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		return nil, fmt.Errorf("%s: no final answer within the wait; the call is pending under key %s and must not be made again: %s", name, key, resume)
	default:
		return nil, fmt.Errorf("%s: %w", name, err)
	}
}
