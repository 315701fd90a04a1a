package idem

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

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
