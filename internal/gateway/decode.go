package gateway

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idemflow/idemflow/starter"
)

// MaxBodyBytes is the largest request body accepted (413 above it).
const MaxBodyBytes = 1 << 20

var errBodyTooLarge = errors.New("request body is larger than 1 MiB")

// readBody reads at most MaxBodyBytes, failing fast on a declared length.
// The media type was checked before (readIntent): none, or
// application/json; anything else is a 415.
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
			return min(d, starter.MaxWait), true
		}
	}
	return starter.DefaultWait, false
}
