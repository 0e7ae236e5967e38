package idem

import "time"

// Defaults for [RetryPolicy].
const (
	DefaultAttemptsPerDelivery = 3
	DefaultBackoffBase         = 100 * time.Millisecond
	DefaultBackoffMax          = 2 * time.Second
	// DefaultJitter is the jitter production configurations use. The zero
	// RetryPolicy has none, so that tests assert exact delays.
	DefaultJitter = 0.2
)

// RetryPolicy bounds the retries of transient action failures. It holds two
// separate budgets: attempts within one delivery (one call of [Engine.Do]),
// and an optional cap on attempts for one key across deliveries. It is
// plain data; every field documents its zero value.
type RetryPolicy struct {
	// AttemptsPerDelivery caps the executions of the action within one call
	// of Do. When a transient failure uses the last one, the key is released
	// (FAILED, retryable) and the caller sends the event back to its queue.
	// A transient failure marked Sent (the receiver may have the request;
	// see ClassifiedError.Sent) ends the delivery's attempts the same way,
	// whatever is left of them. Zero means DefaultAttemptsPerDelivery.
	AttemptsPerDelivery int
	// AttemptsPerKey caps the executions of the action for one key, counted
	// across in-call retries, redeliveries and take-overs. Reaching it on a
	// transient error stores RETRY_EXHAUSTED, which is permanent: the
	// message is acknowledged and never reaches a dead-letter queue. Zero
	// means no cap: a transient failure is always released, and the queue's
	// redrive policy decides when to give up.
	AttemptsPerKey int
	// Base is the first backoff delay; attempt n waits Base·2^(n-1).
	// Zero means DefaultBackoffBase.
	Base time.Duration
	// Max caps the exponential delay (before jitter), and the downstream's
	// Retry-After the engine honours by sleeping in-call: a longer one ends
	// the in-call retries, and the key is released with that Retry-After for
	// the adapter to honour (SQS: the message's visibility). Zero means
	// DefaultBackoffMax.
	Max time.Duration
	// Jitter adds a random fraction of the delay, in [0, Jitter). Zero means
	// no jitter; production configurations use 0.2 to 1.
	Jitter float64
}

func (p RetryPolicy) attemptsPerDelivery() int {
	if p.AttemptsPerDelivery <= 0 {
		return DefaultAttemptsPerDelivery
	}
	return p.AttemptsPerDelivery
}

func (p RetryPolicy) base() time.Duration { return orDefault(p.Base, DefaultBackoffBase) }
func (p RetryPolicy) max() time.Duration  { return orDefault(p.Max, DefaultBackoffMax) }

// keyCapReached reports whether attempts executions use up the per-key cap.
func (p RetryPolicy) keyCapReached(attempts int) bool {
	return p.AttemptsPerKey > 0 && attempts >= p.AttemptsPerKey
}

// Delay returns how long to wait after the attempt-th failed attempt
// (attempt ≥ 1), given the failure's Retry-After (0 if none) and a random
// number in [0, 1). It is a pure function:
//
//	delay = min(Base·2^(attempt-1), Max) · (1 + Jitter·random)
//	delay = max(delay, retryAfter)
//
// ok is false when retryAfter exceeds Max: honouring it in-call is not
// allowed, so the caller stops retrying here.
func (p RetryPolicy) Delay(attempt int, retryAfter time.Duration, random float64) (delay time.Duration, ok bool) {
	if retryAfter > p.max() {
		return retryAfter, false
	}
	if attempt < 1 {
		attempt = 1
	}
	d := CappedExponential(p.base(), p.max(), attempt)
	if p.Jitter > 0 {
		d += time.Duration(float64(d) * p.Jitter * random)
	}
	return max(d, retryAfter), true
}

// CappedExponential is min(base·2^(n−1), limit) for n ≥ 1: the step of
// every backoff in the product (retries within a call, and a message's
// visibility across deliveries).
func CappedExponential(base, limit time.Duration, n int) time.Duration {
	d := base
	for i := 1; i < n && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}
