// Package idem is the idempotency core of idemflow: key validation, the
// tenant-scoped workflow ID and the request fingerprint (the one place
// identities are derived), and the idempotency_record table with the
// answers it stores. It imports nothing of Temporal or of the HTTP server:
// an answer is kept as opaque status, bytes and location, so that every
// entry point (HTTP gateway, MCP, reconcile) replays it unchanged.
package idem
