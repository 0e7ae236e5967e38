// Command orders is the SQS queue consumer a team writes: each order on
// the queue is charged through a payment API, once, however many times the
// order is sent or SQS delivers it. It shows sqsbatch.Wrap over dynamostore:
// the key comes from the order's id (a producer that sends an order twice
// sends two messages, with two message ids, of one order), the payment
// API's errors are marked transient or permanent, and a transient failure
// goes back to the queue with a delay of its own (the function's SQS client
// changes its visibility), while the batch's other orders are acknowledged
// (ReportBatchItemFailures). A body that is not an order is acknowledged
// with a poison note in the table, instead of cycling to the DLQ.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/dynamostore"
	"github.com/oncely/oncely/sqsbatch"
)

func main() {
	cfg, err := config.LoadDefaultConfig(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	store, err := dynamostore.New(dynamodb.NewFromConfig(cfg), os.Getenv("TABLE_NAME"), dynamostore.Options{Namespace: "orders"})
	if err != nil {
		log.Fatal(err)
	}
	// One attempt per delivery: the queue is the retry loop (a failed order
	// waits outside the batch, not in it).
	engine, err := oncely.New(store, oncely.Options{SentPause: paymentTimeout, Retry: oncely.RetryPolicy{AttemptsPerDelivery: 1}})
	if err != nil {
		log.Fatal(err)
	}
	lambda.Start(sqsbatch.Wrap(engine, sqsbatch.JSON(orderKey), charge,
		sqsbatch.Options{Backoff: &sqsbatch.Backoff{SQS: sqs.NewFromConfig(cfg), Base: retryBase}}))
}

// retryBase is the first delay of an order that goes back to the queue
// (RETRY_BASE, a Go duration such as 30s); unset or not a duration, it is
// zero: sqsbatch's default, 30 s.
var retryBase, _ = time.ParseDuration(os.Getenv("RETRY_BASE"))

// The business logic and its event: everything below is the team's own.

// Order is a message of the orders queue.
type Order struct {
	OrderID     string `json:"orderId"`
	AmountCents int64  `json:"amountCents"`
	Currency    string `json:"currency"`
}

const paymentTimeout = 10 * time.Second

// orderKey names the business event: one charge per order, whichever
// message carries it. A body without an order id is refused (a poison
// note), never charged.
func orderKey(o Order) (string, error) {
	if o.OrderID == "" {
		return "", errors.New("the order has no orderId")
	}
	return oncely.Key("order", o.OrderID, "charge")
}

func charge(ctx context.Context, o Order) error {
	key, _ := oncely.KeyFrom(ctx)
	body, _ := json.Marshal(map[string]any{"orderId": o.OrderID, "amountCents": o.AmountCents, "currency": o.Currency})
	ctx, cancel := context.WithTimeout(ctx, paymentTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, os.Getenv("PAYMENT_API_URL"), bytes.NewReader(body))
	if err != nil {
		return oncely.Permanent(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key) // the payment API de-duplicates too
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return oncely.TransientSent(err) // a timeout or a reset: it may have the request
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusBadGateway || resp.StatusCode == http.StatusGatewayTimeout:
		return oncely.TransientSent(fmt.Errorf("payment API: %s", resp.Status)) // a gateway's: it may have forwarded it
	case resp.StatusCode == http.StatusTooManyRequests:
		after, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		return oncely.TransientAfter(fmt.Errorf("payment API: %s", resp.Status), time.Duration(after)*time.Second)
	case resp.StatusCode >= 500:
		return oncely.Transient(fmt.Errorf("payment API: %s", resp.Status))
	case resp.StatusCode >= 300:
		return oncely.PermanentCode("PAYMENT_REFUSED", fmt.Errorf("payment API: %s", resp.Status)) // a declined card, a bad order
	}
	return nil
}
