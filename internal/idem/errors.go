package idem

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"
)

// Code is a machine-readable outcome code. Codes are stored with failed
// records and replayed; adapters map them to their own vocabulary (the API
// Gateway adapter alone maps them to HTTP statuses).
type Code string

// The codes the engine produces. Actions may store codes of their own through
// [PermanentCode].
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
	// CodeDeadline: too little time is left to reserve and run. Retryable.
	CodeDeadline Code = "DEADLINE"
)

// Error is the error every [Engine.Do] failure is. It says what happened in
// terms an adapter can act on without reading messages.
type Error struct {
	Code      Code
	Message   string
	Retryable bool
	// RetryAfter, when positive, is when a retry may succeed (the lease's end
	// for IN_PROGRESS, the downstream's Retry-After for transient failures).
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

// Class says what a failure means for retrying it.
type Class uint8

const (
	// ClassUnknown: nothing marks the error. Treated as permanent by default
	// (Options.UnknownAs) and logged with its details.
	ClassUnknown Class = iota
	// ClassTransient: a retry may succeed (timeouts, resets, 429/502/503/504, throttling).
	ClassTransient
	// ClassPermanent: a retry will fail the same way (validation, 4xx, business rules).
	ClassPermanent
	// ClassOutcomeUnknown: a write was sent and no answer came back; it may
	// have taken effect. Never simply re-run the side effect.
	ClassOutcomeUnknown
)

func (c Class) String() string {
	switch c {
	case ClassTransient:
		return "transient"
	case ClassPermanent:
		return "permanent"
	case ClassOutcomeUnknown:
		return "outcome_unknown"
	default:
		return "unknown"
	}
}

// ClassifiedError attaches a class, and optionally a code and a Retry-After,
// to an error. Actions and drivers return it; the engine reads it with
// errors.As, never by message text.
type ClassifiedError struct {
	Class      Class
	Code       Code          // optional; stored with permanent failures
	RetryAfter time.Duration // optional; honoured (capped) before the next try
	Err        error
}

func (e *ClassifiedError) Error() string {
	if e.Err == nil {
		return e.Class.String() + " error"
	}
	return e.Err.Error()
}

func (e *ClassifiedError) Unwrap() error { return e.Err }

// Transient marks err as transient.
func Transient(err error) error { return &ClassifiedError{Class: ClassTransient, Err: err} }

// TransientAfter marks err as transient, retryable no sooner than after.
func TransientAfter(err error, after time.Duration) error {
	return &ClassifiedError{Class: ClassTransient, RetryAfter: after, Err: err}
}

// Permanent marks err as permanent.
func Permanent(err error) error { return &ClassifiedError{Class: ClassPermanent, Err: err} }

// PermanentCode marks err as permanent and gives the code to store with it.
func PermanentCode(code Code, err error) error {
	return &ClassifiedError{Class: ClassPermanent, Code: code, Err: err}
}

// OutcomeUnknown marks err as a write whose outcome is unknown.
func OutcomeUnknown(err error) error { return &ClassifiedError{Class: ClassOutcomeUnknown, Err: err} }

// Classify returns the class of err, looking through wrapping:
//   - a *ClassifiedError decides;
//   - context.DeadlineExceeded, a net.Error that timed out, connection
//     resets, refusals, broken pipes and unexpected EOFs are transient;
//   - context.Canceled is transient (the caller gave up; the work may be redone);
//   - DNS failures, dial failures and unreachable networks are transient:
//     nothing was sent;
//   - anything else is ClassUnknown.
func Classify(err error) Class {
	if err == nil {
		return ClassUnknown
	}
	if ce, ok := errors.AsType[*ClassifiedError](err); ok {
		return ce.Class
	}
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return ClassTransient
	}
	if _, ok := errors.AsType[*net.DNSError](err); ok {
		return ClassTransient
	}
	if oe, ok := errors.AsType[*net.OpError](err); ok && oe.Op == "dial" {
		return ClassTransient
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, context.Canceled),
		errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNABORTED),
		errors.Is(err, syscall.EPIPE),
		errors.Is(err, syscall.ENETUNREACH),
		errors.Is(err, syscall.EHOSTUNREACH),
		errors.Is(err, io.ErrUnexpectedEOF):
		return ClassTransient
	}
	return ClassUnknown
}

// retryAfterOf returns the Retry-After carried by err, or 0.
func retryAfterOf(err error) time.Duration {
	if ce, ok := errors.AsType[*ClassifiedError](err); ok {
		return ce.RetryAfter
	}
	return 0
}

// codeOf returns the code carried by err, or def.
func codeOf(err error, def Code) Code {
	if ce, ok := errors.AsType[*ClassifiedError](err); ok && ce.Code != "" {
		return ce.Code
	}
	return def
}

// HTTPStatusError is the error an HTTP-calling action returns for a
// non-success reply. Build it with [HTTPClassifier.Error].
type HTTPStatusError struct {
	Status int
}

func (e *HTTPStatusError) Error() string { return fmt.Sprintf("HTTP %d", e.Status) }

// HTTPClassifier maps HTTP replies to classes. Its zero value treats 429,
// 502, 503 and 504 as transient and every other non-2xx status as permanent
// (a 500 included: an unknown server error is permanent by default).
type HTTPClassifier struct {
	// Transient lists the statuses that are transient. Nil means 429, 502, 503, 504.
	Transient map[int]bool
}

// defaultTransientStatuses is the zero HTTPClassifier's transient set.
var defaultTransientStatuses = map[int]bool{429: true, 502: true, 503: true, 504: true}

// DefaultTransientStatuses returns the default transient statuses: 429, 502, 503, 504.
func DefaultTransientStatuses() []int { return []int{429, 502, 503, 504} }

// Class returns the class of an HTTP status. 1xx–3xx are not errors and
// return ClassUnknown; callers check for success first.
func (c HTTPClassifier) Class(status int) Class {
	transient := c.Transient
	if transient == nil {
		transient = defaultTransientStatuses
	}
	switch {
	case transient[status]:
		return ClassTransient
	case status >= 400:
		return ClassPermanent
	default:
		return ClassUnknown
	}
}

// Error returns a classified error for a non-2xx reply: its class from
// Class, its code "HTTP_<status>", and its Retry-After parsed from the header
// value (delta-seconds or an HTTP date, relative to now).
func (c HTTPClassifier) Error(status int, retryAfter string, now time.Time) error {
	return &ClassifiedError{
		Class:      c.Class(status),
		Code:       Code(fmt.Sprintf("HTTP_%d", status)),
		RetryAfter: ParseRetryAfter(retryAfter, now),
		Err:        &HTTPStatusError{Status: status},
	}
}
