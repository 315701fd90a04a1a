// Package intent says which of a request's fields make its intent, and
// puts them in one normal form: the fields an operation declares (a
// ticket's customer, an order's customer and items), never its free text,
// each normalised by its declared rule, as one canonical JSON text.
//
// It is seed 2's whitelisted, normalised fingerprint. The gateway compares
// a request keyed by intent fields on this text alone (idem's intent
// fingerprint), and every client derives a framework call's key from it,
// so that a model that rewrites a call's wording on a regenerate makes the
// same intent, and one that changes an intent field another. Go, Python
// and TypeScript implement the same rules, checked by the shared vectors
// in clients/testdata/keys.json ("intent").
package intent

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/gowebpki/jcs"
	"golang.org/x/text/cases"
	"golang.org/x/text/language"
	"golang.org/x/text/unicode/norm"
)

// Norm is how a field's value is normalised before it is compared.
type Norm string

// The rules. Every string is first put in Unicode NFC, so that an accent
// typed as one code point or as two is one value.
const (
	// Exact keeps the value as it is (a JSON value of any type), its
	// strings in NFC, in its RFC 8785 form.
	Exact Norm = "exact"
	// ID is an identifier (a customer, an order): its surrounding
	// white space trimmed, its case kept (c-1 and C-1 may be two).
	ID Norm = "id"
	// Text is a short text that names something (a category, a SKU's
	// name): trimmed, each run of white space one space, lowercased by
	// Unicode's full mapping (what Go's cases.Lower, Python's str.lower
	// and JavaScript's toLowerCase agree on, the final sigma included).
	Text Norm = "text"
	// Number is a number or a decimal string (an amount): the plain
	// decimal of its value, with no exponent, no + and no trailing zero,
	// so 12.50, "12.5" and 1.25e1 are one value.
	Number Norm = "number"
	// Set is an array whose order means nothing (an order's lines): its
	// elements, each Exact, in the order of their canonical texts'
	// UTF-8 bytes. A repeated element stays repeated.
	Set Norm = "set"
)

// Norms are the rules, in the order the docs list them.
var Norms = []Norm{ID, Text, Number, Set, Exact}

// Field is a request's top-level member that makes the intent, and its
// rule.
type Field struct {
	Name string `json:"name"`
	Norm Norm   `json:"norm"`
}

// Fields are an operation's intent fields. None declared means the whole
// request makes the intent.
type Fields []Field

var fieldName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// Validate checks the declaration: known rules, names that could be JSON
// members, each named once, and (when members is not nil) each one of
// the request's members.
func (fs Fields) Validate(members []string) error {
	seen := map[string]bool{}
	for _, f := range fs {
		if !fieldName.MatchString(f.Name) {
			return fmt.Errorf("intent field %q: not a member name", f.Name)
		}
		if !slices.Contains(Norms, f.Norm) {
			return fmt.Errorf("intent field %s: norm %q is none of %v", f.Name, f.Norm, Norms)
		}
		if seen[f.Name] {
			return fmt.Errorf("intent field %s: named twice", f.Name)
		}
		seen[f.Name] = true
		if members != nil && !slices.Contains(members, f.Name) {
			return fmt.Errorf("intent field %s: the request has no such member", f.Name)
		}
	}
	return nil
}

// Names are the fields' names, in their declared order.
func (fs Fields) Names() []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.Name
	}
	return out
}

// Has reports whether name is an intent field.
func (fs Fields) Has(name string) bool {
	return slices.ContainsFunc(fs, func(f Field) bool { return f.Name == name })
}

// Canonical is the intent of args (a JSON object): the RFC 8785 text of
// an object that holds each intent field's normalised value (null for
// one args lacks) and nothing else.
func (fs Fields) Canonical(args json.RawMessage) (string, error) {
	var members map[string]any
	if err := json.Unmarshal(args, &members); err != nil {
		return "", fmt.Errorf("intent: the arguments are no JSON object: %w", err)
	}
	return fs.CanonicalOf(members)
}

// CanonicalOf is Canonical of decoded arguments.
func (fs Fields) CanonicalOf(members map[string]any) (string, error) {
	out := make(map[string]any, len(fs))
	for _, f := range fs {
		v, err := Normalize(f.Norm, members[f.Name])
		if err != nil {
			return "", fmt.Errorf("intent field %s: %w", f.Name, err)
		}
		out[f.Name] = v
	}
	return RFC8785(out)
}

// Normalize is v, a decoded JSON value (encoding/json's types), under
// rule n, as a decoded JSON value. A value the rule does not apply to (a
// number under Text) is kept Exact.
func Normalize(n Norm, v any) (any, error) {
	switch n {
	case ID:
		if s, ok := v.(string); ok {
			return strings.Trim(norm.NFC.String(s), whiteSpace), nil
		}
	case Text:
		if s, ok := v.(string); ok {
			return text(s), nil
		}
	case Number:
		switch x := v.(type) {
		case float64:
			return decimalOfFloat(x)
		case json.Number:
			f, err := x.Float64()
			if err != nil {
				return nil, err
			}
			return decimalOfFloat(f)
		case string:
			if d, ok := decimalOfString(strings.Trim(x, whiteSpace)); ok {
				return d, nil
			}
			return strings.Trim(norm.NFC.String(x), whiteSpace), nil
		}
	case Set:
		if a, ok := v.([]any); ok {
			type elem struct {
				v   any
				key string
			}
			es := make([]elem, len(a))
			for i, e := range a {
				e = exact(e)
				c, err := RFC8785(e)
				if err != nil {
					return nil, err
				}
				es[i] = elem{e, c}
			}
			// Go compares strings by their UTF-8 bytes, as the rule says.
			slices.SortStableFunc(es, func(a, b elem) int { return strings.Compare(a.key, b.key) })
			out := make([]any, len(es))
			for i, e := range es {
				out[i] = e.v
			}
			return out, nil
		}
	case Exact:
	default:
		return nil, fmt.Errorf("norm %q is none of %v", n, Norms)
	}
	return exact(v), nil
}

// whiteSpace is Unicode's White_Space property, written out so that the
// three languages trim and collapse the same characters (each one's own
// notion of space differs: U+FEFF, U+001C).
const whiteSpace = "\u0009\u000A\u000B\u000C\u000D\u0020\u0085\u00A0\u1680" +
	"\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200A" +
	"\u2028\u2029\u202F\u205F\u3000"

var spaceRun = regexp.MustCompile("[" + whiteSpace + "]+")

func text(s string) string {
	s = norm.NFC.String(s)
	s = strings.Trim(spaceRun.ReplaceAllString(s, " "), " ")
	return norm.NFC.String(cases.Lower(language.Und).String(s))
}

// exact is v with every string (and member name) in NFC.
func exact(v any) any {
	switch x := v.(type) {
	case string:
		return norm.NFC.String(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = exact(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[norm.NFC.String(k)] = exact(e)
		}
		return out
	}
	return v
}

// RFC8785 is v's JSON in its RFC 8785 form: the same text in every client,
// whatever the order of its members.
func RFC8785(v any) (string, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	c, err := jcs.Transform(raw)
	if err != nil {
		return "", err
	}
	return string(c), nil
}

// decimalOfFloat is the plain decimal of f's shortest round-trip form,
// the one every language prints (Python's repr, JavaScript's String).
func decimalOfFloat(f float64) (string, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "", fmt.Errorf("%v is no JSON number", f)
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // -1.25e+01
	mant, exp, _ := strings.Cut(e, "e")
	x, err := strconv.Atoi(exp)
	if err != nil {
		return "", err
	}
	neg := strings.HasPrefix(mant, "-")
	mant = strings.TrimPrefix(mant, "-")
	whole, frac, _ := strings.Cut(mant, ".")
	return plain(neg, whole+frac, x-len(frac)), nil
}

var decimalString = regexp.MustCompile(`^([+-]?)([0-9]+)(?:\.([0-9]+))?(?:[eE]([+-]?[0-9]{1,3}))?$`)

// decimalOfString is the plain decimal of a decimal string, exactly (no
// double in between), or false for a string that is none.
func decimalOfString(s string) (string, bool) {
	m := decimalString.FindStringSubmatch(s)
	if m == nil {
		return "", false
	}
	x := 0
	if m[4] != "" {
		x, _ = strconv.Atoi(m[4])
	}
	return plain(m[1] == "-", m[2]+m[3], x-len(m[3])), true
}

// plain writes the number digits × 10^exp: no leading or trailing zero,
// no exponent, and no sign on zero.
func plain(neg bool, digits string, exp int) string {
	digits = strings.TrimLeft(digits, "0")
	if digits == "" {
		return "0"
	}
	for strings.HasSuffix(digits, "0") {
		digits, exp = digits[:len(digits)-1], exp+1
	}
	var s string
	switch point := len(digits) + exp; {
	case exp >= 0:
		s = digits + strings.Repeat("0", exp)
	case point <= 0:
		s = "0." + strings.Repeat("0", -point) + digits
	default:
		s = digits[:point] + "." + digits[point:]
	}
	if neg {
		s = "-" + s
	}
	return s
}
