package oncely_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/oncelytest"
)

// Do runs the charge once; the second call with the same key gets the
// stored receipt and the charge does not run again.
func ExampleDo() {
	engine, err := oncely.New(oncelytest.NewStore(), oncely.Options{})
	if err != nil {
		panic(err)
	}
	type Order struct {
		ID    string
		Cents int
	}
	type Receipt struct{ ChargeID string }

	order := Order{ID: "1001", Cents: 500}
	charges := 0
	charge := func(ctx context.Context) (Receipt, error) {
		charges++
		return Receipt{ChargeID: fmt.Sprintf("ch_%d", charges)}, nil
	}
	key, _ := oncely.Key("order", order.ID, "charge")
	for range 2 { // the same event, delivered twice
		receipt, err := oncely.Do(context.Background(), engine, key, order, charge)
		fmt.Println(receipt.ChargeID, err)
	}
	fmt.Println("charges:", charges)
	// Output:
	// ch_1 <nil>
	// ch_1 <nil>
	// charges: 1
}

// Wrap makes a handler of your own event type idempotent. The event's
// delivery time changes between copies, so the fingerprint leaves it out
// with PayloadOf; without it the second copy would be refused with
// KEY_REUSED.
func ExampleWrap() {
	engine, err := oncely.New(oncelytest.NewStore(), oncely.Options{})
	if err != nil {
		panic(err)
	}
	type Signup struct {
		UserID      string
		Email       string
		DeliveredAt string // differs on every copy
	}
	sent := 0
	welcome := func(ctx context.Context, s Signup) (string, error) {
		sent++
		return "welcome mail to " + s.Email, nil
	}
	handler := oncely.Wrap(engine,
		func(s Signup) (string, error) { return oncely.Key("signup", s.UserID, "welcome") },
		welcome,
		oncely.PayloadOf(func(s Signup) any { return []string{s.UserID, s.Email} }),
	)
	ctx := context.Background()
	for _, at := range []string{"2026-05-01T10:00:00Z", "2026-05-01T10:05:00Z"} {
		got, err := handler(ctx, Signup{UserID: "u-42", Email: "ada@example.com", DeliveredAt: at})
		fmt.Println(got, err)
	}
	// The same key with another payload is another event under a reused key.
	_, err = handler(ctx, Signup{UserID: "u-42", Email: "eve@example.com"})
	fmt.Println("reused:", errors.Is(err, oncely.ErrKeyReused))
	fmt.Println("sent:", sent)
	// Output:
	// welcome mail to ada@example.com <nil>
	// welcome mail to ada@example.com <nil>
	// reused: true
	// sent: 1
}

// Keys are 8 to 128 characters of A-Z a-z 0-9 : _ -, built from the
// event's identity and the action, never the attempt.
func ExampleKey() {
	key, err := oncely.Key("order", "1001", "charge")
	fmt.Println(key, err)

	_, err = oncely.Key("order", "a@b.example", "charge")
	fmt.Println(errors.Is(err, oncely.ErrInvalidKey))
	// Output:
	// order:1001:charge <nil>
	// true
}

// HashKey takes ids outside the key's characters (an email, a URL); the
// same parts give the same key in every version.
func ExampleHashKey() {
	key := oncely.HashKey("newsletter", "ada@example.com")
	fmt.Println(strings.HasPrefix(key, "sha256:"), len(key))
	fmt.Println(key == oncely.HashKey("newsletter", "ada@example.com"))
	fmt.Println(key == oncely.HashKey("newsletterada", "@example.com"))
	// Output:
	// true 71
	// true
	// false
}

// Marking errors. A transient failure (a 503) leaves the key free: the next
// delivery runs again. A permanent one (a declined card) is stored and
// replayed, with its code, without running again. An error you do not mark
// is stored as permanent too: a retry might repeat a side effect. What a
// caller sees is the code and a fixed sentence; your error's text goes to
// the attempt's log line.
func ExampleTransient() {
	engine, err := oncely.New(oncelytest.NewStore(), oncely.Options{
		Retry:  oncely.RetryPolicy{AttemptsPerDelivery: 1}, // no in-call retry, for the example
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()

	// Transient, then a success on the next delivery.
	calls := 0
	flaky := func(context.Context) (string, error) {
		calls++
		if calls == 1 {
			return "", oncely.Transient(errors.New("payment service: 503"))
		}
		return "paid", nil
	}
	for range 2 {
		got, err := oncely.Do(ctx, engine, "order:1001:charge", 500, flaky)
		var oe *oncely.Error
		if errors.As(err, &oe) {
			fmt.Println(oe.Code, "retryable:", oe.Retryable)
		} else {
			fmt.Println(got)
		}
	}

	// Permanent: stored once, replayed without running again.
	declines := 0
	decline := func(context.Context) (string, error) {
		declines++
		return "", oncely.PermanentCode("CARD_DECLINED", errors.New("issuer said no: insufficient funds"))
	}
	for range 2 {
		_, err := oncely.Do(ctx, engine, "order:1002:charge", 900, decline)
		var oe *oncely.Error
		errors.As(err, &oe)
		fmt.Println(oe.Code, "replayed:", errors.Is(err, oncely.ErrReplayed), "message:", oe.Message)
	}
	fmt.Println("calls:", calls, "declines:", declines)
	// Output:
	// TRANSIENT_FAILURE retryable: true
	// paid
	// CARD_DECLINED replayed: false message: the action failed, and would fail the same way again
	// CARD_DECLINED replayed: true message: the action failed, and would fail the same way again
	// calls: 2 declines: 1
}
