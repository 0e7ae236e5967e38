package idem

import (
	"context"
	"time"
)

// Defaults for [Budget].
const (
	// DefaultStoreReserve is kept back after the work for the completion
	// write and its retries. DynamoDB answers in milliseconds; the reserve
	// covers a throttle or two and the SDK's retries.
	DefaultStoreReserve = 500 * time.Millisecond
	// DefaultRespondReserve is kept back after the last store write for the
	// adapter's own calls (the SQS visibility changes) and the response.
	DefaultRespondReserve = 500 * time.Millisecond
	// DefaultMinWork is the least time worth starting an attempt with.
	DefaultMinWork = 200 * time.Millisecond
)

// Budget divides an invocation's time, and is the one rule for it: the
// engine, the adapters and the configuration check all ask it. With D the
// invocation's deadline and L the lease's end:
//
//	store deadline = D − RespondReserve        every store call, SDK retries included, ends by then
//	work deadline  = min(L, store deadline) − StoreReserve    the action's ctx ends, no retry sleeps past it
//	start rule     = work deadline − now ≥ MinWork            otherwise the record is not started (DEADLINE)
//	abandon        = end of the action's ctx + StoreReserve/4  an action still running then is abandoned (ABANDONED)
//
// so that the function always answers with per-record outcomes instead of
// timing out. Each zero field means its default.
type Budget struct {
	StoreReserve   time.Duration
	RespondReserve time.Duration
	MinWork        time.Duration
}

func (b Budget) storeReserve() time.Duration { return orDefault(b.StoreReserve, DefaultStoreReserve) }
func (b Budget) respondReserve() time.Duration {
	return orDefault(b.RespondReserve, DefaultRespondReserve)
}
func (b Budget) minWork() time.Duration { return orDefault(b.MinWork, DefaultMinWork) }

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// AbandonGrace is how long the engine still waits for an action once its
// context has ended (at the work deadline) before abandoning it: a quarter
// of the store reserve, so that an action that returns within it still has
// the rest of the reserve for its completion write, and one that never
// returns leaves the invocation its whole respond reserve to answer.
func (b Budget) AbandonGrace() time.Duration { return b.storeReserve() / 4 }

// Reserve is the time kept back at the end of an invocation: the store
// reserve plus the respond reserve.
func (b Budget) Reserve() time.Duration { return b.storeReserve() + b.respondReserve() }

// StoreDeadline returns when store calls must end for an invocation whose
// deadline is d.
func (b Budget) StoreDeadline(d time.Time) time.Time { return d.Add(-b.respondReserve()) }

// WorkDeadline returns when the action's work must end, given the lease's
// end and the invocation's deadline (zero if it has none).
func (b Budget) WorkDeadline(leaseEnd, d time.Time) time.Time {
	end := leaseEnd
	if !d.IsZero() {
		if sd := b.StoreDeadline(d); sd.Before(end) {
			end = sd
		}
	}
	return end.Add(-b.storeReserve())
}

// CanStart reports whether an attempt that must end by workDeadline is
// worth starting at now.
func (b Budget) CanStart(now, workDeadline time.Time) bool {
	return workDeadline.Sub(now) >= b.minWork()
}

// WorkTime is how long an invocation of timeout leaves for work, for
// checking configuration against the function's timeout.
func (b Budget) WorkTime(timeout time.Duration) time.Duration { return timeout - b.Reserve() }

// LeaseWorkTime is how long a lease of d leaves for work: the completion
// write must land before the lease ends.
func (b Budget) LeaseWorkTime(d time.Duration) time.Duration { return d - b.storeReserve() }

// StoreContext bounds ctx by the store deadline of its invocation. Adapters
// use it for their own store writes (poison notes); the engine for all of
// its calls. A ctx without a deadline is returned unbounded.
func (b Budget) StoreContext(ctx context.Context) (context.Context, context.CancelFunc) {
	d, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	return context.WithDeadline(ctx, b.StoreDeadline(d))
}

// CallDeadline returns when an adapter's own calls after the store writes
// (the SQS visibility changes) must end, for an invocation whose deadline
// is d: a quarter of the respond reserve is left for the response itself.
func (b Budget) CallDeadline(d time.Time) time.Time { return d.Add(-b.respondReserve() / 4) }

// CallContext bounds ctx by the call deadline of its invocation.
func (b Budget) CallContext(ctx context.Context) (context.Context, context.CancelFunc) {
	d, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	return context.WithDeadline(ctx, b.CallDeadline(d))
}
