package sample

import (
	"context"
	"time"
)

// withBudget sets a deadline in the code under test: not by itself a reason.
func withBudget(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, time.Second)
}

// pause waits on time, two calls away from the test that uses it.
func pause() { time.Sleep(time.Millisecond) }

type poller struct{}

func (poller) poll() { pause() }
