package ijson_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/idemflow/idemflow/internal/apperr"
	"github.com/idemflow/idemflow/internal/ijson"
)

// Every number I-JSON says cannot be exchanged exactly is refused, naming
// its field; every other number passes, however it is spelled.
func TestNumbersThatCannotBeExchangedExactlyAreRefused(t *testing.T) {
	for _, n := range []string{
		"9007199254740992", "-9007199254740992", "9007199254740993", "18014398509481984",
		"1e16", "1E300", "123456789012345678901234567890", "9007199254740993.0",
		"1e400", "-1e400", "1e-400", "0.10000000000000001", "3.14159265358979323846",
		"1e99999999999999999999", "1e-99999999999999999999", "1.5e300", "1.7976931348623157e308",
	} {
		var v map[string]any
		err := ijson.Decode([]byte(`{"a":1,"items":[{"n":`+n+`}]}`), &v)
		var inv *apperr.InvalidError
		if !errors.As(err, &inv) || len(inv.Fields) != 1 || inv.Fields[0].Field != "items[0].n" {
			t.Errorf("%s: got %v, want an error naming items[0].n", n, err)
		}
	}
	for _, n := range []string{
		"0", "-0", "0.0", "1", "-1", "1.0", "1.50", "0.1", "1e2", "1E+2", "2.5e-3", "9007199254740991",
		"-9007199254740991", "900719925474099.1", "0.30000000000000004", "2.2250738585072014e-308", "5e-324",
		"123456789012345.5", "1.5e-300", "0.00000000000000000001", "4503599627370495.5",
	} {
		var v map[string]any
		if err := ijson.Decode([]byte(`{"n":`+n+`}`), &v); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
}

// All of them are named, not only the first; a long digit run inside a
// string is no number.
func TestEveryInexactNumberIsNamed(t *testing.T) {
	var v map[string]any
	err := ijson.Decode([]byte(`{"a":9007199254740993,"s":"12345678901234567890e5","b":[1,1e400]}`), &v)
	var inv *apperr.InvalidError
	if !errors.As(err, &inv) || len(inv.Fields) != 2 || inv.Fields[0].Field != "a" || inv.Fields[1].Field != "b[1]" {
		t.Fatalf("got %v, want errors naming a and b[1]", err)
	}
	if !strings.Contains(inv.Fields[0].Reason, "9007199254740991") {
		t.Errorf("the reason does not say the limit: %q", inv.Fields[0].Reason)
	}
}
