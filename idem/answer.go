package idem

import (
	"bytes"
	"encoding/json"
)

// Answer is a stored answer's bytes, exactly as the agent got them.
//
// In JSON (workflow and activity results and the Web UI that shows them) an
// answer that is a JSON object or array is written as itself, so that an
// operator reads what the agent was told rather than base64. It is written
// so only when encoding/json would give back the very same bytes (compact,
// HTML-escaped, as every answer idemflow makes is); anything else is
// written as base64, as a []byte is. Decoding takes both, so that
// reconcile rebuilds the same bytes from either.
type Answer []byte

// MarshalJSON implements json.Marshaler.
func (a Answer) MarshalJSON() ([]byte, error) {
	if a == nil {
		return []byte("null"), nil
	}
	if verbatim(a) {
		return a, nil
	}
	return json.Marshal([]byte(a))
}

// UnmarshalJSON implements json.Unmarshaler.
func (a *Answer) UnmarshalJSON(b []byte) error {
	switch {
	case bytes.Equal(b, []byte("null")):
		*a = nil
		return nil
	case len(b) > 0 && b[0] == '"':
		var raw []byte
		if err := json.Unmarshal(b, &raw); err != nil {
			return err
		}
		*a = raw
		return nil
	}
	*a = append(Answer(nil), b...)
	return nil
}

// verbatim reports whether a can stand for itself in JSON and come back
// byte for byte: an object or array that encoding/json leaves unchanged
// when it compacts and HTML-escapes a Marshaler's output.
func verbatim(a []byte) bool {
	if len(a) == 0 || (a[0] != '{' && a[0] != '[') || !json.Valid(a) {
		return false
	}
	var compact, escaped bytes.Buffer
	if json.Compact(&compact, a) != nil {
		return false
	}
	json.HTMLEscape(&escaped, compact.Bytes())
	return bytes.Equal(escaped.Bytes(), a)
}
