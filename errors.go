package oncely

import (
	"errors"
	"time"

	"github.com/oncely/oncely/driver"
)

// The contract's vocabulary, under the names an action uses, so that a
// team imports one package. Each is driver's own, documented there.
type (
	// Error is what every failed call is: a Code, a caller-safe Message, and
	// whether a retry may succeed. A replayed failure holds the stored code
	// and its fixed sentence, never the original error's text.
	Error = driver.Error
	// Code is a machine-readable outcome code, stored with failures.
	Code = driver.Code
	// Class says what a failure means for retrying it.
	Class = driver.Class
	// ClassifiedError attaches a class (and a code, a Retry-After, the sent
	// mark) to an error.
	ClassifiedError = driver.ClassifiedError
	// Status is a record's state.
	Status = driver.Status
	// Effects are an action's own writes, to commit with its completion.
	Effects = driver.Effects
)

// The record states.
const (
	StatusInProgress = driver.StatusInProgress
	StatusSucceeded  = driver.StatusSucceeded
	StatusFailed     = driver.StatusFailed
)

// The error classes.
const (
	ClassUnknown        = driver.ClassUnknown
	ClassTransient      = driver.ClassTransient
	ClassPermanent      = driver.ClassPermanent
	ClassOutcomeUnknown = driver.ClassOutcomeUnknown
)

// The codes a call of the engine can end with (see driver for each).
const (
	CodeInvalidKey            = driver.CodeInvalidKey
	CodeInvalidPayload        = driver.CodeInvalidPayload
	CodeKeyReused             = driver.CodeKeyReused
	CodeInProgress            = driver.CodeInProgress
	CodePermanentFailure      = driver.CodePermanentFailure
	CodeRetryExhausted        = driver.CodeRetryExhausted
	CodeTransientFailure      = driver.CodeTransientFailure
	CodeLeaseLost             = driver.CodeLeaseLost
	CodePanic                 = driver.CodePanic
	CodeResultTooLarge        = driver.CodeResultTooLarge
	CodeStoreUnavailable      = driver.CodeStoreUnavailable
	CodeStoreMisconfigured    = driver.CodeStoreMisconfigured
	CodeDeadline              = driver.CodeDeadline
	CodeAbandoned             = driver.CodeAbandoned
	CodeEffectConditionFailed = driver.CodeEffectConditionFailed
	CodeInvalidEffects        = driver.CodeInvalidEffects
	CodeReleased              = driver.CodeReleased
	CodeOutcomeUnknown        = driver.CodeOutcomeUnknown
)

// Sentinels for errors.Is: each matches any *Error with its code.
var (
	ErrInvalidKey     = driver.ErrInvalidKey
	ErrKeyReused      = driver.ErrKeyReused
	ErrInProgress     = driver.ErrInProgress
	ErrLeaseLost      = driver.ErrLeaseLost
	ErrRetryExhausted = driver.ErrRetryExhausted
)

// ErrReplayed matches (errors.Is) every failure [Do] and [Wrap] return that
// was read from the store rather than produced by this call: a permanent
// failure stored by an earlier delivery, whatever its code. errors.As still
// finds its *Error.
var ErrReplayed = errors.New("oncely: a stored failure, replayed")

// replayed is a stored failure returned again: its text is the *Error's.
type replayed struct{ err *Error }

func (r *replayed) Error() string   { return r.err.Error() }
func (r *replayed) Unwrap() []error { return []error{ErrReplayed, r.err} }

// Transient marks err as transient: a retry may succeed (a timeout, a 429,
// a 503, throttling). The engine retries it in the call, then releases the
// key for the next delivery.
func Transient(err error) error { return driver.Transient(err) }

// TransientAfter marks err as transient, retryable no sooner than after
// (the receiver's Retry-After).
func TransientAfter(err error, after time.Duration) error { return driver.TransientAfter(err, after) }

// TransientSent marks err as transient, from an attempt whose request may
// have reached its receiver (a timeout or a reset once written): no second
// attempt in this call, and the key is held off for Options.SentPause.
func TransientSent(err error) error { return driver.TransientSent(err) }

// TransientNextDelivery marks err as transient, from a complete reply that
// another attempt in this call would only repeat: the call ends, with no
// pause.
func TransientNextDelivery(err error) error { return driver.TransientNextDelivery(err) }

// Permanent marks err as permanent: stored, replayed, never run again.
func Permanent(err error) error { return driver.Permanent(err) }

// PermanentCode marks err as permanent with a code of your own to store
// (for example "CARD_DECLINED").
func PermanentCode(code Code, err error) error { return driver.PermanentCode(code, err) }

// OutcomeUnknown marks err as a side effect whose outcome cannot be known
// (a write sent with no reply): stored as OUTCOME_UNKNOWN and never re-run.
func OutcomeUnknown(err error) error { return driver.OutcomeUnknown(err) }

// Classify returns err's class: its mark if it has one; timeouts, resets,
// refused dials and context errors as transient; ClassUnknown for anything
// else, which the engine stores as permanent (see Options.Classify).
func Classify(err error) Class { return driver.Classify(err) }

// IsSent reports whether err carries the sent mark anywhere in its chain.
func IsSent(err error) bool { return driver.IsSent(err) }
