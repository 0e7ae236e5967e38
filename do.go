package oncely

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/oncely/oncely/internal/idem"
)

// Do runs fn at most once for key, and returns its result: the one it
// returns now, or the one stored by an earlier call with the same key,
// decoded into R. payload is what the key stands for, encoded as JSON and
// fingerprinted: the same key with another payload is refused with
// KEY_REUSED and fn does not run. The result R is stored as JSON, so it
// must encode and decode as JSON (exported fields); one that cannot be
// encoded is stored as a permanent failure, after fn's side effect.
//
// The error is an *Error (errors.As), or fn's error marked by the engine:
//   - nil: fn ran now and succeeded, or an earlier success was replayed;
//   - a permanent failure stored now or earlier: replayed later as the
//     same code with its fixed sentence, matching [ErrReplayed];
//   - a transient failure (retryable, Retry-After), IN_PROGRESS while
//     another call holds the key, or a store failure: call again later.
func Do[R any](ctx context.Context, e *Engine, key string, payload any, fn func(context.Context) (R, error)) (R, error) {
	body, err := json.Marshal(payload)
	if err != nil {
		var zero R
		return zero, &Error{Code: CodeInvalidPayload, Message: "oncely.Do: the payload cannot be encoded as JSON: " + err.Error(), Err: err}
	}
	return run(ctx, e, key, body, fn)
}

// run is Do with the payload already encoded.
func run[R any](ctx context.Context, e *Engine, key string, payload []byte, fn func(context.Context) (R, error)) (R, error) {
	var zero R
	req, err := NewRequest(key, payload)
	if err != nil {
		return zero, err
	}
	var fresh R // what fn returned, when it ran and succeeded in this call
	out := e.Run(ctx, req, func(ctx context.Context) ([]byte, Effects, error) {
		r, err := fn(ctx)
		if err != nil {
			return nil, nil, err
		}
		fresh = r
		b, err := json.Marshal(r)
		if err != nil {
			return nil, nil, PermanentCode(CodePermanentFailure, fmt.Errorf("oncely: the result cannot be encoded as JSON: %w", err))
		}
		return b, nil, nil
	})
	if out.Err != nil {
		if out.Replayed {
			return zero, &replayed{out.Err}
		}
		return zero, out.Err
	}
	if !out.Replayed {
		// fn's own value: a result that encodes but does not decode back
		// into R (an interface) fails only its replays, never this call.
		return fresh, nil
	}
	var r R
	if err := json.Unmarshal(out.Result, &r); err != nil {
		return zero, &Error{Code: idem.CodeCorruptRecord, Message: "oncely: the stored result does not decode into the result type: " + err.Error(), Err: err}
	}
	return r, nil
}

// WrapOption configures [Wrap] for events of type T.
type WrapOption[T any] func(*wrapConfig[T])

type wrapConfig[T any] struct {
	payload func(T) any // nil: the whole event
}

// PayloadOf makes Wrap fingerprint what f returns instead of the whole
// event: leave out the fields that change between copies of one event (a
// delivery timestamp, a retry counter), or every copy after the first is
// refused with KEY_REUSED.
func PayloadOf[T any](f func(T) any) WrapOption[T] {
	return func(c *wrapConfig[T]) { c.payload = f }
}

// NoPayload makes Wrap fingerprint nothing: any event with the same key is
// taken for the same event. Use it when the key alone identifies the event
// and its body may legitimately differ between copies.
func NoPayload[T any]() WrapOption[T] {
	return PayloadOf(func(T) any { return nil })
}

// Wrap returns fn made idempotent: each event runs fn at most once for the
// key that key gives it, and a replay returns the stored result. By default
// the whole event is the payload that must match for the same key (see
// [PayloadOf] and [NoPayload]). The errors are [Do]'s; an error from key is
// an INVALID_KEY *Error wrapping it.
func Wrap[T, R any](e *Engine, key func(T) (string, error), fn func(context.Context, T) (R, error), opts ...WrapOption[T]) func(context.Context, T) (R, error) {
	var c wrapConfig[T]
	for _, o := range opts {
		o(&c)
	}
	return func(ctx context.Context, ev T) (R, error) {
		var zero R
		k, err := key(ev)
		if err != nil {
			return zero, &Error{Code: CodeInvalidKey, Message: "oncely.Wrap: the key function failed: " + err.Error(), Err: err}
		}
		var payload any = ev
		if c.payload != nil {
			payload = c.payload(ev)
		}
		body, err := json.Marshal(payload)
		if err != nil {
			return zero, &Error{Code: CodeInvalidPayload, Message: "oncely.Wrap: the payload cannot be encoded as JSON: " + err.Error(), Err: err}
		}
		return run(ctx, e, k, body, func(ctx context.Context) (R, error) { return fn(ctx, ev) })
	}
}
