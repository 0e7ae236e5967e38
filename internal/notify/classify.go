package notify

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/oncely/oncely/internal/idem"
)

// StatusError is the error a delivery returns for a non-2xx reply. Build it
// with [Classifier.Error]; reach it with errors.As.
type StatusError struct {
	Status int
}

func (e *StatusError) Error() string { return fmt.Sprintf("HTTP %d", e.Status) }

// Classifier maps HTTP replies to idem's classes. Its zero value treats 429,
// 502, 503 and 504 as transient and every other non-2xx status as permanent
// (a 500 included: an unknown server error is permanent by default). This is
// the one place that knows what an HTTP status means for retrying; the
// domain only sees "transient, retry after d" or "permanent, code c".
type Classifier struct {
	// Transient lists statuses that are transient in addition to
	// DefaultTransientStatuses, which always are: a setting that replaced
	// them (NOTIFY_TRANSIENT_STATUSES=500) would turn the next 503 outage
	// into stored permanent failures, every message acknowledged.
	Transient map[int]bool
}

// DefaultTransientStatuses returns the statuses the zero Classifier treats
// as transient: 429, 502, 503, 504.
func DefaultTransientStatuses() []int { return []int{429, 502, 503, 504} }

var defaultTransient = func() map[int]bool {
	m := map[int]bool{}
	for _, s := range DefaultTransientStatuses() {
		m[s] = true
	}
	return m
}()

// Class returns the class of an HTTP status that is not a success.
// Redirects are not followed (a delivery goes to the configured URL only),
// so a 3xx is permanent like a 4xx; 1xx and 2xx are not errors and return
// ClassUnknown.
func (c Classifier) Class(status int) idem.Class {
	switch {
	case defaultTransient[status] || c.Transient[status]:
		return idem.ClassTransient
	case status >= 300:
		return idem.ClassPermanent
	default:
		return idem.ClassUnknown
	}
}

// Error returns a classified error for a non-2xx reply: its class from
// Class, its code "HTTP_<status>", and its Retry-After parsed from the header
// value (delta-seconds or an HTTP date, relative to now).
func (c Classifier) Error(status int, retryAfter string, now time.Time) error {
	return &idem.ClassifiedError{
		Class:      c.Class(status),
		Code:       StatusCode(status),
		RetryAfter: ParseRetryAfter(retryAfter, now),
		// A 502 or 504 comes from a gateway in front of the receiver,
		// which may have forwarded the request before it gave up: the
		// origin may have it and still be acting on it, as after our own
		// timeout. No further POST in this delivery (idem's Sent rule); a
		// 429 or a 503 is the receiver saying it did not take it.
		Sent: status == http.StatusBadGateway || status == http.StatusGatewayTimeout,
		Err:  &StatusError{Status: status},
	}
}

// StatusCode is the code a failure stores for the downstream's HTTP status:
// HTTP_<status>, the codes notify adds to idem's list.
func StatusCode(status int) idem.Code {
	return idem.Code(fmt.Sprintf("HTTP_%d", status))
}

// IsStatusCode reports whether c has the form StatusCode gives: HTTP_ and a
// status from 100 to 599, so that operators' filters can tell a status code
// from a mistyped one.
func IsStatusCode(c idem.Code) bool {
	s, ok := strings.CutPrefix(string(c), "HTTP_")
	n, err := strconv.Atoi(s)
	return ok && err == nil && len(s) == 3 && n >= 100 && n <= 599
}

// maxRetryAfter bounds a parsed Retry-After: a downstream asking for more
// than a day is treated as asking for a day.
const maxRetryAfter = 24 * time.Hour

// ParseRetryAfter parses a Retry-After header value: delta-seconds or an
// HTTP date (relative to now). It returns 0 for an empty or malformed value,
// or a date in the past, and at most a day.
func ParseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		return time.Duration(min(secs, int64(maxRetryAfter/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return min(t.Sub(now), maxRetryAfter)
	}
	return 0
}
