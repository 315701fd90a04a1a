package op

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/go-json-experiment/json/jsontext"
)

// JSONSpec declares an operation whose request a JSON Schema describes
// rather than a Go type: one declared in a file, not in Go (an HTTP tool).
// Its effect is no step in the record's transaction: the activity
// registered under its Activity name runs it, and Lookup reads back what
// that activity stored.
type JSONSpec struct {
	Name        string
	Description string
	// Schema is the request's JSON Schema (2020-12), published (OpenAPI,
	// MCP) and enforced as it is written. Its top level is an object.
	Schema json.RawMessage
	// Summary is every run's title in the Temporal Web UI (Name if empty).
	Summary string
	// Lookup reads the answer of a key's effect, within q (found false
	// when there is none, or none that is final).
	Lookup func(ctx context.Context, q Querier, tenantID, key string) (a Answer, found bool, err error)
	// Table holds the effect's rows, with UNIQUE (tenant_id, idem_key).
	Table      string
	Rejections map[string]string
	// Intent is as in Spec: members of Schema's properties.
	Intent []IntentField
	// Route, Tool, BizType, Scope, Workflow and Activity are as in Spec.
	Route, Tool, BizType, Scope, Workflow, Activity string
}

// DefineJSON checks a declaration from a file and returns its operation.
// Unlike Define it returns its error: a bad file is the user's to fix, and
// the error says which part of the declaration is wrong.
func DefineJSON(s JSONSpec) (*Operation, error) {
	if !namePattern.MatchString(s.Name) {
		return nil, fmt.Errorf("name %q: must match %s", s.Name, namePattern)
	}
	if s.Lookup == nil || s.Table == "" {
		return nil, errors.New("op: DefineJSON needs a Lookup and a Table")
	}
	var schema map[string]any
	if err := json.Unmarshal(s.Schema, &schema); err != nil {
		return nil, fmt.Errorf("input_schema: %w", err)
	}
	if schema["type"] != "object" {
		return nil, errors.New("input_schema: its type must be object (the request is a JSON object)")
	}
	o := newOperation(s.Name, s.Description, s.Table, s.Rejections, nil,
		names{s.Route, s.Tool, s.BizType, s.Scope, s.Workflow, s.Activity})
	if len(pathParam.FindAllString(o.Route, -1)) > 0 {
		return nil, errors.New("op: an operation from a file takes no path parameters")
	}
	props, _ := schema["properties"].(map[string]any)
	if err := o.setIntent(s.Intent, slices.Collect(maps.Keys(props))); err != nil {
		return nil, err
	}
	if _, ok := schema["description"]; !ok && s.Description != "" {
		schema["description"] = s.Description
	}
	raw, err := json.Marshal(schema)
	if err != nil {
		return nil, err
	}
	o.schema = schema
	if o.validator, err = compile(raw); err != nil {
		return nil, fmt.Errorf("input_schema: %w", err)
	}
	_, bodyRequires := schema["required"]
	o.emptyBody = !bodyRequires
	o.prepare = func(body []byte) (any, string, error) {
		var v jsontext.Value
		if err := o.validate(body, &v); err != nil {
			return nil, "", err
		}
		// The canonical form (RFC 8785) is what the fingerprint covers,
		// and so what is kept and sent on: a downstream gets 5382 however
		// the agent wrote it (5382.0 reached one as written, and a strict
		// decoder there refused what idemflow had accepted).
		if err := v.Canonicalize(); err != nil {
			return nil, "", err
		}
		return json.RawMessage(v), cmp.Or(s.Summary, s.Name), nil
	}
	// The request is kept in its RFC 8785 canonical form, which the
	// fingerprint covers (idem.Fingerprint), so key order and number
	// spelling do not make a retry a conflict, nor reach a downstream.
	o.decode = func(raw json.RawMessage) (any, error) { return raw, nil }
	o.covered = func(req any) any { return req }
	o.recall = recallBy(s.Lookup, func(a Answer) Answer { return a })
	return o, nil
}

// RequestJSON returns a decoded input's request as the JSON it was
// submitted as (an operation declared with DefineJSON keeps it canonical).
func (o *Operation) RequestJSON(d Decoded) (json.RawMessage, error) {
	return json.Marshal(d.req)
}
