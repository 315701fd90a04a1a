package idem_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/idemflow/idemflow/idem"
)

// An answer reads as JSON in results (the Web UI shows them), comes back
// byte for byte, and a result recorded as base64 before still decodes.
func TestAnswerIsReadableJSONAndRoundTripsByteForByte(t *testing.T) {
	cases := []string{
		`{"ticket_id":"t-1","title":"Printer \u003con\u003e fire"}`,
		`[1,2]`,
		`{"a": 1}`,        // not compact: base64, to keep the bytes
		`{"t":"<b>"}`,     // unescaped: base64
		`"a string"`,      // not an object: base64
		"not json at all", // base64
		`{"broken": `,     // base64
		`{"emoji":"🙂"}`,   // UTF-8 is kept as is
	}
	for _, c := range cases {
		out := idem.Outcome{Status: 201, Body: idem.Answer(c)}
		b, err := json.Marshal(out)
		if err != nil {
			t.Fatal(err)
		}
		var back idem.Outcome
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if !bytes.Equal(back.Body, []byte(c)) {
			t.Errorf("%q came back as %q (via %s)", c, back.Body, b)
		}
	}
	b, _ := json.Marshal(idem.Outcome{Status: 201, Body: idem.Answer(`{"ticket_id":"t-1"}`)})
	if want := `{"status":201,"body":{"ticket_id":"t-1"}}`; string(b) != want {
		t.Errorf("got %s, want %s", b, want)
	}
	// As an idem.Outcome was written before Answer existed.
	var old idem.Outcome
	legacy, _ := json.Marshal(struct {
		Status int    `json:"status"`
		Body   []byte `json:"body"`
	}{201, []byte(`{"ticket_id":"t-1"}`)})
	if err := json.Unmarshal(legacy, &old); err != nil || string(old.Body) != `{"ticket_id":"t-1"}` {
		t.Errorf("legacy %s: %q %v", legacy, old.Body, err)
	}
}
