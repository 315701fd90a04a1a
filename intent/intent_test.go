package intent_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/idemflow/idemflow/intent"
)

// vector is one entry of clients/testdata/keys.json's "intent": the rules
// every client shares.
type vector struct {
	Name      string          `json:"name"`
	Fields    intent.Fields   `json:"fields"`
	Args      json.RawMessage `json:"args"`
	Canonical string          `json:"canonical"`
}

func TestTheSharedVectorsNormaliseAsTheOtherClientsDo(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "clients", "testdata", "keys.json"))
	if err != nil {
		t.Fatal(err)
	}
	var all struct {
		Intent []vector `json:"intent"`
	}
	if err := json.Unmarshal(raw, &all); err != nil {
		t.Fatal(err)
	}
	if len(all.Intent) < 15 {
		t.Fatalf("%d intent vectors: the file lost them", len(all.Intent))
	}
	for _, v := range all.Intent {
		if err := v.Fields.Validate(nil); err != nil {
			t.Errorf("%s: %v", v.Name, err)
			continue
		}
		got, err := v.Fields.Canonical(v.Args)
		if err != nil {
			t.Errorf("%s: %v", v.Name, err)
		} else if got != v.Canonical {
			t.Errorf("%s: %s\n got %s\nwant %s", v.Name, v.Args, got, v.Canonical)
		}
	}
}

func TestADeclarationIsChecked(t *testing.T) {
	for _, c := range []struct {
		fields intent.Fields
		want   string
	}{
		{intent.Fields{{Name: "customer_id", Norm: "fuzzy"}}, `intent field customer_id: norm "fuzzy" is none of [id text number set exact]`},
		{intent.Fields{{Name: "a", Norm: intent.ID}, {Name: "a", Norm: intent.Text}}, "intent field a: named twice"},
		{intent.Fields{{Name: "nope", Norm: intent.ID}}, "intent field nope: the request has no such member"},
		{intent.Fields{{Name: "a.b", Norm: intent.ID}}, `intent field "a.b": not a member name`},
	} {
		err := c.fields.Validate([]string{"a", "customer_id"})
		if err == nil || err.Error() != c.want {
			t.Errorf("%v: %v, want %s", c.fields, err, c.want)
		}
	}
	if err := (intent.Fields{{Name: "customer_id", Norm: intent.ID}}).Validate([]string{"customer_id"}); err != nil {
		t.Error(err)
	}
}
