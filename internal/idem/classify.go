package idem

import (
	"errors"
	"time"
)

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
