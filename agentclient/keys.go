package agentclient

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"

	"go.temporal.io/sdk/activity"
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
// a Temporal activity that a workflow scheduled). A random key would
// protect nothing across a retry, so none is made.
var ErrNoDurableIdentity = errors.New("no durable identity to derive a key from")

// ActivityKey is the key of the running Temporal activity's call of tool:
// from its workflow ID and activity ID, the same on every attempt (a worker
// killed after the effect, a timeout), so that Temporal's at-least-once
// attempts are one effect. The run ID, which a reset changes, is not part
// of it. A workflow that continues as new starts its activity IDs again:
// give each call a scope that names it across runs (the model's tool-call
// ID, say), or two calls in two runs share a key.
func ActivityKey(ctx context.Context, tool string, scope ...string) (key string, err error) {
	defer func() {
		// activity.GetInfo panics outside an activity.
		if recover() != nil {
			key, err = "", ErrNoDurableIdentity
		}
	}()
	info := activity.GetInfo(ctx)
	if info.WorkflowExecution.ID == "" {
		return "", ErrNoDurableIdentity
	}
	if tool == "" {
		tool = info.ActivityType.Name
	}
	return activityKey(info.WorkflowExecution.ID, info.ActivityID, tool, scope...), nil
}

func activityKey(workflowID, activityID, tool string, scope ...string) string {
	return DeriveKey("tp1", append([]string{workflowID, activityID, tool}, scope...)...)
}
