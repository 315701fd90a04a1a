package idem

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestParseKey(t *testing.T) {
	tests := []struct {
		name, header, want string
		ok                 bool
	}{
		{"uuid", "8e03978e-40d5-43e8-bc93-6894a57f9324", "8e03978e-40d5-43e8-bc93-6894a57f9324", true},
		{"prefixed", "ticket:create:acme:1234", "ticket:create:acme:1234", true},
		{"sf-string form equals bare form", `"abc-1"`, "abc-1", true},
		{"sf-string escapes", `"a\"b\\c"`, `a"b\c`, true},
		{"surrounding space trimmed", "  k1  ", "k1", true},
		{"max length", strings.Repeat("k", 255), strings.Repeat("k", 255), true},
		{"empty", "", "", false},
		{"only spaces", "   ", "", false},
		{"too long", strings.Repeat("k", 256), "", false},
		{"comma", "a,b", "", false},
		{"inner space", "a b", "", false},
		{"tab", "a\tb", "", false},
		{"non-ascii", "clé", "", false},
		{"control", "a\x01b", "", false},
		{"unterminated quote", `"abc`, "", false},
		{"empty quoted", `""`, "", false},
		{"bad escape", `"a\nb"`, "", false},
		{"bare quote inside", `"a"b"`, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseKey(tt.header)
			if tt.ok {
				if err != nil || got != tt.want {
					t.Fatalf("ParseKey(%q) = %q, %v; want %q", tt.header, got, err, tt.want)
				}
				return
			}
			if !errors.Is(err, ErrInvalidKey) {
				t.Fatalf("ParseKey(%q) = %q, %v; want ErrInvalidKey", tt.header, got, err)
			}
		})
	}
}

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"k", `"k"`, `"a\"b"`, "a,b", strings.Repeat("x", 300), "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		k, err := ParseKey(header)
		if err != nil {
			return
		}
		// Whatever parses is a valid key, and re-parsing it bare is stable.
		if verr := ValidateKey(k); verr != nil {
			t.Fatalf("ParseKey(%q) = %q which fails ValidateKey: %v", header, k, verr)
		}
		if k2, err := ParseKey(k); err == nil && k2 != k && !strings.HasPrefix(k, `"`) {
			t.Fatalf("bare key %q parsed to %q", k, k2)
		}
	})
}

func TestValidateTenant(t *testing.T) {
	for _, ok := range []string{"acme", "a", "tenant-1", "t_2", strings.Repeat("a", 63)} {
		if err := ValidateTenant(ok); err != nil {
			t.Errorf("ValidateTenant(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "Acme", "-a", "a/b", "a b", strings.Repeat("a", 64)} {
		if err := ValidateTenant(bad); !errors.Is(err, ErrInvalidTenant) {
			t.Errorf("ValidateTenant(%q) = %v, want ErrInvalidTenant", bad, err)
		}
	}
}

func TestWorkflowID(t *testing.T) {
	if got := WorkflowID("ticket", "acme", "k-1"); got != "ticket/acme/k-1" {
		t.Fatalf("readable form: got %q", got)
	}
	if WorkflowID("ticket", "acme", "k") == WorkflowID("ticket", "globex", "k") {
		t.Fatal("tenants must not share workflow IDs")
	}
	if WorkflowID("ticket", "acme", "k") == WorkflowID("order", "acme", "k") {
		t.Fatal("scopes must not share workflow IDs")
	}
	long1 := strings.Repeat("a", 250) + "1"
	long2 := strings.Repeat("a", 250) + "2"
	id1, id2 := WorkflowID("ticket", "acme", long1), WorkflowID("ticket", "acme", long2)
	if id1 == id2 {
		t.Fatal("long keys with a shared prefix must not collide (truncation)")
	}
	for _, id := range []string{id1, id2} {
		if len(id) > MaxWorkflowIDLen || !strings.HasPrefix(id, "ticket/acme/sha256,") {
			t.Fatalf("long key gave %q (%d bytes)", id, len(id))
		}
	}
	if id1 != WorkflowID("ticket", "acme", long1) {
		t.Fatal("derivation must be stable")
	}
	// The hashed form contains a comma, which no valid key has.
	if ValidateKey(strings.TrimPrefix(id1, "ticket/acme/")) == nil {
		t.Fatal("hashed form must not be a valid key")
	}
}

func TestFingerprint(t *testing.T) {
	type params struct {
		A string         `json:"a"`
		B int            `json:"b"`
		M map[string]int `json:"m"`
	}
	fp := func(biz string, v any) string {
		t.Helper()
		s, err := Fingerprint(biz, v)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	base := fp("x", params{A: "1", B: 2, M: map[string]int{"z": 1, "y": 2}})
	if len(base) != 64 {
		t.Fatalf("want hex SHA-256, got %q", base)
	}
	// Key order in the source does not matter: a map and a struct with the
	// same members, in any order, canonicalise the same.
	same := fp("x", map[string]any{"m": map[string]int{"y": 2, "z": 1}, "b": 2, "a": "1"})
	if same != base {
		t.Fatalf("member order changed the fingerprint: %s vs %s", same, base)
	}
	if fp("x", params{A: "1", B: 3, M: map[string]int{"z": 1, "y": 2}}) == base {
		t.Fatal("a changed value must change the fingerprint")
	}
	if fp("y", params{A: "1", B: 2, M: map[string]int{"z": 1, "y": 2}}) == base {
		t.Fatal("the biz type must be part of the fingerprint")
	}
}

func FuzzFingerprint(f *testing.F) {
	f.Add("a", "b", int64(1))
	f.Fuzz(func(t *testing.T, k, v string, n int64) {
		a, err1 := Fingerprint("t", map[string]any{k + "1": v, k + "2": n})
		b, err2 := Fingerprint("t", map[string]any{k + "2": n, k + "1": v})
		if (err1 == nil) != (err2 == nil) || a != b {
			t.Fatalf("order-dependent fingerprint: %q %v / %q %v", a, err1, b, err2)
		}
	})
}

func TestRetention(t *testing.T) {
	r := Retention{ByBizType: map[string]time.Duration{"order.create": time.Hour}}
	if r.For("order.create") != time.Hour || r.For("ticket.create") != DefaultRetention {
		t.Fatalf("retention lookup: %v %v", r.For("order.create"), r.For("ticket.create"))
	}
}

// The downstream key is stable for one (tenant, key, tool), differs for
// any other tenant, key or tool, and fits common limits: at most 64
// URL-safe characters, even for the longest key.
func TestDownstreamKeyIsStableDistinctAndFitsCommonLimits(t *testing.T) {
	safe := regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	long := strings.Repeat("k", 255)
	a := DownstreamKey("acme", "k-1", "refund")
	if a != DownstreamKey("acme", "k-1", "refund") {
		t.Fatal("not stable")
	}
	seen := map[string]string{}
	for _, c := range [][3]string{{"acme", "k-1", "refund"}, {"globex", "k-1", "refund"}, {"acme", "k-2", "refund"},
		{"acme", "k-1", "refund_legacy"}, {"acme", long, "refund"}, {"acme\x00k", "1", "refund"}} {
		k := DownstreamKey(c[0], c[1], c[2])
		if !safe.MatchString(k) {
			t.Errorf("%q: %q is not 1 to 64 URL-safe characters", c, k)
		}
		if prev, ok := seen[k]; ok {
			t.Errorf("%q and %s share %s", c, prev, k)
		}
		seen[k] = fmt.Sprint(c)
	}
}
