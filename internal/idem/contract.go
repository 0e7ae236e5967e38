package idem

import (
	"time"

	"github.com/oncely/oncely/driver"
)

// The store contract and its vocabulary are defined once, in the public
// package driver; the domain names them here so that its code (and the
// product's) reads as before. Each is the driver's own, documented there.

type (
	Status          = driver.Status
	Record          = driver.Record
	Reservation     = driver.Reservation
	Finish          = driver.Finish
	Store           = driver.Store
	Effects         = driver.Effects
	EffectStore     = driver.EffectStore
	Poison          = driver.Poison
	PoisonRecorder  = driver.PoisonRecorder
	PoisonStore     = driver.PoisonStore
	Code            = driver.Code
	Error           = driver.Error
	Class           = driver.Class
	ClassifiedError = driver.ClassifiedError
)

// The record states.
const (
	StatusInProgress = driver.StatusInProgress
	StatusSucceeded  = driver.StatusSucceeded
	StatusFailed     = driver.StatusFailed
)

// MaxPoisonDetail is driver.MaxPoisonDetail.
const MaxPoisonDetail = driver.MaxPoisonDetail

// The error classes.
const (
	ClassUnknown        = driver.ClassUnknown
	ClassTransient      = driver.ClassTransient
	ClassPermanent      = driver.ClassPermanent
	ClassOutcomeUnknown = driver.ClassOutcomeUnknown
)

// The engine's codes.
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

// Sentinels for errors.Is.
var (
	ErrInvalidKey     = driver.ErrInvalidKey
	ErrKeyReused      = driver.ErrKeyReused
	ErrInProgress     = driver.ErrInProgress
	ErrLeaseLost      = driver.ErrLeaseLost
	ErrRetryExhausted = driver.ErrRetryExhausted
)

// Transient is driver.Transient.
func Transient(err error) error { return driver.Transient(err) }

// TransientAfter is driver.TransientAfter.
func TransientAfter(err error, after time.Duration) error { return driver.TransientAfter(err, after) }

// TransientSent is driver.TransientSent.
func TransientSent(err error) error { return driver.TransientSent(err) }

// TransientNextDelivery is driver.TransientNextDelivery.
func TransientNextDelivery(err error) error { return driver.TransientNextDelivery(err) }

// Permanent is driver.Permanent.
func Permanent(err error) error { return driver.Permanent(err) }

// PermanentCode is driver.PermanentCode.
func PermanentCode(code Code, err error) error { return driver.PermanentCode(code, err) }

// OutcomeUnknown is driver.OutcomeUnknown.
func OutcomeUnknown(err error) error { return driver.OutcomeUnknown(err) }

// Classify is driver.Classify.
func Classify(err error) Class { return driver.Classify(err) }

// IsSent is driver.IsSent.
func IsSent(err error) bool { return driver.IsSent(err) }

// IsNextDelivery is driver.IsNextDelivery.
func IsNextDelivery(err error) bool { return driver.IsNextDelivery(err) }
