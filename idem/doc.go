// Package idem is the idempotency core of idemflow: key validation, the
// tenant-scoped workflow ID, the request fingerprint and the
// idempotency_record table. It knows nothing of Temporal or HTTP, so every
// entry point (HTTP gateway, MCP, reconcile) derives identities the same way.
package idem
