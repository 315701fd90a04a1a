// Package ijson decodes what agents send (HTTP bodies, MCP tool
// arguments) as I-JSON (RFC 7493). Its one job: one strict decoder, so
// that a request means one thing on every way in, and two encodings of it
// cannot share a fingerprint while meaning different things.
package ijson

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/idemflow/idemflow/internal/apperr"
)

// Decode decodes one JSON object into v as I-JSON (RFC 7493): it
// rejects invalid UTF-8, numbers that cannot be exchanged exactly
// (checkNumbers: each one named), duplicate member names, names that match
// a field only in another case, unknown fields, wrong types, trailing data
// and text PostgreSQL cannot store (U+0000), each as a field-level
// *apperr.InvalidError. Go's encoding/json would accept the first three
// silently (invalid UTF-8 turned into U+FFFD, the last duplicate winning,
// any case matching), so that differently encoded bodies could share a
// fingerprint; json v2 rejects them by default.
func Decode(body []byte, v any) error {
	var inv apperr.Invalid
	trimmed := bytes.TrimSpace(body)
	switch {
	case len(trimmed) == 0:
		inv.Add("body", "is empty; send a JSON object")
		return inv.Err()
	case trimmed[0] != '{':
		inv.Add("body", "must be a JSON object")
		return inv.Err()
	case !utf8.Valid(body):
		inv.Add("body", "is not valid UTF-8")
		return inv.Err()
	}
	err := jsonv2.Unmarshal(body, v, jsonv2.RejectUnknownMembers(true), jsonv2.WithUnmarshalers(integers))
	if _, ok := errors.AsType[*jsonv2.SemanticError](err); ok {
		// The decoder stops at a field's fault, before it has read the
		// rest: broken JSON after it is the body's one fault, which no
		// schema can read past (issue #57: it was a 500).
		if serr := jsonv2.Unmarshal(body, new(jsontext.Value)); serr != nil {
			err = serr
		}
	}
	var syntaxErr *jsontext.SyntacticError
	var semErr *jsonv2.SemanticError
	// The faults of sound JSON (an inexact number, a U+0000, a member the
	// target does not know, a wrong type) are each a field's: every one
	// is named, and a caller with a schema names the rest (SchemaCanName).
	// A body that is not sound JSON is one fault, the body's.
	switch {
	case err == nil:
	case errors.As(err, &syntaxErr) && errors.Is(err, jsontext.ErrDuplicateName):
		inv.Add(fieldName(syntaxErr.JSONPointer), "appears twice; send each field once")
		return inv.Err()
	case errors.As(err, &syntaxErr):
		if errors.Is(err, io.ErrUnexpectedEOF) {
			inv.Add("body", "is truncated JSON")
			return inv.Err()
		}
		inv.Add("body", "is not valid JSON at byte %d: %s", syntaxErr.ByteOffset, syntaxErr.Err)
		return inv.Err()
	case errors.As(err, &semErr) && (errors.Is(err, jsonv2.ErrUnknownName) || errors.As(err, new(notAnInteger)) || semErr.GoType != nil):
	default:
		inv.Add("body", "%s", err.Error())
		return inv.Err()
	}
	checkNumbers(body, &inv)
	for _, f := range findNULs(body) {
		if !inv.Has(f) {
			inv.Add(f, "contains U+0000, which cannot be stored")
		}
	}
	if semErr != nil {
		// The decoder's own fault, unless the field is named already (a
		// number beyond a double is not an integer either).
		var n notAnInteger
		switch field := fieldName(semErr.JSONPointer); {
		case inv.Has(field):
		case errors.Is(err, jsonv2.ErrUnknownName):
			inv.Add(field, UnknownMember)
		case errors.As(err, &n):
			inv.Add(field, "%s", n.reason)
		default:
			inv.Add(field, "must be %s, got JSON %s", jsonKind(semErr.GoType.Kind().String()), kindName(semErr.JSONKind))
		}
	}
	if inv.Err() == nil {
		return nil
	}
	return schemaRule{inv.Err()}
}

// findNULs returns the fields whose string values hold U+0000. In valid
// JSON a NUL can only be written as an escape, so a body without one is
// skipped without parsing.
func findNULs(body []byte) []string {
	if !bytes.Contains(body, []byte(`\u0000`)) {
		return nil
	}
	var fields []string
	dec := jsontext.NewDecoder(bytes.NewReader(body))
	for {
		tok, err := dec.ReadToken()
		if err != nil {
			return fields
		}
		if tok.Kind() == '"' && strings.ContainsRune(tok.String(), 0) {
			fields = append(fields, fieldName(dec.StackPointer()))
		}
	}
}

// fieldName turns a JSON pointer (/items/0/sku) into the field names the
// validation errors use (items[0].sku).
func fieldName(p jsontext.Pointer) string { return FieldOf(slices.Collect(p.Tokens())) }

// FieldOf names a location in a JSON value, given as its reference tokens
// (items, 0, sku), the way every field error names it: items[0].sku, or
// body for the value itself. A member named "" is written "" (quoted), so
// that it is never taken for the body.
func FieldOf(tokens []string) string {
	var b strings.Builder
	for _, tok := range tokens {
		if tok == "" {
			tok = `""`
		}
		if _, err := strconv.Atoi(tok); err == nil && b.Len() > 0 {
			b.WriteString("[" + tok + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(tok)
	}
	if b.Len() == 0 {
		return "body"
	}
	return b.String()
}

func kindName(k jsontext.Kind) string {
	switch k {
	case '"':
		return "string"
	case '0':
		return "number"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	case '{':
		return "object"
	case '[':
		return "array"
	}
	return "value"
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

// UnknownMember is the reason given for a member the target does not
// know.
const UnknownMember = "is not a known field (names are case-sensitive)"

// schemaRule is Decode's error when the body is sound JSON but some of
// its fields are not: a member the target does not know, a value of the
// wrong type, a number that is not an integer (the decoder stops at the
// first of these), an inexact number, a U+0000 (each one named). A caller
// with a schema names every other rule the body breaks in the same answer
// (SchemaCanName).
type schemaRule struct{ err error }

func (u schemaRule) Error() string { return u.err.Error() }
func (u schemaRule) Unwrap() error { return u.err }

// SchemaCanName reports whether err is Decode's for faults of fields in
// sound JSON (schemaRule): a schema's validation then names every other
// field the body breaks, not only the decoder's.
func SchemaCanName(err error) bool {
	var u schemaRule
	return errors.As(err, &u)
}
