package idem

// Error types of the non-retryable application errors an intent's
// execution ends with. Activities raise them; workflows and the starter
// match on them, so they live beside the intent.
const (
	// ErrTypeRejected: a business rule said no; details hold the stored
	// idem.Outcome (a 422 problem).
	ErrTypeRejected = "BusinessRejected"
	// ErrTypeClosed: the record is FAILED; this attempt must not execute.
	ErrTypeClosed = "IntentClosed"
	// ErrTypeGone: the record does not exist (purged); nothing to do.
	ErrTypeGone = "IntentGone"
	// ErrTypeForged: the input's request does not match its intent's
	// fingerprint; it was not started by idemflow's gateway.
	ErrTypeForged = "IntentForged"
)

// NonRetryable lists the error types no retry can fix.
func NonRetryable() []string {
	return []string{ErrTypeRejected, ErrTypeClosed, ErrTypeGone, ErrTypeForged}
}
