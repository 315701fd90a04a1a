package httptool_test

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/idemflow/idemflow/httptool"
	"github.com/idemflow/idemflow/internal/tooling/docs"
	"github.com/idemflow/idemflow/op"
	"gopkg.in/yaml.v3"
)

func env(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
}

const good = `
tools:
  - name: refund_create
    description: Refund part of a captured payment.
    input_schema:
      type: object
      additionalProperties: false
      required: [payment_id, amount_cents]
      properties:
        payment_id: {type: string, maxLength: 64}
        amount_cents: {type: integer, minimum: 1}
    call:
      method: POST
      url: http://billing.internal:9000/refunds
      headers: {Authorization: "Bearer ${BILLING_TOKEN}"}
      key_header: Idempotency-Key
      key_field: external_id
      timeout: 5s
    lookup:
      url: http://billing.internal:9000/refunds?external_id={key}
`

// The issue's own example loads, as a route, a tool and an operation.
func TestTheIssuesExampleLoads(t *testing.T) {
	s, err := httptool.Parse([]byte(good), env(map[string]string{"BILLING_TOKEN": "s3cret"}))
	if err != nil {
		t.Fatal(err)
	}
	tool, ok := s.Of("tool.refund_create")
	if !ok {
		t.Fatal("no tool.refund_create")
	}
	o := tool.Op
	if o.Route != "/v1/tools/refund_create" || o.Tool != "refund_create" || o.HasStep() {
		t.Fatalf("route %s tool %s step %v", o.Route, o.Tool, o.HasStep())
	}
	if tool.Mode() != "key_header+lookup" || tool.Timeout().String() != "5s" {
		t.Fatalf("mode %s timeout %s", tool.Mode(), tool.Timeout())
	}
	if _, err := o.Prepare([]byte(`{"payment_id":"p1","amount_cents":0}`), nil); err == nil ||
		!strings.Contains(err.Error(), "amount_cents") {
		t.Fatalf("the schema's minimum is not enforced: %v", err)
	}
	// Bodies are I-JSON, as every operation's: one name twice is refused,
	// not read as its last value.
	if _, err := o.Prepare([]byte(`{"payment_id":"p1","amount_cents":100,"amount_cents":1}`), nil); err == nil ||
		!strings.Contains(err.Error(), "appears twice") {
		t.Fatalf("a duplicate member: %v", err)
	}
	a, err := o.Prepare([]byte(`{"payment_id":"p1","amount_cents":100}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := o.Prepare([]byte(` { "amount_cents" : 1e2, "payment_id":"p1"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.Fingerprint != b.Fingerprint {
		t.Fatal("two spellings of one request have two fingerprints")
	}
}

// A tool's intent fields (intent: in its YAML) are what a caller keyed
// by them is compared on: the payment and the amount, never a note.
func TestAToolsIntentFieldsAreItsFingerprintForACallerKeyedByThem(t *testing.T) {
	file := strings.Replace(good, "    call:\n", "    intent: [{name: payment_id, norm: id}, {name: amount_cents, norm: number}]\n    call:\n", 1)
	file = strings.Replace(file, "        amount_cents: {type: integer, minimum: 1}\n", "        amount_cents: {type: integer, minimum: 1}\n        note: {type: string}\n", 1)
	s, err := httptool.Parse([]byte(file), env(map[string]string{"BILLING_TOKEN": "s3cret"}))
	if err != nil {
		t.Fatal(err)
	}
	tool, _ := s.Of("tool.refund_create")
	fp := func(body string, by op.FingerprintBy) string {
		t.Helper()
		p, err := tool.Op.PrepareAs([]byte(body), nil, by)
		if err != nil {
			t.Fatal(err)
		}
		return p.Fingerprint
	}
	first := fp(`{"payment_id":"p1","amount_cents":100,"note":"customer asked"}`, op.ByIntent)
	if again := fp(`{"payment_id":" p1","amount_cents":1e2,"note":"the customer wants it back"}`, op.ByIntent); again != first {
		t.Fatal("a reworded note is another intent")
	}
	if other := fp(`{"payment_id":"p1","amount_cents":200,"note":"customer asked"}`, op.ByIntent); other == first {
		t.Fatal("another amount is the same intent")
	}
	if whole := fp(`{"payment_id":"p1","amount_cents":100,"note":"customer asked"}`, op.ByBody); whole == first {
		t.Fatal("the whole-body fingerprint is the intent's")
	}
}

// A file that cannot work is refused at start-up, with the tool and the
// field named; a secret's value is never in the error.
func TestABadToolsFileIsRefusedNamingTheToolAndField(t *testing.T) {
	vars := env(map[string]string{"BILLING_TOKEN": "s3cret"})
	edit := func(from, to string) string {
		if !strings.Contains(good, from) {
			t.Fatalf("the example has no %q", from)
		}
		return strings.Replace(good, from, to, 1)
	}
	neither := edit("      key_header: Idempotency-Key\n", "")
	neither = strings.Replace(neither, "    lookup:\n      url: http://billing.internal:9000/refunds?external_id={key}\n", "", 1)
	for _, c := range []struct{ name, file, want string }{
		{"neither key_header nor lookup", neither, "tool refund_create: call.key_header, lookup: a tool needs one of them"},
		{"at_most_once beside them", edit("    call:\n", "    at_most_once: true\n    call:\n"), "tool refund_create: at_most_once:"},
		{"a method that reads", edit("method: POST", "method: GET"), `tool refund_create: call.method: "GET"`},
		{"a relative URL", edit("url: http://billing.internal:9000/refunds\n", "url: /refunds\n"), "tool refund_create: call.url:"},
		{"a lookup without {key}", edit("external_id={key}", "external_id=x"), "tool refund_create: lookup.url: must hold {key}"},
		{"a found_status that is no success", edit("external_id={key}\n", "external_id={key}\n      found_status: 404\n"), "tool refund_create: lookup.found_status: 404 is not a 2xx"},
		{"a timeout past the bound", edit("timeout: 5s", "timeout: 30s"), "tool refund_create: call.timeout:"},
		{"a replayed_header that is no header name", edit("      key_header: Idempotency-Key\n", "      key_header: Idempotency-Key\n      replayed_header: 'Replayed: yes'\n"), "tool refund_create: call.replayed_header:"},
		{"a replayed_header without key_header", edit("      key_header: Idempotency-Key\n", "      replayed_header: Idempotent-Replayed\n"), "tool refund_create: call.replayed_header: needs call.key_header"},
		{"an unset variable", edit("${BILLING_TOKEN}", "${BILLING_KEY}"), "tool refund_create: call.headers.Authorization: $BILLING_KEY is not set"},
		{"a key field the agent sends", edit("maxLength: 64}", "maxLength: 64}\n        external_id: {type: string}"), "tool refund_create: call.key_field:"},
		{"a bad name", edit("name: refund_create", "name: Refund-Create"), "tool Refund-Create: name"},
		{"no description", edit("description: Refund part of a captured payment.", "description: ''"), "tool refund_create: description: is required"},
		{"a schema that is no object", edit("type: object\n      additionalProperties", "type: array\n      additionalProperties"), "tool refund_create: input_schema:"},
		{"a schema that does not compile", edit("minimum: 1", "minimum: one"), "tool refund_create: input_schema:"},
		{"an unknown field", edit("    call:\n", "    cal:\n      x: 1\n    call:\n"), "field cal not found"},
		{"one name twice", good + strings.TrimPrefix(good, "\ntools:\n"), "tool refund_create: name: declared twice"},
		{"no tool", "tools: []\n", "declares no tool"},
		{"an intent field the input lacks", edit("    call:\n", "    intent: [{name: order_id, norm: id}]\n    call:\n"), "tool refund_create: intent field order_id: the request has no such member"},
		{"an intent rule that is none", edit("    call:\n", "    intent: [{name: amount_cents, norm: money}]\n    call:\n"), `tool refund_create: intent field amount_cents: norm "money" is none of`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := httptool.Parse([]byte(c.file), vars)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one with %q", err, c.want)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Fatalf("the error shows a secret: %v", err)
			}
		})
	}
}

// at_most_once makes a tool with neither mode acceptable.
func TestAtMostOnceIsTheOnlyWayWithNeitherMode(t *testing.T) {
	file := `
tools:
  - name: send_mail
    description: Send one e-mail.
    at_most_once: true
    input_schema: {type: object, properties: {to: {type: string}}}
    call: {method: POST, url: "http://mailer:8025/send"}
`
	s, err := httptool.Parse([]byte(file), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if m := s.Tools()[0].Mode(); m != "at_most_once" {
		t.Fatalf("mode %q", m)
	}
}

// The example file in examples/ is one the loader accepts.
func TestTheExampleToolsFileLoads(t *testing.T) {
	if _, err := os.Stat("../examples/http_tools/tools.yaml"); err != nil {
		t.Fatal(err)
	}
	s, err := httptool.Load("../examples/http_tools/tools.yaml", env(map[string]string{"BILLING_TOKEN": "t"}))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Tools()) != 2 {
		t.Fatalf("%d tools", len(s.Tools()))
	}
}

// The README's "HTTP tools" file is examples/http_tools/tools.yaml: the
// same tools, field for field (their comments differ).
func TestTheReadmeToolsFileIsTheExample(t *testing.T) {
	readme, err := docs.Read("..")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(readme, "\n# HTTP tools\n")
	_, block, ok2 := strings.Cut(section, "```yaml\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("the README has no HTTP tools section with a yaml block")
	}
	example, err := os.ReadFile("../examples/http_tools/tools.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var a, b httptool.File
	if err := yaml.Unmarshal([]byte(block), &a); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(example, &b); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("the README's file:\n%+v\nthe example:\n%+v", a, b)
	}
}
