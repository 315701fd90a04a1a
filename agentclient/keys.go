package agentclient

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strings"

	"github.com/idemflow/idemflow/intent"
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

// CallIntent names a framework's tool call beyond its turn and tool:
// "intent:" and its intent (the declared fields, normalised) where the
// tool declares intent fields, so that a call whose model rewords free
// text is the same call; else its whole arguments in RFC 8785 form, less a
// top-level idempotency_key, which idemflow's MCP tools take from the
// model, new each time it writes the call. The same rule as call_intent
// (Python) and callIntent (TypeScript).
func CallIntent(fields intent.Fields, args map[string]any) (string, error) {
	if len(fields) > 0 {
		c, err := fields.CanonicalOf(args)
		if err != nil {
			return "", err
		}
		return "intent:" + c, nil
	}
	rest := make(map[string]any, len(args))
	for k, v := range args {
		if k != "idempotency_key" {
			rest[k] = v
		}
	}
	return intent.RFC8785(rest)
}

// CallDigest is the digest a key takes of CallIntent's text:
// DeriveKey("intent", its intent) or DeriveKey("args", its arguments).
func CallDigest(call string) string {
	if c, ok := strings.CutPrefix(call, "intent:"); ok {
		return DeriveKey("intent", c)
	}
	return DeriveKey("args", call)
}
