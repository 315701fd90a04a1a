package ijson

import (
	"strings"
	"testing"
)

// An integer is a value, however it is written: 1.0 and 1e2 decode into
// an int as 1 and 100 (JSON Schema's integer, and RFC 8785's number, which
// the fingerprint reads), as a plain 1 does. A fractional value, one out of
// the field's range and a string are refused, naming the field.
func TestAnIntegerWrittenWithAFractionOrExponentIsAnInteger(t *testing.T) {
	type body struct {
		N  int    `json:"n"`
		U8 uint8  `json:"u8"`
		U  uint   `json:"u"`
		I  int64  `json:"i"`
		P  *int32 `json:"p"`
	}
	for _, c := range []struct {
		in   string
		want body
	}{
		{`{"n": 1.0, "u8": 2e0, "u": 3.00, "i": -4.0, "p": 5E1}`, body{N: 1, U8: 2, U: 3, I: -4}},
		{`{"n": -0.0, "i": 9007199254740991.0}`, body{I: 9007199254740991}},
		{`{"n": 12}`, body{N: 12}},
	} {
		var got body
		if err := Decode([]byte(c.in), &got); err != nil {
			t.Fatalf("%s: %v", c.in, err)
		}
		if got.P != nil {
			if *got.P != 50 {
				t.Fatalf("%s: p = %d, want 50", c.in, *got.P)
			}
			got.P = nil
		}
		if got != c.want {
			t.Fatalf("%s: %+v, want %+v", c.in, got, c.want)
		}
	}
	for _, c := range []struct{ in, field string }{
		{`{"n": 1.5}`, "n: must be an integer"},
		{`{"u8": 256}`, "u8: must be an integer"},
		{`{"u8": 2.56e2}`, "u8: must be an integer"},
		{`{"u": -1}`, "u: must be an integer"},
		{`{"n": "1"}`, "n: must be an integer, got JSON string"},
		{`{"n": 1e300}`, "n: "},
	} {
		var got body
		err := Decode([]byte(c.in), &got)
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Fatalf("%s: %v, want an error naming %q", c.in, err, c.field)
		}
	}
}
