// Package sqsvisibility gives a failed SQS message its own delay before it
// comes back. Lambda's SQS event source has none: a message in
// batchItemFailures returns after the queue's whole visibility timeout,
// whatever the failure. The function calls ChangeMessageVisibility on the
// record's receipt handle instead, choosing the delay by why it failed.
//
// Policy is the rule, a pure function of the failure and the receive count.
// Client applies it through the SQS API and classifies what goes wrong; it
// never changes a record's outcome.
package sqsvisibility

import (
	"math"
	"time"

	"github.com/oncely/oncely/internal/idem"
)

// Defaults and limits.
const (
	// DefaultBase is the first backoff delay, after the first receive.
	DefaultBase = 30 * time.Second
	// DefaultMax caps the exponential delay.
	DefaultMax = 15 * time.Minute
	// MaxVisibility is SQS's limit: a message's visibility may not extend
	// past 12 hours from the ReceiveMessage that returned its handle.
	MaxVisibility = 12 * time.Hour
	// InProgressMargin is added to the holder's remaining lease, so that the
	// duplicate returns just after the lease ends rather than just before.
	InProgressMargin = 2 * time.Second
	// receiveSlack is kept off the 12-hour limit: the function does not see
	// when the event source received the message, only when it was invoked
	// (the batching window and the invoke come in between).
	receiveSlack = 5 * time.Minute
)

// Reason says why a record goes back to the queue, which decides its delay.
type Reason uint8

const (
	// Backoff: a transient failure, a store error, a record not started.
	// Exponential in the receive count, with a jitter that keeps a floor.
	Backoff Reason = iota
	// RetryAfter: the downstream asked for a pause that was not honoured
	// in-call. Exactly that pause, within SQS's limit.
	RetryAfter
	// InProgress: another worker holds the key. The time left on its lease
	// plus InProgressMargin.
	InProgress
	// Sent: the receiver may still be acting on the last request (it timed
	// out or broke once written, or the action was abandoned while it ran).
	// The backoff, but never shorter than d: the engine's pause after a sent
	// request (idem.Options.SentPause) or the receiver's Retry-After,
	// whichever is longer, which the record's hold-off enforces anyway: a
	// message back sooner would only meet IN_PROGRESS.
	Sent
)

// Policy chooses visibility timeouts. Its zero value uses the defaults.
type Policy struct {
	Base time.Duration // zero means DefaultBase
	Max  time.Duration // zero means DefaultMax
}

// Delay returns the visibility timeout for a record that goes back to the
// queue for reason, on its receiveCount-th receive (≥ 1), where d is the
// reason's duration (the Retry-After, or the lease's time left; ignored for
// Backoff), sinceInvoke the time since the invocation started, and random a
// number in [0, 1). Delays are whole seconds, at least one:
//
//	Backoff:    c = min(Base·2^(receiveCount−1), Max); delay in [c/2, c]
//	RetryAfter: delay = d
//	InProgress: delay = d + InProgressMargin
//	Sent:       delay = max(the Backoff delay, d)
//
// and never past MaxVisibility counted from the receive. A full-jitter 0
// would burn one of the queue's receives at once: hence the floor of c/2.
func (p Policy) Delay(reason Reason, receiveCount int, d, sinceInvoke time.Duration, random float64) time.Duration {
	var delay time.Duration
	switch reason {
	case RetryAfter:
		delay = d
	case InProgress:
		delay = d + InProgressMargin
	default:
		c := p.backoffCap(receiveCount)
		delay = c/2 + time.Duration(float64(c-c/2)*random)
		if reason == Sent {
			delay = max(delay, d)
		}
	}
	limit := MaxVisibility - receiveSlack - max(sinceInvoke, 0)
	delay = min(delay, limit)
	secs := math.Ceil(delay.Seconds())
	return time.Duration(max(secs, 1)) * time.Second
}

// backoffCap is min(Base·2^(n−1), Max).
func (p Policy) backoffCap(n int) time.Duration {
	base, limit := p.Base, p.Max
	if base <= 0 {
		base = DefaultBase
	}
	if limit <= 0 {
		limit = DefaultMax
	}
	return idem.CappedExponential(base, limit, n)
}

// Range returns the shortest and longest total time a message spends
// failing before the queue moves it to its DLQ after maxReceives receives:
// the sum of the backoff delays at each receive, at their floor and at their
// cap. It documents a configuration; docs/how-it-works.md quotes it for the template.
func (p Policy) Range(maxReceives int) (shortest, longest time.Duration) {
	for n := 1; n <= maxReceives; n++ {
		shortest += p.Delay(Backoff, n, 0, 0, 0)
		longest += p.Delay(Backoff, n, 0, 0, 1)
	}
	return shortest, longest
}
