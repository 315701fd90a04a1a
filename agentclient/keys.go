package agentclient

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
)

// DeriveKey is the one derivation of a key from a durable identity, shared
// with the TypeScript and Python clients through clients/testdata/keys.json:
// the parts (a framework's thread and call IDs, a workflow's and activity's
// IDs, the tool's name) hashed, so that the same parts give the same key in
// any process and language, and any other parts another key. 47 characters
// for a four-letter scheme, within idemflow's rules.
func DeriveKey(scheme string, parts ...string) string {
	h := sha256.New()
	for _, p := range append([]string{scheme}, parts...) {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return scheme + "_" + base64.RawURLEncoding.EncodeToString(h.Sum(nil))[:42]
}

// ErrNoDurableIdentity: a key was asked for outside a durable call (not in
// a Temporal activity that a workflow scheduled), or for a call that no
// KeyInterceptor numbered. A random key would protect nothing across a
// retry, and a key shared by two runs would answer the second run's call
// as a replay, so none is made.
var ErrNoDurableIdentity = errors.New("no durable identity to derive a key from")
