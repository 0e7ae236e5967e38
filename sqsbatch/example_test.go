package sqsbatch_test

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/oncelytest"
	"github.com/oncely/oncely/sqsbatch"
)

// Payment is the event a team's queue carries.
type Payment struct {
	OrderID string `json:"order_id"`
	Cents   int    `json:"cents"`
}

// A function that charges each order once, however often SQS delivers it.
// In main: lambda.Start(sqsbatch.Wrap(...)) with a DynamoDB store.
func ExampleWrap() {
	engine, err := oncely.New(oncelytest.NewStore(), oncely.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	charges := 0
	handler := sqsbatch.Wrap(engine,
		sqsbatch.JSON(func(p Payment) (string, error) { return oncely.Key("charge", p.OrderID) }),
		func(ctx context.Context, p Payment) error {
			charges++ // charge p.Cents for p.OrderID
			return nil
		}, sqsbatch.Options{})

	resp, err := handler(context.Background(), events.SQSEvent{Records: []events.SQSMessage{
		{MessageId: "m1", Body: `{"order_id":"o-1001","cents":500}`},
		{MessageId: "m2", Body: `{"order_id":"o-1001","cents":500}`}, // a copy
		{MessageId: "m3", Body: `not json`},                          // poison: acknowledged with a note
	}})
	fmt.Println(charges, len(resp.BatchItemFailures), err)
	// Output: 1 0 <nil>
}

// New gives the function a result to store and what happened to each
// message; Backoff (not shown) gives each message that goes back a delay
// of its own.
func ExampleNew() {
	engine, err := oncely.New(oncelytest.NewStore(), oncely.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	h, err := sqsbatch.New(engine,
		sqsbatch.JSON(func(p Payment) (string, error) { return oncely.Key("charge", p.OrderID) }),
		func(ctx context.Context, p Payment) ([]byte, oncely.Effects, error) {
			if p.Cents <= 0 {
				return nil, nil, oncely.PermanentCode("BAD_AMOUNT", fmt.Errorf("amount %d", p.Cents))
			}
			return fmt.Appendf(nil, `{"charged":%d}`, p.Cents), nil, nil
		}, sqsbatch.Options{})
	if err != nil {
		panic(err)
	}
	ev := events.SQSEvent{Records: []events.SQSMessage{
		{MessageId: "m1", Body: `{"order_id":"o-1","cents":500}`},
		{MessageId: "m2", Body: `{"order_id":"o-2","cents":0}`},
		{MessageId: "m3", Body: `{"order_id":"o-3","cents":"500"}`},
	}}
	for range 2 { // the second delivery replays
		_, results, _ := h.Handle(context.Background(), ev)
		for _, r := range results {
			fmt.Println(r.MessageID, r.Key, r.Label, r.Code, r.Ack())
		}
	}
	// Output:
	// m1 charge:o-1 executed  true
	// m2 charge:o-2 permanent BAD_AMOUNT true
	// m3  poison INVALID_PAYLOAD true
	// m1 charge:o-1 replayed  true
	// m2 charge:o-2 permanent BAD_AMOUNT true
	// m3  poison INVALID_PAYLOAD true
}

// The JSON decoder keys an event with the team's function and fingerprints
// its whole body; what it refuses names members and types, never values.
func ExampleJSON() {
	decode := sqsbatch.JSON(func(p Payment) (string, error) { return oncely.Key("charge", p.OrderID) })

	req, p, err := decode(events.SQSMessage{Body: `{"order_id":"o-1001","cents":500}`})
	fmt.Println(req.Key, p.Cents, err)

	_, _, err = decode(events.SQSMessage{Body: `{"order_id":"o-1001","cents":"500"}`})
	fmt.Println(err)

	_, _, err = decode(events.SQSMessage{Body: `{"cents":500}`})
	fmt.Println(err)
	// Output:
	// charge:o-1001 500 <nil>
	// INVALID_PAYLOAD: member cents is a JSON string; sqsbatch_test.Payment wants int
	// INVALID_KEY: the key function refused the event: oncely.Key: part #2 is empty
}
