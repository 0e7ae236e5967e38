package idem

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// RetryPolicy bounds the retries of transient action failures. It is plain
// data; every field documents its zero value.
type RetryPolicy struct {
	// MaxAttempts caps the executions of the action for one key, counted
	// across in-call retries, redeliveries and take-overs. Reaching it on a
	// transient error gives RETRY_EXHAUSTED, which is permanent and stored.
	// Zero means 3.
	MaxAttempts int
	// Base is the first backoff delay; attempt n waits Base·2^(n-1).
	// Zero means 100ms.
	Base time.Duration
	// Max caps the exponential delay (before jitter). Zero means 2s.
	Max time.Duration
	// Jitter adds a random fraction of the delay, in [0, Jitter). Zero means
	// no jitter; production configurations use 0.2 to 1.
	Jitter float64
	// MaxRetryAfter caps a downstream's Retry-After that the engine will
	// honour by sleeping in-call. A longer Retry-After ends the in-call
	// retries: the record is released and the event is retried on
	// redelivery. Zero means Max.
	MaxRetryAfter time.Duration
	// Budget caps the total time slept in one call. Zero means no cap other
	// than the deadline: no sleep ever ends past the lease or the ctx
	// deadline minus the engine's safety margin.
	Budget time.Duration
}

func (p RetryPolicy) maxAttempts() int {
	if p.MaxAttempts <= 0 {
		return 3
	}
	return p.MaxAttempts
}

func (p RetryPolicy) base() time.Duration {
	if p.Base <= 0 {
		return 100 * time.Millisecond
	}
	return p.Base
}

func (p RetryPolicy) max() time.Duration {
	if p.Max <= 0 {
		return 2 * time.Second
	}
	return p.Max
}

func (p RetryPolicy) maxRetryAfter() time.Duration {
	if p.MaxRetryAfter <= 0 {
		return p.max()
	}
	return p.MaxRetryAfter
}

// Delay returns how long to wait after the attempt-th failed attempt
// (attempt ≥ 1), given the failure's Retry-After (0 if none) and a random
// number in [0, 1). It is a pure function:
//
//	delay = min(Base·2^(attempt-1), Max) · (1 + Jitter·random)
//	delay = max(delay, retryAfter)
//
// ok is false when retryAfter exceeds MaxRetryAfter: honouring it in-call is
// not allowed, so the caller stops retrying here.
func (p RetryPolicy) Delay(attempt int, retryAfter time.Duration, random float64) (delay time.Duration, ok bool) {
	if retryAfter > p.maxRetryAfter() {
		return retryAfter, false
	}
	if attempt < 1 {
		attempt = 1
	}
	d, limit := p.base(), p.max()
	for i := 1; i < attempt && d < limit; i++ {
		d *= 2
	}
	d = min(d, limit)
	if p.Jitter > 0 {
		d += time.Duration(float64(d) * p.Jitter * random)
	}
	return max(d, retryAfter), true
}

// ParseRetryAfter parses a Retry-After header value: delta-seconds or an
// HTTP date (relative to now). It returns 0 for an empty or malformed value,
// or a date in the past.
func ParseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		return time.Duration(min(secs, int64(24*time.Hour/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
