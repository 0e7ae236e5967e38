// Command walkthrough runs the seed's scenarios through the idempotency
// engine over the in-memory store and prints what happened to each. It needs
// no AWS and no network: `make walkthrough`.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/testing/memstore"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "walkthrough:", err)
		os.Exit(1)
	}
}

func run(w io.Writer) error {
	// The seed's policy: 3 attempts, 10 ms base, no jitter. The seed's
	// scenario 6 expects RETRY_EXHAUSTED, which only a per-key cap gives;
	// the product's default (no cap) releases the key instead (6b).
	seed := idem.RetryPolicy{AttemptsPerDelivery: 3, AttemptsPerKey: 3, Base: 10 * time.Millisecond, Max: time.Second}
	newEngine := func(p idem.RetryPolicy) (*idem.Engine, error) {
		return idem.New(idem.Options{Store: memstore.New(), Retry: p, Lease: time.Minute, Logger: slog.New(slog.DiscardHandler)})
	}
	engine, err := newEngine(seed)
	if err != nil {
		return err
	}
	uncapped := seed
	uncapped.AttemptsPerKey = 0
	defaultEngine, err := newEngine(uncapped)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tscenario\tkey\toutcome\tcalls\tattempts\tdelays slept")
	row := func(n int, scenario, key string, out idem.Outcome, calls int) {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%v\n", n, scenario, key, describe(out), calls, out.Attempts, out.Delays)
	}
	ctx := context.Background()
	doWith := func(e *idem.Engine, key, payload string, act idem.Action) idem.Outcome {
		r, err := idem.NewRequest(key, []byte(payload))
		if err != nil {
			return idem.Outcome{Key: key, Err: asError(err)}
		}
		out, _ := e.Do(ctx, r, act)
		return out
	}
	do := func(key, payload string, act idem.Action) idem.Outcome { return doWith(engine, key, payload, act) }

	// 1. A transient error, then success.
	a := script(idem.Transient(errors.New("503 from downstream")))
	row(1, "transient then success", "evt:release-42:notify", do("evt:release-42:notify", `{"id":"release-42","action":"notify"}`, a.run), a.calls)

	// 2. The same event again, keys reordered: replayed.
	b := script()
	row(2, "duplicate, keys reordered", "evt:release-42:notify", do("evt:release-42:notify", `{"action":"notify","id":"release-42"}`, b.run), b.calls)

	// 3. Same key, other payload.
	c := script()
	row(3, "same key, other payload", "evt:release-42:notify", do("evt:release-42:notify", `{"id":"release-42","action":"notify","x":1}`, c.run), c.calls)

	// 4. An invalid key.
	d := script()
	row(4, "invalid key", "evt:bad key", do("evt:bad key", `{}`, d.run), d.calls)

	// 5. A permanent error.
	e := script(idem.Permanent(errors.New("404 from downstream")))
	row(5, "permanent error", "evt:release-43:notify", do("evt:release-43:notify", `{"id":"release-43"}`, e.run), e.calls)

	// 6. Three transient errors.
	transient := idem.Transient(errors.New("503 from downstream"))
	f := script(transient, transient, transient)
	row(6, "three transient errors, per-key cap 3", "evt:release-44:notify", do("evt:release-44:notify", `{"id":"release-44"}`, f.run), f.calls)
	f2 := script(transient, transient, transient)
	row(6, "the same, no per-key cap (default)", "evt:release-47:notify", doWith(defaultEngine, "evt:release-47:notify", `{"id":"release-47"}`, f2.run), f2.calls)

	// 7. Two concurrent calls.
	var (
		mu      sync.Mutex
		calls   int
		started = make(chan struct{})
		release = make(chan struct{})
		first   = make(chan idem.Outcome)
	)
	slow := func(context.Context) ([]byte, error) {
		mu.Lock()
		calls++
		mu.Unlock()
		close(started)
		<-release
		return []byte(`{"sent":true}`), nil
	}
	go func() { first <- do("evt:release-45:notify", `{"id":"release-45"}`, slow) }()
	<-started
	second := do("evt:release-45:notify", `{"id":"release-45"}`, slow)
	close(release)
	row(7, "concurrent call A", "evt:release-45:notify", <-first, calls)
	row(7, "concurrent call B", "evt:release-45:notify", second, 0)

	// 8. Different events, same payload.
	g := script()
	row(8, "other event, same payload", "evt:release-46:notify", do("evt:release-46:notify", `{"id":"release-45"}`, g.run), g.calls)
	return tw.Flush()
}

func describe(out idem.Outcome) string {
	switch {
	case out.Err == nil && out.Replayed:
		return "replayed " + string(out.Result)
	case out.Err == nil:
		return "executed " + string(out.Result)
	case out.Replayed:
		return "replayed failure " + string(out.Err.Code)
	case out.Err.Code == idem.CodeInProgress:
		return "in progress (retry later)"
	case out.Err.Retryable:
		return "released, back to the queue: " + string(out.Err.Code)
	default:
		return "failed " + string(out.Err.Code) + ": " + strings.SplitN(out.Err.Detail(), ";", 2)[0]
	}
}

func asError(err error) *idem.Error {
	var e *idem.Error
	if errors.As(err, &e) {
		return e
	}
	return &idem.Error{Code: idem.CodePermanentFailure, Message: err.Error()}
}

type scripted struct {
	errs  []error
	calls int
}

func script(errs ...error) *scripted { return &scripted{errs: errs} }

func (s *scripted) run(context.Context) ([]byte, error) {
	s.calls++
	if s.calls <= len(s.errs) {
		return nil, s.errs[s.calls-1]
	}
	return []byte(`{"sent":true}`), nil
}
