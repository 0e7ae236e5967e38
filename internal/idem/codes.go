package idem

// The adapters' codes, beside the engine's (package driver, aliased in
// this package): every code of the product is listed in [Codes].
const (
	// Adapter codes: what an adapter decided before or around the engine.

	// CodeNotJSON: an SQS body that is not JSON. A poison note is stored.
	CodeNotJSON Code = "NOT_JSON"
	// CodeKeyMissing: the key expression gave no key, or a key part is
	// missing or empty. A poison note is stored.
	CodeKeyMissing Code = "KEY_MISSING"
	// CodeInvalidAction: the action part of an event key contains the key
	// separator, which would make two events share a key. A poison note is
	// stored.
	CodeInvalidAction Code = "INVALID_ACTION"
	// CodeTooLarge: a body larger than the configured limit. Refused before
	// any store call (API: 413); an SQS body gets a poison note.
	CodeTooLarge Code = "TOO_LARGE"
	// CodeFIFOGroupStopped: an earlier record of the same FIFO message group
	// failed in this batch, so this one was not started (order is kept).
	CodeFIFOGroupStopped Code = "FIFO_GROUP_STOPPED"
	// CodeCorruptRecord: a stored result cannot be decoded.
	CodeCorruptRecord Code = "CORRUPT_RECORD"
	// CodeNotFound, CodeMethodNotAllowed, CodeUnsupportedMediaType: an API
	// request for another route or method, or with a body declared as
	// another format. Refused before any store call (404, 405, 415).
	CodeNotFound             Code = "NOT_FOUND"
	CodeMethodNotAllowed     Code = "METHOD_NOT_ALLOWED"
	CodeUnsupportedMediaType Code = "UNSUPPORTED_MEDIA_TYPE"
	// CodeNoIdentity: an API request whose authorizer ran but named no
	// caller (a JWT without sub, an IAM caller without a principal, a
	// Lambda authorizer without principalId). Refused before any store call
	// (401): such a request has no key space of its own to be scoped to.
	CodeNoIdentity Code = "NO_IDENTITY"

	// Inbound webhook codes (POST /webhooks/{source}, package inbound): a
	// delivery refused before any store or queue call.

	// CodeUnknownSource: no source of that name is configured (404).
	CodeUnknownSource Code = "UNKNOWN_SOURCE"
	// CodeSignatureMissing: a header the source's scheme signs with is
	// absent (401).
	CodeSignatureMissing Code = "SIGNATURE_MISSING"
	// CodeSignatureMalformed: a signature or timestamp header cannot be
	// read, or carries no signature of the scheme's version (401).
	CodeSignatureMalformed Code = "SIGNATURE_MALFORMED"
	// CodeSignatureMismatch: no signature matches any of the source's
	// secrets: a wrong secret, or a body or id changed on the way (401).
	CodeSignatureMismatch Code = "SIGNATURE_MISMATCH"
	// CodeTimestampOutsideTolerance: the signature matches, but its
	// timestamp is too far from now: a replay, or a clock far off (401).
	CodeTimestampOutsideTolerance Code = "TIMESTAMP_OUTSIDE_TOLERANCE"
	// CodeInboundUnavailable: a verified delivery could not be queued (or
	// the sources could not be read); nothing was queued: the sender
	// retries (503, or 500 when a retry cannot help).
	CodeInboundUnavailable Code = "INBOUND_UNAVAILABLE"
	// CodeEnvelopeUnproved: a queue message that is an inbound envelope
	// but does not prove it came from the receiving route: no proof
	// (sent after INBOUND_PROOF_SINCE), a proof no live key makes, or a
	// body changed since it was proved. A poison note is stored; the
	// action never runs (a queue producer forged it, or it was altered).
	CodeEnvelopeUnproved Code = "ENVELOPE_UNPROVED"
)

// sentences are the fixed sentences stored with failures, by code. A
// stored failure is replayed to API callers byte for byte, so what it says
// is safe for any caller: what happened, in general terms, never a host, a
// table, a URL, a value or the underlying error. Those go to the log line
// of the attempt that failed ("attempt failed", with the key; Lambda's log
// handler adds the request id).
var sentences = map[Code]string{
	CodePermanentFailure:      "the action failed, and would fail the same way again",
	CodeRetryExhausted:        "the action failed on every attempt this key allows",
	CodePanic:                 "the action stopped on an internal error",
	CodeOutcomeUnknown:        "the action's outcome is unknown, so it is not run again",
	CodeResultTooLarge:        "the action's result is too large to store",
	CodeEffectConditionFailed: "one of the action's writes failed its condition; nothing was applied",
	CodeInvalidEffects:        "the action's writes cannot be committed; nothing was applied",
	CodeTransientFailure:      "the action failed for now; a later delivery runs it again",
	CodeDeadline:              "too little time was left to start; a later delivery runs it",
}

// Sentence returns the fixed, caller-safe sentence stored with a failure of
// code: its own for the engine's codes, the permanent failure's for an
// action's own codes (notify's HTTP_422: the code says the rest).
func Sentence(code Code) string {
	if s, ok := sentences[code]; ok {
		return s
	}
	return sentences[CodePermanentFailure]
}

// Codes lists every code above, engine and adapter codes alike, in the
// order they are declared: the vocabulary operators filter by (oncelyctl
// list --code). A test checks that it names every constant.
var Codes = []Code{
	CodeInvalidKey, CodeInvalidPayload, CodeKeyReused, CodeInProgress, CodePermanentFailure, CodeRetryExhausted,
	CodeTransientFailure, CodeLeaseLost, CodePanic, CodeResultTooLarge, CodeStoreUnavailable, CodeStoreMisconfigured,
	CodeDeadline, CodeAbandoned, CodeEffectConditionFailed, CodeInvalidEffects, CodeReleased, CodeOutcomeUnknown,
	CodeNotJSON, CodeKeyMissing, CodeInvalidAction, CodeTooLarge, CodeFIFOGroupStopped, CodeCorruptRecord,
	CodeNotFound, CodeMethodNotAllowed, CodeUnsupportedMediaType, CodeNoIdentity,
	CodeUnknownSource, CodeSignatureMissing, CodeSignatureMalformed, CodeSignatureMismatch, CodeTimestampOutsideTolerance,
	CodeInboundUnavailable, CodeEnvelopeUnproved,
}

// PoisonReasons are the codes a poison note may carry: why a message could
// not be processed as an event. The SQS adapter stores no other (its fuzz
// test checks every note it writes against this list).
var PoisonReasons = []Code{
	CodeNotJSON, CodeKeyMissing, CodeInvalidAction, CodeTooLarge, CodeInvalidKey, CodeInvalidPayload, CodeKeyReused,
	CodeEnvelopeUnproved,
}
