package ijson

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"unsafe"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// integers decodes a JSON number into a Go integer when its value is an
// integer, however it is written: 1, 1.0 and 1e0 are the same integer to
// JSON Schema ("type": "integer" is a value with no fractional part) and
// to the fingerprint (RFC 8785 writes each as 1), so refusing 1.0 where
// the contract says integer refused schema-valid data (Schemathesis found
// it). A number with a fractional part, or out of the field's range, is
// refused with the field's bounds.
var integers = jsonv2.JoinUnmarshalers(
	integer[int](), integer[int8](), integer[int16](), integer[int32](), integer[int64](),
	integer[uint](), integer[uint8](), integer[uint16](), integer[uint32](), integer[uint64](),
)

type integerType interface {
	~int | ~int8 | ~int16 | ~int32 | ~int64 | ~uint | ~uint8 | ~uint16 | ~uint32 | ~uint64
}

// notAnInteger is a number an integer field cannot hold; Decode names the
// field with it.
type notAnInteger struct{ reason string }

func (e notAnInteger) Error() string { return e.reason }

func integer[T integerType]() *jsonv2.Unmarshalers {
	return jsonv2.UnmarshalFromFunc(func(dec *jsontext.Decoder, v *T) error {
		if dec.PeekKind() != '0' {
			return errors.ErrUnsupported // not a number: the default decoder names the type
		}
		tok, err := dec.ReadToken()
		if err != nil {
			return err
		}
		lit := tok.String()
		i, err := strconv.ParseInt(lit, 10, 64)
		if err != nil {
			f, err := strconv.ParseFloat(lit, 64)
			if err != nil || f != math.Trunc(f) || math.Abs(f) > MaxExactInteger {
				return notAnInteger{"must be an integer, got " + lit}
			}
			i = int64(f)
		}
		t := T(i)
		if int64(t) != i || (i < 0) != (t < 0) {
			return notAnInteger{fmt.Sprintf("must be an integer from %d to %d, got %s", minOf[T](), maxOf[T](), lit)}
		}
		*v = t
		return nil
	})
}

// minOf and maxOf are T's bounds, as far as I-JSON carries integers
// (±(2^53-1)).
func minOf[T integerType]() int64 {
	var zero T
	if zero-1 > zero {
		return 0 // unsigned
	}
	return max(-int64(MaxExactInteger), -1<<(8*int64(unsafe.Sizeof(zero))-1))
}

func maxOf[T integerType]() int64 {
	var zero T
	bits := 8 * int64(unsafe.Sizeof(zero))
	if zero-1 < zero {
		bits-- // signed: one bit is the sign
	}
	if bits >= 53 {
		return MaxExactInteger
	}
	return 1<<bits - 1
}
