package idem_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/oncely/oncely/internal/idem"
)

// sentWithRetryAfter is what notify returns for a gateway's 504 with
// Retry-After: the request may have reached the origin, which asked for
// a short pause.
func sentWithRetryAfter(after time.Duration) error {
	return &idem.ClassifiedError{Class: idem.ClassTransient, Sent: true, RetryAfter: after, Err: errBoom}
}

// TestSentFailureHoldsTheKeyOffForThePause: after an attempt whose request
// may have reached its receiver, the engine releases the key with a
// hold-off of Options.SentPause: a delivery that comes sooner (a caller
// ignoring Retry-After, a queue whose visibility was cut to a gateway's
// Retry-After: 1) is refused as IN_PROGRESS and runs nothing; the outcome
// asks for at least the pause, and at least the receiver's Retry-After.
func TestSentFailureHoldsTheKeyOffForThePause(t *testing.T) {
	const pause = 4 * time.Second
	f := newFixture(t, func(o *idem.Options) { o.SentPause = pause })
	key := "evt:hold-1:notify"
	act := &counter{script: []error{sentWithRetryAfter(time.Second)}}
	start := f.clock.Now()
	out, err := f.engine.Do(context.Background(), req(t, key, `{}`), act.run)
	if errCode(err) != idem.CodeTransientFailure || out.Err.RetryAfter != pause || out.Stored {
		t.Fatalf("first delivery: %v (Retry-After %v), stored %v; want a released TRANSIENT_FAILURE asking for the %v pause, not the receiver's 1 s", err, out.Err.RetryAfter, out.Stored, pause)
	}
	if rec := get(t, f, key); !rec.HoldUntil.Equal(start.Add(pause)) || rec.Claimable(start.Add(pause-time.Millisecond)) {
		t.Fatalf("record holds until %v (claimable before it: %v); want held until %v", rec.HoldUntil, rec.Claimable(start.Add(pause-time.Millisecond)), start.Add(pause))
	}

	f.clock.Advance(time.Second) // the receiver's Retry-After has passed, the pause has not
	out, err = f.engine.Do(context.Background(), req(t, key, `{}`), act.run)
	if !errors.Is(err, idem.ErrInProgress) || out.Err.RetryAfter != pause-time.Second || act.calls.Load() != 1 {
		t.Fatalf("a delivery 1 s later: %v (Retry-After %v), %d executions; want IN_PROGRESS for the %v left, no second execution", err, out.Err.RetryAfter, act.calls.Load(), pause-time.Second)
	}
	if out.Label() != idem.LabelInProgress {
		t.Errorf("label %s; want %s", out.Label(), idem.LabelInProgress)
	}

	f.clock.Advance(pause - time.Second) // the hold-off ends exactly now
	out, err = f.engine.Do(context.Background(), req(t, key, `{}`), act.run)
	if err != nil || out.Attempts != 2 || act.calls.Load() != 2 {
		t.Fatalf("a delivery once the pause has passed: %+v %v, %d executions; want the take-over to run it at attempt 2", out, err, act.calls.Load())
	}
}

// TestReceiversLongerRetryAfterWins: a receiver that asks for longer than
// the pause gets what it asked for; the hold-off is still the pause.
func TestReceiversLongerRetryAfterWins(t *testing.T) {
	f := newFixture(t, func(o *idem.Options) { o.SentPause = 4 * time.Second })
	act := &counter{script: []error{sentWithRetryAfter(20 * time.Second)}}
	out, _ := f.engine.Do(context.Background(), req(t, "evt:hold-2:notify", `{}`), act.run)
	if out.Err == nil || out.Err.RetryAfter != 20*time.Second {
		t.Fatalf("outcome %+v; want Retry-After 20s, the receiver's", out.Err)
	}
}

// TestUnsentFailureIsNotHeldOff: a transient failure that cannot have
// reached the receiver (a refused dial), or any failure without a pause
// configured, is released at once, as before holds existed.
func TestUnsentFailureIsNotHeldOff(t *testing.T) {
	for name, tc := range map[string]struct {
		pause time.Duration
		err   error
	}{
		"not sent":          {4 * time.Second, idem.Transient(errBoom)},
		"sent, no pause":    {0, idem.TransientSent(errBoom)},
		"sent, Retry-After": {0, sentWithRetryAfter(time.Second)},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, func(o *idem.Options) { o.SentPause = tc.pause; o.Retry.AttemptsPerDelivery = 1 })
			key := "evt:hold-3:notify"
			act := &counter{script: []error{tc.err}}
			_, _ = f.engine.Do(context.Background(), req(t, key, `{}`), act.run)
			if rec := get(t, f, key); !rec.HoldUntil.IsZero() || !rec.Claimable(f.clock.Now()) {
				t.Errorf("record held until %v, claimable %v; want no hold-off, claimable at once", rec.HoldUntil, rec.Claimable(f.clock.Now()))
			}
		})
	}
}

// TestLeaseRunsThePausePastTheWork: the lease written at reservation ends
// SentPause after the work's own lease, so that a crashed worker's key (or
// an abandoned action's, which may still be sending) is not taken over
// before a request it made has had the pause; the action's context still
// ends at the work deadline.
func TestLeaseRunsThePausePastTheWork(t *testing.T) {
	const pause = 3 * time.Second
	f := newFixture(t, func(o *idem.Options) { o.SentPause = pause; o.Lease = 0 })
	deadline := f.clock.Now().Add(30 * time.Second)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	key := "evt:hold-4:notify"
	var lease, workEnd time.Time
	_, err := f.engine.Do(ctx, req(t, key, `{}`), func(ctx context.Context) ([]byte, error) {
		lease = get(t, f, key).LeaseUntil
		workEnd, _ = ctx.Deadline()
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !lease.Equal(deadline.Add(pause)) {
		t.Errorf("stored lease ends %v after the deadline; want the pause, %v", lease.Sub(deadline), pause)
	}
	if want := (idem.Budget{}).WorkDeadline(deadline, deadline); !workEnd.Equal(want) {
		t.Errorf("the action's context ends %v before the deadline; want %v, as without a pause", deadline.Sub(workEnd), deadline.Sub(want))
	}

	// A worker that crashed mid-action keeps the key for the pause past its
	// lease's work end.
	crash := newFixture(t, func(o *idem.Options) { o.SentPause = pause })
	r := req(t, "evt:hold-5:notify", `{}`)
	crashed := make(chan struct{})
	go func() {
		_, _ = crash.engine.Do(context.Background(), r, func(ctx context.Context) ([]byte, error) {
			close(crashed)
			<-dead(t)
			return nil, errBoom
		})
	}()
	<-crashed
	act := &counter{}
	crash.clock.Advance(time.Minute) // the configured lease's end
	out, err := crash.engine.Do(context.Background(), r, act.run)
	if !errors.Is(err, idem.ErrInProgress) || out.Err.RetryAfter != pause || act.calls.Load() != 0 {
		t.Fatalf("at the work lease's end: %v (Retry-After %v), %d executions; want IN_PROGRESS for the pause", err, out.Err.RetryAfter, act.calls.Load())
	}
	crash.clock.Advance(pause)
	if out, err := crash.engine.Do(context.Background(), r, act.run); err != nil || act.calls.Load() != 1 || out.Attempts != 2 {
		t.Fatalf("once the pause has passed: %+v %v, %d executions; want a take-over that runs once", out, err, act.calls.Load())
	}
}

// TestAbandonedActionsRetryAfterCoversThePause: an abandoned action may
// still be sending; its outcome asks the caller to wait for the lease,
// which runs the pause past the deadline.
func TestAbandonedActionsRetryAfterCoversThePause(t *testing.T) {
	const pause = 10 * time.Second
	budget := idem.Budget{StoreReserve: 2 * time.Second, RespondReserve: 2 * time.Second}
	f := newFixture(t, func(o *idem.Options) { o.Budget = budget; o.SentPause = pause })
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(5*time.Second))
	defer cancel()
	release := make(chan struct{})
	defer close(release)
	out := f.engine.DoWork(ctx, req(t, "evt:hold-6:notify", `{}`), func(context.Context) ([]byte, idem.Effects, error) {
		<-release // ignores its context
		return nil, nil, nil
	})
	if out.Err == nil || out.Err.Code != idem.CodeAbandoned || out.Err.RetryAfter < pause {
		t.Fatalf("outcome %+v; want ABANDONED with Retry-After >= the %v pause", out.Err, pause)
	}
}
