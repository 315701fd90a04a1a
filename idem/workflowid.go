package idem

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
)

// MaxWorkflowIDLen keeps workflow IDs short enough to read in the Temporal
// Web UI and far below the server's 1000-byte limit.
const MaxWorkflowIDLen = 255

// tenantPattern is also enforced by a CHECK constraint on tenant.id; it has
// no '/' so that "<biz>/<tenant>/<key>" can never be read two ways.
var tenantPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// ErrInvalidTenant is returned for a tenant ID that does not match the
// tenant naming rule.
var ErrInvalidTenant = errors.New("invalid tenant id")

// ValidateTenant checks a tenant ID.
func ValidateTenant(tenant string) error {
	if !tenantPattern.MatchString(tenant) {
		return fmt.Errorf("%w %q: want 1-63 of [a-z0-9_-], starting with a letter or digit", ErrInvalidTenant, tenant)
	}
	return nil
}

// WorkflowID is the one derivation of a workflow ID from an intent's scope.
// Deriving it (rather than storing a random one) is what lets a duplicate
// start find the first execution even when the database record is gone.
//
// The readable form is "<scope>/<tenant>/<key>". A key that would make the
// ID longer than MaxWorkflowIDLen is replaced by "sha256,<hex>": it is never
// truncated, because two long keys sharing a prefix would then share a
// workflow. A comma cannot occur in a valid key, so the hashed form can never
// equal the readable form of another key.
func WorkflowID(scope, tenant, key string) string {
	id := scope + "/" + tenant + "/" + key
	if len(id) <= MaxWorkflowIDLen {
		return id
	}
	sum := sha256.Sum256([]byte(key))
	return scope + "/" + tenant + "/sha256," + hex.EncodeToString(sum[:])
}

// DownstreamKey is the one derivation of the key idemflow sends to an HTTP
// tool's downstream (its Idempotency-Key header, its key field, {key} in
// its lookup URL): the same for every attempt of one (tenant, key, tool),
// different for any other tenant or tool, so that one tenant's key can
// never name another's effect at a shared downstream. It is 47 URL-safe
// characters, within common limits (Stripe's is 255, many are 64), and
// says nothing of the tenant or the key it came from.
func DownstreamKey(tenantID, key, tool string) string {
	sum := sha256.Sum256([]byte("idemflow downstream key v1\x00" + tenantID + "\x00" + key + "\x00" + tool))
	return "idf1_" + base64.RawURLEncoding.EncodeToString(sum[:])[:42]
}
