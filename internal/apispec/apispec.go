// Package apispec holds the gateway's HTTP contract, its OpenAPI 3.1
// document: what is not derived from the operations' declarations (the
// headers, the problem types, idemflow's own routes, and the neutral
// templates a declared operation's paths are derived from), written once,
// and WithOperations, which writes each declaration in: its paths (its
// own, or derived), its request schema, its answer's schema (a component),
// its reads and its links. The gateway serves the result and the tests
// check every exchange against it; a rule of a request (a length, an
// enum, a required field) or a field of an answer is written in its
// declaration alone, and no built-in is named here.
package apispec

import (
	"cmp"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/idemflow/idemflow/internal/problem"
	"github.com/idemflow/idemflow/op"
)

//go:embed openapi.json
var document []byte

// Document returns the contract document (a copy).
func Document() []byte { return append([]byte(nil), document...) }

// KeySchema is the rule for an Idempotency-Key as a JSON string: 1 to 255
// visible ASCII characters other than the comma (idem.ParseKey's rule).
func KeySchema(description string) map[string]any {
	return map[string]any{"type": "string", "minLength": 1, "maxLength": 255,
		"pattern": `^[!-+\--~]+$`, "description": description}
}

func dig(v any, path ...string) any {
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

// WithOperations returns the contract with each declared operation: the
// path items its declaration writes (op.Spec.Paths, a built-in's), else a
// POST at its route derived from the document's neutral intent template
// (x-templates, which the served document does not carry), with the
// operation's answer schema on its 201. Either way the request schema is
// the declaration's. Each operation's answer schema is a component
// (addAnswers), each of its reads a GET path (addReads) and each of its
// links is written on its answers (addLinks).
func WithOperations(ops []*op.Operation) ([]byte, error) {
	var doc map[string]any
	if err := json.Unmarshal(document, &doc); err != nil {
		return nil, fmt.Errorf("apispec: %w", err)
	}
	paths, _ := doc["paths"].(map[string]any)
	template, ok := dig(doc, "x-templates", "intent").(map[string]any)
	if !ok {
		return nil, errors.New("apispec: the contract has no x-templates.intent to derive operations from")
	}
	readTemplate, ok := dig(doc, "x-templates", "read").(map[string]any)
	if !ok {
		return nil, errors.New("apispec: the contract has no x-templates.read to derive reads from")
	}
	delete(doc, "x-templates")
	if err := addPaths(paths, ops); err != nil {
		return nil, err
	}
	answers, err := addAnswers(doc, ops)
	if err != nil {
		return nil, err
	}
	for _, o := range ops {
		schema, err := deepCopy(o.BodySchema())
		if err != nil {
			return nil, err
		}
		noNUL(schema)
		body := map[string]any{"required": !o.EmptyBodyAllowed(), "content": map[string]any{
			"application/json": map[string]any{"schema": schema}}}
		if item, ok := dig(paths, o.Route, "post").(map[string]any); ok {
			// A built-in operation's path is written in the document, but
			// for its request's schema: that is the declaration's.
			if _, written := item["requestBody"]; written {
				return nil, fmt.Errorf("apispec: operation %s: the document writes the body of %s itself; its schema is the declaration's", o.Name, o.Route)
			}
			item["requestBody"] = body
			declareIntent(item, o)
			continue
		}
		item, err := deepCopy(template)
		if err != nil {
			return nil, err
		}
		item["operationId"] = o.Name
		item["summary"] = o.Name + ", exactly once"
		item["description"] = o.Description + "\n\n" + keyRule
		item["requestBody"] = body
		params, _ := item["parameters"].([]any)
		for _, p := range o.PathParams {
			params = append(params, map[string]any{"name": p, "in": "path", "required": true, "schema": map[string]any{"type": "string"}})
		}
		item["parameters"] = params
		declareIntent(item, o)
		responses := item["responses"].(map[string]any)
		delete(responses, "404")
		created := responses["201"].(map[string]any)
		created["content"] = map[string]any{"application/json": map[string]any{"schema": answers.of(o)}}
		item["tags"] = []any{"declared operations"}
		if !o.HasStep() {
			toolResponses(responses)
			item["tags"] = []any{"HTTP tools"}
		}
		paths[o.Route] = map[string]any{"post": item}
	}
	if err := addReads(paths, ops, answers, readTemplate); err != nil {
		return nil, err
	}
	if err := addLinks(paths, ops); err != nil {
		return nil, err
	}
	if err := enumerateProblems(paths, ops); err != nil {
		return nil, err
	}
	return json.Marshal(doc)
}

// declareIntent publishes an operation's intent fields (op.Spec.Intent)
// on its POST, as x-idemflow-intent (the fields and their rules, none
// when the whole request makes the intent), and takes the
// Idempotency-Fingerprint header that asks for them and the
// Idempotency-Origin header that names the call.
func declareIntent(item map[string]any, o *op.Operation) {
	fields := []any{}
	for _, f := range o.Intent {
		fields = append(fields, map[string]any{"name": f.Name, "norm": string(f.Norm)})
	}
	item["x-idemflow-intent"] = map[string]any{"fields": fields}
	params, _ := item["parameters"].([]any)
	item["parameters"] = append(params, map[string]any{"$ref": "#/components/parameters/IdempotencyFingerprint"},
		map[string]any{"$ref": "#/components/parameters/IdempotencyOrigin"})
}

// NoNULPattern is the rule of every string idemflow stores: no U+0000,
// which PostgreSQL's text and jsonb cannot hold (ijson refuses it).
const NoNULPattern = `^[^\x00]*$`

// noNUL writes NoNULPattern into every string of a request schema that has
// no pattern of its own (one that has is written to exclude it), so that
// the contract refuses what the server refuses (Schemathesis sent U+0000 in
// a reason and got a 400 for schema-valid data).
func noNUL(schema any) {
	switch s := schema.(type) {
	case map[string]any:
		if isString(s["type"]) {
			if _, ok := s["pattern"]; !ok && s["enum"] == nil && s["const"] == nil {
				s["pattern"] = NoNULPattern
			}
		}
		for _, k := range []string{"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"} {
			if m, ok := s[k].(map[string]any); ok {
				for _, v := range m {
					noNUL(v)
				}
			}
		}
		for _, k := range []string{"items", "additionalProperties", "contains", "not", "if", "then", "else", "propertyNames", "unevaluatedItems", "unevaluatedProperties"} {
			noNUL(s[k])
		}
		for _, k := range []string{"allOf", "anyOf", "oneOf", "prefixItems"} {
			noNUL(s[k])
		}
	case []any:
		for _, v := range s {
			noNUL(v)
		}
	}
}

func isString(t any) bool {
	switch t := t.(type) {
	case string:
		return t == "string"
	case []any:
		for _, v := range t {
			if v == "string" {
				return true
			}
		}
	}
	return false
}

// HeaderOperationID names the intent's operation on its answers, so that
// GET /v1/operations/{id} can be read from any of them (a link follows
// it).
const HeaderOperationID = "Operation-Id"

// addPaths writes the path items the operations' declarations carry
// (op.Spec.Paths). A path that the document or another declaration
// already writes is an error: each path has one author.
func addPaths(paths map[string]any, ops []*op.Operation) error {
	for _, o := range ops {
		if len(o.Paths) == 0 {
			continue
		}
		var items map[string]any
		if err := json.Unmarshal(o.Paths, &items); err != nil {
			return fmt.Errorf("apispec: operation %s: its paths: %w", o.Name, err)
		}
		for path, item := range items {
			if _, written := paths[path]; written {
				return fmt.Errorf("apispec: operation %s: the path %s is written twice", o.Name, path)
			}
			paths[path] = item
		}
	}
	return nil
}

// addReads writes each operation's GET routes (op.Read) that no path item
// describes: from the document's read template, with the route's
// parameters and the operation's answer schema.
func addReads(paths map[string]any, ops []*op.Operation, answers answerRefs, template map[string]any) error {
	for _, o := range ops {
		for i, rd := range o.Reads {
			if _, written := dig(paths, rd.Route, "get").(map[string]any); written {
				continue // a built-in's, described in the document
			}
			item, err := deepCopy(template)
			if err != nil {
				return err
			}
			item["operationId"] = cmp.Or(rd.OperationID, fmt.Sprintf("%s_read%d", o.Name, i+1))
			item["summary"] = cmp.Or(rd.Summary, "Read what "+o.Name+" wrote")
			item["description"] = rd.Description
			var params []any
			for _, name := range op.RouteParams(rd.Route) {
				params = append(params, map[string]any{"name": name, "in": "path", "required": true, "schema": map[string]any{"type": "string"}})
			}
			item["parameters"] = params
			item["tags"] = []any{"declared operations"}
			ok := item["responses"].(map[string]any)["200"].(map[string]any)
			ok["content"] = map[string]any{"application/json": map[string]any{"schema": answers.of(o)}}
			pathItem, _ := paths[rd.Route].(map[string]any)
			if pathItem == nil {
				pathItem = map[string]any{}
				paths[rd.Route] = pathItem
			}
			pathItem["get"] = item
		}
	}
	return nil
}

// answerRefs are the components that hold the operations' answers'
// schemas, by operation.
type answerRefs map[*op.Operation]string

// of is o's answer's schema in a response: its component, or an object
// the declaration does not describe.
func (a answerRefs) of(o *op.Operation) map[string]any {
	if name, ok := a[o]; ok {
		return map[string]any{"$ref": "#/components/schemas/" + name}
	}
	return map[string]any{"type": "object", "description": "the operation's answer"}
}

// addAnswers writes each declared answer schema (op.Spec.Answer) into the
// document's components, named by its title or its operation's name.
// Operations may share one schema (an order's four actions); a name that
// two schemas, or a declaration and the document, both claim is an error.
func addAnswers(doc map[string]any, ops []*op.Operation) (answerRefs, error) {
	schemas, ok := dig(doc, "components", "schemas").(map[string]any)
	if !ok {
		return nil, errors.New("apispec: the contract has no components.schemas")
	}
	refs := answerRefs{}
	owner := map[string]*op.Schema{}
	for _, o := range ops {
		if o.Answer == nil {
			continue
		}
		name := cmp.Or(o.Answer.Title, o.Name)
		if prev, ok := owner[name]; ok && prev != o.Answer {
			return nil, fmt.Errorf("apispec: operation %s: another declaration's answer is named %s", o.Name, name)
		}
		if _, written := schemas[name]; written && owner[name] == nil {
			return nil, fmt.Errorf("apispec: operation %s: the document writes schema %s itself; an answer's schema is its declaration's", o.Name, name)
		}
		raw, err := json.Marshal(o.Answer)
		if err != nil {
			return nil, fmt.Errorf("apispec: operation %s: its answer's schema: %w", o.Name, err)
		}
		var schema map[string]any
		if err := json.Unmarshal(raw, &schema); err != nil {
			return nil, err
		}
		schemas[name], owner[name], refs[o] = schema, o.Answer, name
	}
	return refs, nil
}

// addLinks writes the links a client (or Schemathesis's stateful run)
// follows from an answer to the next call: from every intent's answer
// (any 2xx, idemflow's 202 included) to its operation, through the
// Operation-Id header; and each declaration's own (op.Spec.Links) on its
// POST's 2xx answers but the 202. A link to an operationId the document
// does not have is an error.
func addLinks(paths map[string]any, ops []*op.Operation) error {
	operation := map[string]any{"operationId": "getOperation",
		"parameters":  map[string]any{"id": "$response.header." + HeaderOperationID},
		"description": "The intent's operation: its state and stored answer."}
	ids := map[string]bool{}
	for _, item := range paths {
		for _, m := range item.(map[string]any) {
			if id, ok := dig(m, "operationId").(string); ok {
				ids[id] = true
			}
		}
		post, ok := dig(item, "post").(map[string]any)
		if !ok {
			continue
		}
		responses, _ := post["responses"].(map[string]any)
		if _, intent := responses["202"]; !intent {
			continue // not an intent (no key, nothing runs)
		}
		for code, r := range responses {
			if code[0] != '2' {
				continue
			}
			answer := r.(map[string]any)
			headers, _ := answer["headers"].(map[string]any)
			if headers == nil {
				headers = map[string]any{}
				answer["headers"] = headers
			}
			headers[HeaderOperationID] = map[string]any{"$ref": "#/components/headers/" + HeaderOperationID}
			link(answer, "getOperation", operation)
		}
	}
	for _, o := range ops {
		if len(o.Links) == 0 {
			continue
		}
		responses, ok := dig(paths, o.Route, "post", "responses").(map[string]any)
		if !ok {
			return fmt.Errorf("apispec: operation %s: no POST %s to link from", o.Name, o.Route)
		}
		for _, l := range o.Links {
			if !ids[l.OperationID] {
				return fmt.Errorf("apispec: operation %s: link %s leads to operationId %s, which the contract does not have", o.Name, l.Name, l.OperationID)
			}
			target := map[string]any{"operationId": l.OperationID}
			if len(l.Parameters) > 0 {
				params := map[string]any{}
				for k, v := range l.Parameters {
					params[k] = v
				}
				target["parameters"] = params
			}
			if l.Description != "" {
				target["description"] = l.Description
			}
			for code, r := range responses {
				if code[0] == '2' && code != "202" {
					link(r.(map[string]any), l.Name, target)
				}
			}
		}
	}
	return nil
}

func link(answer map[string]any, name string, l map[string]any) {
	links, _ := answer["links"].(map[string]any)
	if links == nil {
		links = map[string]any{}
		answer["links"] = links
	}
	links[name] = l
}

// enumerateProblems lists the problem types GET /problems/{slug}
// describes (idemflow's, and each operation's rejection codes), so that a
// slug is one of them rather than any string.
func enumerateProblems(paths map[string]any, ops []*op.Operation) error {
	params, ok := dig(paths, "/problems/{slug}", "get", "parameters").([]any)
	if !ok || len(params) == 0 {
		return errors.New("apispec: the contract has no GET /problems/{slug} parameter")
	}
	var slugs []any
	seen := map[string]bool{}
	add := func(slug string) {
		if !seen[slug] {
			seen[slug] = true
			slugs = append(slugs, slug)
		}
	}
	for _, typ := range problem.Types() {
		add(strings.TrimPrefix(typ, "/problems/"))
	}
	for _, o := range ops {
		for code := range o.Rejections {
			add(code)
		}
	}
	sort.Slice(slugs, func(i, j int) bool { return slugs[i].(string) < slugs[j].(string) })
	params[0].(map[string]any)["schema"] = map[string]any{"type": "string", "enum": slugs}
	return nil
}

// toolResponses rewrites a declared operation's answers for an HTTP tool,
// whose answer is its downstream's: any 2xx (a 202 too, told apart from
// idemflow's own still-running 202 by Idempotent-Replayed), any 4xx as the
// downstream's rejection, each with the downstream's own media type, and
// 502 for a call whose outcome is unknown for good.
func toolResponses(responses map[string]any) {
	anyBody := map[string]any{"*/*": map[string]any{"schema": map[string]any{}}}
	created := responses["201"]
	delete(responses, "201")
	answer := created.(map[string]any)
	answer["description"] = "The downstream's answer (any 2xx) as it came: its status, body and Content-Type, or (Idempotent-Replayed: true) the first answer again, byte for byte."
	answer["content"] = anyBody
	responses["2XX"] = answer
	accepted := responses["202"].(map[string]any)
	accepted["description"] = "Either idemflow's own 202, still running (Location: /v1/operations/{id}, an Operation body, no Idempotent-Replayed): poll Location or retry with the same key; " +
		"or the downstream's own 202, its settled answer as it came (Idempotent-Replayed: false, or true on a replay): the call took effect as the downstream accepted it, and nothing is to be polled at idemflow."
	accepted["headers"].(map[string]any)["Idempotent-Replayed"] = map[string]any{"$ref": "#/components/headers/Idempotent-Replayed"}
	// Either body: idemflow's Operation, or the downstream's own, JSON or not.
	accepted["content"] = map[string]any{"application/json": map[string]any{"schema": map[string]any{}}, "*/*": anyBody["*/*"]}
	for code, r := range responses {
		if code[0] != '4' {
			continue
		}
		content := r.(map[string]any)["content"].(map[string]any)
		content["*/*"] = anyBody["*/*"]
	}
	responses["4XX"] = map[string]any{
		"description": "With Idempotent-Replayed: the downstream rejected the call (a 4xx other than 408, 409, 425 and 429): nothing happened there; its answer as it came, stored and replayed. " +
			"The key is spent on these parameters: a retry with the same key and body sends the call again, other parameters need a new key. Without Idempotent-Replayed it is idemflow's own refusal, as described for each status.",
		"headers": map[string]any{"Idempotent-Replayed": map[string]any{"$ref": "#/components/headers/Idempotent-Replayed"}},
		"content": anyBody,
	}
	responses["502"] = map[string]any{
		"description": "/problems/outcome-unknown: the call got no answer that says whether it took effect, and may not be sent again (an at_most_once tool, or a resend the downstream refused). Final: it is never sent again under this key, and a retry replays this answer.",
		"headers":     map[string]any{"Idempotent-Replayed": map[string]any{"$ref": "#/components/headers/Idempotent-Replayed"}},
		"content":     map[string]any{"application/problem+json": map[string]any{"schema": map[string]any{"$ref": "#/components/schemas/Problem"}}},
	}
}

const keyRule = "Make the key ONCE per intent and send the SAME key with the SAME body on every retry: the first answer is then returned again, " +
	"marked Idempotent-Replayed: true, and the effect happens at most once. The same key with other parameters is refused with 422 /problems/idempotency-key-reused."

func deepCopy(v map[string]any) (map[string]any, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out map[string]any
	return out, json.Unmarshal(raw, &out)
}
