package idem

import (
	"errors"
	"fmt"
	"strings"
)

// MaxKeyLen bounds a key so that it fits an index entry and a header line;
// longer keys are a client bug, not an intent.
const MaxKeyLen = 255

// ErrInvalidKey is returned for a missing or malformed Idempotency-Key.
var ErrInvalidKey = errors.New("invalid idempotency key")

// ParseKey reads an Idempotency-Key header value. The IETF draft defines the
// header as a Structured Field string ("..."), but most agents send the bare
// token, so both forms are accepted and yield the same key: a quoted and an
// unquoted retry of one intent must not become two intents.
func ParseKey(header string) (string, error) {
	v := strings.TrimSpace(header)
	if v == "" {
		return "", fmt.Errorf("%w: the Idempotency-Key header is missing or empty", ErrInvalidKey)
	}
	if strings.HasPrefix(v, `"`) {
		s, err := unquoteSFString(v)
		if err != nil {
			return "", err
		}
		v = s
	}
	if err := ValidateKey(v); err != nil {
		return "", err
	}
	return v, nil
}

// ValidateKey checks an already unquoted key: 1 to MaxKeyLen visible ASCII
// characters, no comma (it separates list members in HTTP fields) and no
// whitespace.
func ValidateKey(k string) error {
	if k == "" {
		return fmt.Errorf("%w: key is empty", ErrInvalidKey)
	}
	if len(k) > MaxKeyLen {
		return fmt.Errorf("%w: key is %d characters long, at most %d are allowed", ErrInvalidKey, len(k), MaxKeyLen)
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		switch {
		case c == ',':
			return fmt.Errorf("%w: key contains a comma at position %d", ErrInvalidKey, i)
		case c < 0x21 || c > 0x7e:
			return fmt.Errorf("%w: key contains a non-visible or non-ASCII byte 0x%02x at position %d", ErrInvalidKey, c, i)
		}
	}
	return nil
}

// unquoteSFString parses an RFC 8941 sf-string: DQUOTE *chr DQUOTE where only
// \" and \\ are escapes.
func unquoteSFString(v string) (string, error) {
	if len(v) < 2 || v[len(v)-1] != '"' {
		return "", fmt.Errorf("%w: quoted key has no closing quote", ErrInvalidKey)
	}
	body := v[1 : len(v)-1]
	var b strings.Builder
	for i := 0; i < len(body); i++ {
		c := body[i]
		switch {
		case c == '\\':
			if i+1 >= len(body) || (body[i+1] != '"' && body[i+1] != '\\') {
				return "", fmt.Errorf("%w: bad escape in quoted key at position %d", ErrInvalidKey, i)
			}
			i++
			b.WriteByte(body[i])
		case c == '"':
			return "", fmt.Errorf("%w: unescaped quote inside quoted key at position %d", ErrInvalidKey, i)
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}
