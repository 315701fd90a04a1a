package gateway

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/internal/apperr"
	"github.com/idemflow/idemflow/internal/ijson"
	"github.com/idemflow/idemflow/internal/ops/tickets"
	"github.com/idemflow/idemflow/starter"
)

func TestParseWait(t *testing.T) {
	for _, tc := range []struct {
		prefer string
		want   time.Duration
		ok     bool
	}{
		{"", starter.DefaultWait, false},
		{"wait=0", 0, true},
		{"respond-async, wait=3", 3 * time.Second, true},
		{"WAIT=2", 2 * time.Second, true},
		{`wait="4"`, 4 * time.Second, true},
		{"wait=3600", starter.MaxWait, true},
		{"wait=-1", starter.DefaultWait, false},
		{"wait=soon", starter.DefaultWait, false},
	} {
		h := http.Header{}
		if tc.prefer != "" {
			h.Set("Prefer", tc.prefer)
		}
		got, ok := parseWait(h)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Prefer %q: %v %v, want %v %v", tc.prefer, got, ok, tc.want, tc.ok)
		}
	}
}

func FuzzParseWait(f *testing.F) {
	for _, s := range []string{"wait=1", "wait=0, x", `wait="9"`, "wait=99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, prefer string) {
		h := http.Header{}
		h.Set("Prefer", prefer)
		if d, _ := parseWait(h); d < 0 || d > starter.MaxWait {
			t.Fatalf("Prefer %q gave wait %v", prefer, d)
		}
	})
}

func FuzzDecodeTicket(f *testing.F) {
	for _, s := range []string{`{"customer_id":"c","title":"t"}`, `{"title":1}`, `{}`, `[]`, `{"a":1}`, `{"customer_id":"c","title":"t"} x`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := tickets.Create.Prepare(body, nil)
		if err == nil {
			if p.Fingerprint == "" {
				t.Fatalf("accepted body %q has no fingerprint", body)
			}
			return
		}
		// Every rejection is a field-level InvalidError: a 400, never a 500.
		var inv *apperr.InvalidError
		if !errors.As(err, &inv) || len(inv.Fields) == 0 {
			t.Fatalf("body %q: %T %v", body, err, err)
		}
	})
}

// I-JSON (RFC 7493): bodies that Go's lenient decoder would read as the
// same request must not pass, or two encodings could share a fingerprint.
func TestDecodeStrictRejectsWhatIJSONForbids(t *testing.T) {
	for _, tc := range []struct {
		name, body, field string
	}{
		{"name in another case", `{"customer_id":"c","Title":"t"}`, "Title"},
		{"duplicate name", `{"customer_id":"c","title":"t","title":"u"}`, "title"},
		{"invalid UTF-8", "{\"customer_id\":\"c\",\"title\":\"\xff\"}", "body"},
		{"NUL in a string", `{"customer_id":"c\u0000","title":"t"}`, "customer_id"},
		{"NUL deep down", `{"customer_id":"c","items":[{"sku":"a\u0000"}]}`, "items[0].sku"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var req struct {
				CustomerID string `json:"customer_id"`
				Title      string `json:"title"`
				Items      []struct {
					SKU string `json:"sku"`
				} `json:"items"`
			}
			err := ijson.Decode([]byte(tc.body), &req)
			var inv *apperr.InvalidError
			if !errors.As(err, &inv) || len(inv.Fields) != 1 || inv.Fields[0].Field != tc.field {
				t.Fatalf("%s: got %v, want an error on %q", tc.body, err, tc.field)
			}
		})
	}
}

// The operation view carries the replay's bytes whatever they are: JSON
// that it writes as it is in result, anything else in result_base64, an
// empty answer (a downstream's 204) as an empty result_base64, never as
// nothing.
func TestTheOperationViewCarriesTheReplaysBytes(t *testing.T) {
	for _, body := range []string{`{"a":1}`, "{\n  \"a\": 1\n}", `{"a":"<b>"}`, "plain text", ""} {
		v := operationOf(idem.Record{Status: idem.StatusSuccess, Response: idem.Outcome{Status: 200, Body: idem.Answer(body)}}).(operationView)
		var got []byte
		switch {
		case v.Result != nil && v.ResultBase64 == nil:
			var buf bytes.Buffer
			_ = json.NewEncoder(&buf).Encode(v)
			var back struct {
				Result json.RawMessage `json:"result"`
			}
			_ = json.Unmarshal(buf.Bytes(), &back)
			got = back.Result
		case v.Result == nil && v.ResultBase64 != nil:
			got, _ = base64.StdEncoding.DecodeString(*v.ResultBase64)
		default:
			t.Fatalf("%q: result %q and result_base64 %v: want exactly one", body, v.Result, v.ResultBase64)
		}
		if string(got) != body {
			t.Errorf("%q: the view gives %q", body, got)
		}
	}
}
