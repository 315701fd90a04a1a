package idem

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/gowebpki/jcs"
)

// Fingerprint hashes the business fields of a request: SHA-256 over the
// RFC 8785 canonical JSON of {"biz_type": bizType, "params": params}.
//
// params must hold only the fields that change the outcome, with defaults
// already applied, so that key order, whitespace and an omitted default do
// not turn a faithful retry into a conflict. Including bizType makes a key
// reused across operations a conflict rather than a replay of the wrong kind.
func Fingerprint(bizType string, params any) (string, error) {
	raw, err := json.Marshal(struct {
		BizType string `json:"biz_type"`
		Params  any    `json:"params"`
	}{bizType, params})
	if err != nil {
		return "", fmt.Errorf("fingerprint: encode params: %w", err)
	}
	canon, err := jcs.Transform(raw)
	if err != nil {
		return "", fmt.Errorf("fingerprint: canonicalize: %w", err)
	}
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:]), nil
}

// intentPrefix marks a fingerprint over intent fields: it is how the
// activity, which recomputes the fingerprint from the request, knows it
// was taken that way (ByIntentFields).
const intentPrefix = "intent:"

// IntentFingerprint hashes the canonical text of a request's intent
// fields (intent.Fields.Canonical), the fingerprint of a caller that keys
// by them: seed 2's whitelisted, normalised fingerprint. It never equals
// a Fingerprint, so a key used both ways is a conflict, never a replay.
func IntentFingerprint(bizType, canonical string) (string, error) {
	fp, err := Fingerprint(bizType, json.RawMessage(canonical))
	if err != nil {
		return "", err
	}
	return intentPrefix + fp, nil
}

// ByIntentFields reports whether fingerprint was taken over intent fields.
func ByIntentFields(fingerprint string) bool { return strings.HasPrefix(fingerprint, intentPrefix) }
