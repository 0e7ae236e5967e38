package idem

import "time"

// Code is a machine-readable outcome code. Codes are stored with failed
// records and replayed; adapters map them to their own vocabulary (the API
// Gateway adapter alone maps them to HTTP statuses).
type Code string

// The codes of the whole product, engine and adapters alike: this is the one
// list. Actions may store codes of their own through [PermanentCode] (notify
// stores HTTP_<status>).
const (
	// CodeInvalidKey: the key does not match [KeyPattern]. Nothing runs, nothing is stored.
	CodeInvalidKey Code = "INVALID_KEY"
	// CodeInvalidPayload: the payload is not canonicalisable JSON. Nothing runs, nothing is stored.
	CodeInvalidPayload Code = "INVALID_PAYLOAD"
	// CodeKeyReused: the key is stored with another payload fingerprint. Nothing runs, nothing is written.
	CodeKeyReused Code = "KEY_REUSED"
	// CodeInProgress: another owner holds a live lease on the key. Retryable.
	CodeInProgress Code = "IN_PROGRESS"
	// CodePermanentFailure: the action failed permanently (or with an unknown
	// error, which is treated as permanent by default). Stored and replayed.
	CodePermanentFailure Code = "PERMANENT_FAILURE"
	// CodeRetryExhausted: the key's attempt cap was reached on a transient
	// error. Permanent, stored and replayed.
	CodeRetryExhausted Code = "RETRY_EXHAUSTED"
	// CodeTransientFailure: the action failed transiently and the in-call
	// retries stopped before the cap (time budget, or a Retry-After beyond
	// the cap). The record is released as retryable.
	CodeTransientFailure Code = "TRANSIENT_FAILURE"
	// CodeLeaseLost: the lease was taken over before completion; the result
	// was discarded. Retryable.
	CodeLeaseLost Code = "LEASE_LOST"
	// CodePanic: the action panicked. Permanent, stored and replayed.
	CodePanic Code = "PANIC"
	// CodeResultTooLarge: the result does not fit in a record. Permanent, stored.
	CodeResultTooLarge Code = "RESULT_TOO_LARGE"
	// CodeStoreUnavailable: the store failed transiently or its outcome is
	// unknown. Nothing final is known to be stored. Retryable.
	CodeStoreUnavailable Code = "STORE_UNAVAILABLE"
	// CodeStoreMisconfigured: the store refused the call for a reason a retry
	// will not fix (missing table, missing permission). Nothing is stored.
	CodeStoreMisconfigured Code = "STORE_MISCONFIGURED"
	// CodeDeadline: too little of the invocation is left for a useful
	// attempt (see [Budget]). Nothing ran. Retryable.
	CodeDeadline Code = "DEADLINE"
	// CodeAbandoned: the action did not return by its work deadline (it
	// ignored its context), and the invocation stopped waiting for it
	// ([Budget.AbandonGrace]). Nothing is written for it: the record stays
	// IN_PROGRESS until its lease ends, and the action's late return is
	// recorded only under its own token (see [Engine.Abandoned]). Retryable.
	CodeAbandoned Code = "ABANDONED"
	// CodeEffectConditionFailed: one of the action's own writes (Effects)
	// failed its condition; nothing was applied. A permanent business
	// failure, stored and replayed.
	CodeEffectConditionFailed Code = "EFFECT_CONDITION_FAILED"
	// CodeInvalidEffects: the action's writes cannot be committed (too
	// many, too large, two on one item, or a store that cannot commit
	// writes). Permanent, stored.
	CodeInvalidEffects Code = "INVALID_EFFECTS"
	// CodeReleased: an operator released the record (see [Operator]): it is
	// FAILED and retryable with its attempts reset, so the next delivery
	// takes it over and runs the action again.
	CodeReleased Code = "RELEASED"
	// CodeOutcomeUnknown: the action reported a side effect whose outcome it
	// cannot know (a write sent with no reply). Stored as a permanent
	// failure, never re-run.
	CodeOutcomeUnknown Code = "OUTCOME_UNKNOWN"

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
	CodeInboundUnavailable,
}

// PoisonReasons are the codes a poison note may carry: why a message could
// not be processed as an event. The SQS adapter stores no other (its fuzz
// test checks every note it writes against this list).
var PoisonReasons = []Code{
	CodeNotJSON, CodeKeyMissing, CodeInvalidAction, CodeTooLarge, CodeInvalidKey, CodeInvalidPayload, CodeKeyReused,
}

// Error is the error every [Engine.Do] failure is. It says what happened in
// terms an adapter can act on without reading messages.
type Error struct {
	Code Code
	// Message says what happened. For a failure the engine stored, it is
	// the stored sentence (see [Sentence]; a record stored by an older
	// version replays its own message), safe to show any caller; Detail
	// has the rest.
	Message   string
	Retryable bool
	// RetryAfter, when positive, is when a retry may succeed: the lease's
	// or the hold-off's end for IN_PROGRESS, the lease's end for ABANDONED,
	// the downstream's Retry-After for transient failures, and after a
	// request that may have reached its receiver at least Options.SentPause
	// (for which the key is held off). Adapters wait at least this long.
	RetryAfter time.Duration
	// Err is the underlying cause, when there is one in this process.
	Err error
}

func (e *Error) Error() string {
	if e.Message == "" {
		return string(e.Code)
	}
	return string(e.Code) + ": " + e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// Detail is the failure's whole story, for a log line: the underlying
// error's text when this process has it, else the message.
func (e *Error) Detail() string {
	if e.Err != nil {
		return e.Err.Error()
	}
	return e.Message
}

// Is reports whether target is an *Error with the same code, so that
// errors.Is(err, idem.ErrLeaseLost) works through wrapping.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && t.Message == "" && t.Err == nil
}

// Sentinels for errors.Is. They match any *Error with the same code.
var (
	ErrInvalidKey     = &Error{Code: CodeInvalidKey}
	ErrKeyReused      = &Error{Code: CodeKeyReused}
	ErrInProgress     = &Error{Code: CodeInProgress}
	ErrLeaseLost      = &Error{Code: CodeLeaseLost}
	ErrRetryExhausted = &Error{Code: CodeRetryExhausted}
)
