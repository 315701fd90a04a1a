package ijson

import (
	"bytes"
	"math"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/idemflow/idemflow/internal/apperr"
)

// MaxExactInteger is the largest integer magnitude that I-JSON (RFC 7493,
// section 2.2) lets a sender expect a receiver to hold exactly: 2^53-1.
const MaxExactInteger = 1<<53 - 1

// checkNumbers adds a field error for every number in body that cannot be
// exchanged exactly (RFC 7493, section 2.2):
//   - an integer (a number with no fractional part, however it is
//     written: 1e20 is one) beyond ±(2^53-1);
//   - a number out of a double's range, or one that is not zero but
//     rounds to it;
//   - a number with more precision than a double keeps: the shortest
//     decimal that reads back as the same double is another number
//     (0.10000000000000001 reads as 0.1).
//
// Such a number would reach the fingerprint (RFC 8785 reads numbers as
// doubles) as another number than the one sent, so that two different
// requests could share a fingerprint, and the step or downstream would get
// a value the fingerprint does not cover. A body whose numbers are all
// short is not tokenized.
func checkNumbers(body []byte, inv *apperr.Invalid) {
	if !mayBeInexact(body) {
		return
	}
	dec := jsontext.NewDecoder(bytes.NewReader(body))
	for {
		tok, err := dec.ReadToken()
		if err != nil {
			return // the decoder proper reports a syntax error
		}
		if tok.Kind() != '0' {
			continue
		}
		if reason := inexact(tok.String()); reason != "" {
			inv.Add(fieldName(dec.StackPointer()), "%s", reason)
		}
	}
}

// mayBeInexact is a fast, conservative test: every number that inexact
// refuses has an exponent or 16 or more digits.
func mayBeInexact(body []byte) bool {
	digits := 0
	for i, c := range body {
		switch {
		case c >= '0' && c <= '9':
			if digits++; digits >= 16 {
				return true
			}
		case c == '.':
		case (c == 'e' || c == 'E') && i > 0 && (body[i-1] >= '0' && body[i-1] <= '9' || body[i-1] == '.'):
			return true
		default:
			digits = 0
		}
	}
	return false
}

// inexact says why the JSON number text s cannot be exchanged exactly, or
// "" when it can.
func inexact(s string) string {
	const tooBig = "is a number beyond what every JSON reader holds exactly (I-JSON: integers within ±9007199254740991, values within a double's range); send it as a string"
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) {
		return tooBig
	}
	sent, ok := decimal(s)
	if !ok {
		return tooBig
	}
	if f == 0 {
		if sent.digits != "" {
			return "is a number too small for a double: it would read as 0; send it as a string"
		}
		return ""
	}
	if sent.exp >= 0 && math.Abs(f) > MaxExactInteger {
		return tooBig
	}
	if back, _ := decimal(strconv.FormatFloat(f, 'e', -1, 64)); back != sent {
		return "has more precision than a double keeps: it would read as " + strconv.FormatFloat(f, 'g', -1, 64) + "; send it as a string, or with fewer digits"
	}
	return ""
}

// dec is a decimal number's value as its significant digits (no leading
// or trailing zeros; "" for zero) times 10^exp, sign apart: two texts of
// one value have one dec.
type dec struct {
	neg    bool
	digits string
	exp    int
}

// decimal reads a JSON number's text. ok is false for an exponent too
// large for an int, which no finite, non-zero double has.
func decimal(s string) (d dec, ok bool) {
	if strings.HasPrefix(s, "-") {
		d.neg, s = true, s[1:]
	}
	mant, expText, hasExp := strings.Cut(strings.ToLower(s), "e")
	if hasExp {
		e, err := strconv.Atoi(strings.TrimPrefix(expText, "+"))
		if err != nil || e > math.MaxInt32 || e < math.MinInt32 {
			return dec{}, false
		}
		d.exp = e
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	digits := intPart + frac
	d.exp -= len(frac)
	trimmed := strings.TrimRight(digits, "0")
	d.exp += len(digits) - len(trimmed)
	d.digits = strings.TrimLeft(trimmed, "0")
	if d.digits == "" {
		d.neg, d.exp = false, 0
	}
	return d, true
}
