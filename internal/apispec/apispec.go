// Package apispec holds the gateway's HTTP contract, its OpenAPI 3.1
// document: what is not derived from the operations' declarations (the
// headers, the problem types, idemflow's own routes, and the built-ins'
// paths with their answers' statuses), written once, and WithOperations,
// which writes each declaration in: its request schema, its answer's
// schema (a component), its reads. The gateway serves the result and the
// tests check every exchange against it; a rule of a request (a length, an
// enum, a required field) or a field of an answer is written in its
// declaration alone.
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

// WithOperations returns the contract with each declared operation's
// request schema: in its path where the document describes it (a built-in
// operation's answers), else in a new path, POST at its route, with the
// answers every intent can get (the ticket's, whose 201 becomes the
// operation's answer schema, or any object). Each operation's answer
// schema is a component (addAnswers) and each of its reads a GET path
// (addReads).
func WithOperations(ops []*op.Operation) ([]byte, error) {
	var doc map[string]any
	if err := json.Unmarshal(document, &doc); err != nil {
		return nil, fmt.Errorf("apispec: %w", err)
	}
	paths, _ := doc["paths"].(map[string]any)
	template, ok := dig(doc, "paths", "/v1/tickets", "post").(map[string]any)
	if !ok {
		return nil, errors.New("apispec: the contract has no POST /v1/tickets to derive operations from")
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
	if err := addReads(paths, ops, answers); err != nil {
		return nil, err
	}
	if err := addLinks(paths); err != nil {
		return nil, err
	}
	if err := enumerateProblems(paths, ops); err != nil {
		return nil, err
	}
	return json.Marshal(doc)
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

// addReads writes each operation's GET routes (op.Read) that the document
// does not: from the document's GET /v1/tickets/{id}, with the route's
// parameters and a body the declaration does not describe further.
func addReads(paths map[string]any, ops []*op.Operation, answers answerRefs) error {
	template, ok := dig(paths, "/v1/tickets/{id}", "get").(map[string]any)
	if !ok {
		return errors.New("apispec: the contract has no GET /v1/tickets/{id} to derive reads from")
	}
	for _, o := range ops {
		for i, rd := range o.Reads {
			if _, written := dig(paths, rd.Route, "get").(map[string]any); written {
				continue // a built-in's, described in the document
			}
			item, err := deepCopy(template)
			if err != nil {
				return err
			}
			item["operationId"] = fmt.Sprintf("%s_read%d", o.Name, i+1)
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
// Operation-Id header; from a ticket to its read; from an order, and from
// each transition of it, to its read and its transitions.
func addLinks(paths map[string]any) error {
	operation := map[string]any{"operationId": "getOperation",
		"parameters":  map[string]any{"id": "$response.header." + HeaderOperationID},
		"description": "The intent's operation: its state and stored answer."}
	for _, item := range paths {
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
	ticket, ok := dig(paths, "/v1/tickets", "post", "responses", "201").(map[string]any)
	if !ok {
		return errors.New("apispec: the contract has no 201 of POST /v1/tickets to link from")
	}
	link(ticket, "getTicket", map[string]any{"operationId": "getTicket", "parameters": map[string]any{"id": "$response.body#/ticket_id"}})
	transitions := []string{"getOrder", "payOrder", "cancelOrder", "refundOrder", "fulfillOrder"}
	orderLinks := func(answer map[string]any, orderNo string) {
		for _, id := range transitions {
			link(answer, id, map[string]any{"operationId": id, "parameters": map[string]any{"order_no": orderNo}})
		}
	}
	created, ok := dig(paths, "/v1/orders", "post", "responses", "201").(map[string]any)
	if !ok {
		return errors.New("apispec: the contract has no 201 of POST /v1/orders to link from")
	}
	orderLinks(created, "$response.body#/order_no")
	for _, action := range []string{"pay", "cancel", "refund", "fulfill"} {
		done, ok := dig(paths, "/v1/orders/{order_no}/"+action, "post", "responses", "200").(map[string]any)
		if !ok {
			return fmt.Errorf("apispec: the contract has no 200 of POST /v1/orders/{order_no}/%s to link from", action)
		}
		orderLinks(done, "$request.path.order_no")
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
