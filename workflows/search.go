package workflows

import (
	"github.com/idemflow/idemflow/idem"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// Search attributes every intent workflow carries, so that an operator can
// find any intent in the Web UI: IdempotencyKey="…", or
// TenantId="acme" AND ExecutionStatus="Failed". They are set when the run
// is started, and never written again: how the intent ended is the run's
// own ExecutionStatus (Completed: SUCCESS; Failed or Canceled: FAILED),
// which costs no visibility write of its own. IntentStatus said the same
// with an upsert as each run ended (and stayed PROCESSING on a run an
// operator terminated, after reconcile had settled its record); it stays
// registered, and is still upserted on the runs started with it, so that
// their histories replay.
var (
	SAIdempotencyKey     = temporal.NewSearchAttributeKeyKeyword("IdempotencyKey")
	SATenantID           = temporal.NewSearchAttributeKeyKeyword("TenantId")
	SABizType            = temporal.NewSearchAttributeKeyKeyword("BizType")
	SARequestFingerprint = temporal.NewSearchAttributeKeyKeyword("RequestFingerprint")
	SAIntentStatus       = temporal.NewSearchAttributeKeyKeyword("IntentStatus")
)

// SearchAttributes are registered on the namespace at start-up (worker,
// gateway, serve, dev): the intents' and the reconcile runs'.
func SearchAttributes() map[string]enumspb.IndexedValueType {
	return map[string]enumspb.IndexedValueType{
		SAIdempotencyKey.GetName():     enumspb.INDEXED_VALUE_TYPE_KEYWORD,
		SATenantID.GetName():           enumspb.INDEXED_VALUE_TYPE_KEYWORD,
		SABizType.GetName():            enumspb.INDEXED_VALUE_TYPE_KEYWORD,
		SARequestFingerprint.GetName(): enumspb.INDEXED_VALUE_TYPE_KEYWORD,
		SAIntentStatus.GetName():       enumspb.INDEXED_VALUE_TYPE_KEYWORD,
		SAStale.GetName():              enumspb.INDEXED_VALUE_TYPE_INT,
		SAFixed.GetName():              enumspb.INDEXED_VALUE_TYPE_INT,
		SAPurged.GetName():             enumspb.INDEXED_VALUE_TYPE_INT,
	}
}

// IntentSearchAttributes are an intent's attributes at start.
func IntentSearchAttributes(in idem.Intent) temporal.SearchAttributes {
	return temporal.NewSearchAttributes(
		SAIdempotencyKey.ValueSet(in.Key),
		SATenantID.ValueSet(in.TenantID),
		SABizType.ValueSet(in.BizType),
		SARequestFingerprint.ValueSet(in.Fingerprint),
	)
}

// markStatus records how the intent ended in IntentStatus, only on a run
// started with it (by a gateway from before it was dropped): such a run's
// history has this command, and must replay. Every other run is left as
// it is: they never had it.
func markStatus(ctx workflow.Context, status idem.Status) {
	if _, ok := workflow.GetTypedSearchAttributes(ctx).GetKeyword(SAIntentStatus); !ok {
		return
	}
	if err := workflow.UpsertTypedSearchAttributes(ctx, SAIntentStatus.ValueSet(string(status))); err != nil {
		workflow.GetLogger(ctx).Warn("could not update IntentStatus", "error", err)
	}
}
