package starter

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idemflow/idemflow/apperr"
)

// MaxBodyBytes is the largest request body accepted (413 above it).
const MaxBodyBytes = 1 << 20

var errBodyTooLarge = errors.New("request body is larger than 1 MiB")

// readBody reads at most MaxBodyBytes, failing fast on a declared length.
// Content-Type is not checked: the body must parse as JSON whatever it is
// labelled, and agents (and curl -d) often label it form-encoded.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if r.ContentLength > MaxBodyBytes {
		return nil, errBodyTooLarge
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return nil, errBodyTooLarge
	}
	if err != nil {
		return nil, fmt.Errorf("read body: %w", err)
	}
	return b, nil
}

// decodeStrict decodes one JSON object into v, rejecting unknown fields,
// wrong types and trailing data with a field-level *apperr.InvalidError.
func decodeStrict(body []byte, v any) error {
	var inv apperr.Invalid
	if len(bytes.TrimSpace(body)) == 0 {
		inv.Add("body", "is empty; send a JSON object")
		return inv.Err()
	}
	if bytes.TrimSpace(body)[0] != '{' {
		inv.Add("body", "must be a JSON object")
		return inv.Err()
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	var syntaxErr *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	switch {
	case err == nil:
		if _, terr := dec.Token(); terr != io.EOF {
			inv.Add("body", "has data after the JSON object")
		}
	case errors.As(err, &syntaxErr):
		inv.Add("body", "is not valid JSON at byte %d: %s", syntaxErr.Offset, syntaxErr.Error())
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			field = "body"
		}
		inv.Add(field, "must be %s, got JSON %s", jsonKind(typeErr.Type.Kind().String()), typeErr.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name, _ := strconv.Unquote(strings.TrimPrefix(err.Error(), "json: unknown field "))
		inv.Add(name, "is not a known field")
	case errors.Is(err, io.ErrUnexpectedEOF):
		inv.Add("body", "is truncated JSON")
	default:
		inv.Add("body", "%s", err.Error())
	}
	return inv.Err()
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "a string"
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		return "an integer"
	case "float32", "float64":
		return "a number"
	case "bool":
		return "a boolean"
	case "slice", "array":
		return "an array"
	case "struct", "map":
		return "an object"
	}
	return "a " + goKind
}

// parseWait reads RFC 7240 "Prefer: wait=N" (seconds).
func parseWait(h http.Header) (time.Duration, bool) {
	for _, line := range h.Values("Prefer") {
		for pref := range strings.SplitSeq(line, ",") {
			name, val, ok := strings.Cut(strings.TrimSpace(pref), "=")
			if !ok || !strings.EqualFold(strings.TrimSpace(name), "wait") {
				continue
			}
			n, err := strconv.Atoi(strings.Trim(strings.TrimSpace(val), `"`))
			if err != nil || n < 0 {
				continue
			}
			d := time.Duration(n) * time.Second
			return min(d, MaxWait), true
		}
	}
	return DefaultWait, false
}
