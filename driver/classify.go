package driver

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"time"
)

// Class says what a failure means for retrying it.
type Class uint8

const (
	// ClassUnknown: nothing marks the error. The engine treats it as
	// permanent, and logs it with its type and text.
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
	// Sent, on a transient error, says the attempt's request reached, or
	// may have reached, the receiver of the side effect before it failed
	// without an answer (a timeout or a reset after the request was
	// written): the receiver may have it and still be acting on it. The
	// engine then starts no further attempt in this delivery: it releases
	// the key at once, and the event comes back after the caller's backoff
	// (SQS: the message's visibility; API: 503 with Retry-After), which
	// gives the receiver time to finish, or to recognise the retry by its
	// key. Unset, a transient error is retried within the delivery, which
	// suits failures that cannot have reached the receiver (a refused
	// dial, DNS, a certificate that does not verify) and complete replies
	// (429, 503). The engine reads it anywhere in the error's chain, so a
	// caller that marks the error again keeps it. See [TransientSent].
	Sent bool
	// NextDelivery, on a transient error, says another attempt in this
	// delivery would get the same answer: the receiver replied in full,
	// and what it refused will not change within the call (a 401 to a
	// signature no read of the signing keys could judge: the same keys
	// sign the retry). The engine then starts no further attempt in this
	// delivery and releases the key at once, as for Sent, but asks for no
	// pause: the receiver answered, nothing of the request is still in
	// flight, so a later delivery may come as soon as the caller's backoff
	// allows. A Sent mark anywhere in the chain wins (see
	// [IsNextDelivery]). See [TransientNextDelivery].
	NextDelivery bool
	Err          error
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

// TransientSent marks err as transient, from an attempt whose request
// may have reached its receiver (see ClassifiedError.Sent): the engine
// retries it on a later delivery, never within this one.
func TransientSent(err error) error {
	return &ClassifiedError{Class: ClassTransient, Sent: true, Err: err}
}

// TransientNextDelivery marks err as transient, not to be retried within
// this delivery and needing no pause before the next (see
// ClassifiedError.NextDelivery): one attempt per delivery.
func TransientNextDelivery(err error) error {
	return &ClassifiedError{Class: ClassTransient, NextDelivery: true, Err: err}
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

// IsSent reports whether err is marked as from an attempt that may have
// reached its receiver (ClassifiedError.Sent) anywhere in its chain: an
// outer mark that re-classifies the error (Transient around it) does not
// make the request unsent. The engine reads it to end a delivery's
// attempts; the API adapter to give the receiver time before the caller's
// retry.
func IsSent(err error) bool {
	for err != nil {
		ce, ok := errors.AsType[*ClassifiedError](err)
		if !ok {
			return false
		}
		if ce.Sent {
			return true
		}
		err = ce.Err
	}
	return false
}

// IsNextDelivery reports whether err is marked NextDelivery anywhere in its
// chain and Sent nowhere in it: the engine then ends the delivery after
// this attempt and releases the key without a pause. A request that may
// still be in flight keeps its pause (IsSent) whatever an outer or inner
// mark says.
func IsNextDelivery(err error) bool {
	next := false
	for e := err; e != nil; {
		ce, ok := errors.AsType[*ClassifiedError](e)
		if !ok {
			break
		}
		next = next || ce.NextDelivery
		e = ce.Err
	}
	return next && !IsSent(err)
}
