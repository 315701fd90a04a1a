package tickets_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/idemflow/idemflow/internal/ops/tickets"
	"github.com/idemflow/idemflow/internal/tooling/docs"
)

// The README's table of a ticket's fields says what the declaration's
// schema enforces: a rule is written in tickets.Create, and the table is
// held to it, so the two cannot drift.
func TestTheReadmeTicketTableIsTheDeclaration(t *testing.T) {
	b, err := docs.Read("../../..")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| string \\| (.+) \\|$").FindAllStringSubmatch(b, -1) {
		rows[m[1]] = strings.ReplaceAll(m[2], " ", "")
	}
	schema := tickets.Create.RequestSchema()
	props := schema["properties"].(map[string]any)
	required := fmt.Sprint(schema["required"])
	for name, p := range props {
		rule, ok := rows[name]
		if !ok {
			t.Errorf("the README's ticket table has no row for %s", name)
			continue
		}
		prop := p.(map[string]any)
		if max, ok := prop["maxLength"].(float64); ok && !strings.Contains(rule, fmt.Sprint(max)) {
			t.Errorf("%s: the README says %q, the declaration allows at most %v", name, rule, max)
		}
		if enum, ok := prop["enum"].([]any); ok {
			for _, v := range enum {
				if !strings.Contains(rule, fmt.Sprintf("`%v`", v)) {
					t.Errorf("%s: the README's %q lacks %v", name, rule, v)
				}
			}
		}
		if strings.Contains(required, name) != strings.HasPrefix(rule, "required") {
			t.Errorf("%s: required in the declaration: %v; the README says %q", name, strings.Contains(required, name), rule)
		}
	}
}
