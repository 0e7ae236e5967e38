package driver

import "time"

// Code is a machine-readable outcome code. Codes are stored with failed
// records and replayed; adapters map them to their own vocabulary (the API
// Gateway adapter alone maps them to HTTP statuses).
type Code string

// The engine's codes: what a call of the engine can end with, and what a
// store reports. Adapters add codes of their own for what they refuse
// before the engine runs, and actions may store codes of their own through
// [PermanentCode] (an HTTP action might store HTTP_<status>). Codes are a
// stored format: one never changes meaning.
const (
	// CodeInvalidKey: the key is not 8 to 128 characters of A-Z a-z 0-9 : _ -. Nothing runs, nothing is stored.
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
	// attempt (see the engine's Budget). Nothing ran. Retryable.
	CodeDeadline Code = "DEADLINE"
	// CodeAbandoned: the action did not return by its work deadline (it
	// ignored its context), and the invocation stopped waiting for it
	// (the engine's Budget.AbandonGrace). Nothing is written for it: the record stays
	// IN_PROGRESS until its lease ends, and the action's late return is
	// recorded only under its own token (see the engine's Abandoned). Retryable.
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
)

// Error is the error every failed call of the engine is. It says what happened in
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
	// request that may have reached its receiver at least the engine's pause
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
// errors.Is(err, driver.ErrLeaseLost) works through wrapping.
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
