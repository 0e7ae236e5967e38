// Command orders-api is the HTTP API handler a team writes: POST /orders
// creates an order, once per Idempotency-Key, however many times the client
// retries it (a timeout, a lost response, a double click). It shows
// apigw.WrapV2 over dynamostore around the team's own handler: the handler
// reserves the stock through an inventory service, passing the scoped key
// (oncely.KeyFrom) on as that service's Idempotency-Key, marks the
// service's errors transient or permanent, and answers 201 with the order.
// apigw does the rest: 400 without a key, the stored 201 replayed with
// Idempotent-Replayed: true, 409 while the first request is in flight, 422
// for the same key with another body, 503 with Retry-After after a
// transient failure, and keys scoped by the caller the JWT authorizer names.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/apigw"
	"github.com/oncely/oncely/dynamostore"
)

func main() {
	cfg, err := config.LoadDefaultConfig(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	store, err := dynamostore.New(dynamodb.NewFromConfig(cfg), os.Getenv("TABLE_NAME"), dynamostore.Options{Namespace: "orders-api"})
	if err != nil {
		log.Fatal(err)
	}
	// One attempt per request: the client is the retry loop (it gets 503
	// with Retry-After), and a request does not sleep inside API Gateway's
	// 30 s.
	engine, err := oncely.New(store, oncely.Options{SentPause: inventoryTimeout, Retry: oncely.RetryPolicy{AttemptsPerDelivery: 1}})
	if err != nil {
		log.Fatal(err)
	}
	lambda.Start(apigw.WrapV2(engine, createOrder, apigw.Options{JWTIssuer: os.Getenv("JWT_ISSUER"), OnReplay: logReplay}))
}

// The business logic and its request: everything below is the team's own.

// NewOrder is the body of POST /orders.
type NewOrder struct {
	Item     string `json:"item"`
	Quantity int    `json:"quantity"`
	Note     string `json:"note,omitempty"`
}

// Order is the 201's body: stored with the key, and replayed to a retry.
type Order struct {
	OrderID       string `json:"orderId"`
	Item          string `json:"item"`
	Quantity      int    `json:"quantity"`
	ReservationID string `json:"reservationId"`
}

const inventoryTimeout = 5 * time.Second

func createOrder(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	var o NewOrder
	if err := json.Unmarshal([]byte(req.Body), &o); err != nil || o.Item == "" || o.Quantity < 1 {
		// A 4xx is stored: the same request gets the same answer.
		return respond(http.StatusBadRequest, map[string]string{"error": "the body must be an order: {item, quantity >= 1}"}), nil
	}
	reservation, err := reserveStock(ctx, o)
	if err != nil {
		return events.APIGatewayV2HTTPResponse{}, err
	}
	// A fresh id: it runs once per key, and every retry is answered with this one.
	order := Order{OrderID: "ord_" + rand.Text(), Item: o.Item, Quantity: o.Quantity, ReservationID: reservation}
	resp := respond(http.StatusCreated, order)
	resp.Headers["Location"] = "/orders/" + order.OrderID
	return resp, nil
}

func respond(status int, body any) events.APIGatewayV2HTTPResponse {
	b, _ := json.Marshal(body)
	return events.APIGatewayV2HTTPResponse{StatusCode: status, Headers: map[string]string{"Content-Type": "application/json"}, Body: string(b)}
}

// reserveStock asks the inventory service to hold the order's items, and
// returns its reservation id.
func reserveStock(ctx context.Context, o NewOrder) (string, error) {
	// The scoped key: two callers who chose the same Idempotency-Key are
	// two reservations downstream too.
	key, _ := oncely.KeyFrom(ctx)
	body, _ := json.Marshal(map[string]any{"item": o.Item, "quantity": o.Quantity})
	ctx, cancel := context.WithTimeout(ctx, inventoryTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, os.Getenv("INVENTORY_API_URL")+"/reservations", bytes.NewReader(body))
	if err != nil {
		return "", oncely.Permanent(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key) // the inventory service de-duplicates too
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", oncely.TransientSent(err) // a timeout or a reset: it may have the request
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusBadGateway || resp.StatusCode == http.StatusGatewayTimeout:
		return "", oncely.TransientSent(fmt.Errorf("inventory: %s", resp.Status)) // a gateway's: it may have forwarded it
	case resp.StatusCode == http.StatusTooManyRequests:
		after, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		return "", oncely.TransientAfter(fmt.Errorf("inventory: %s", resp.Status), time.Duration(after)*time.Second)
	case resp.StatusCode >= 500:
		return "", oncely.Transient(fmt.Errorf("inventory: %s", resp.Status))
	case resp.StatusCode >= 300:
		return "", oncely.PermanentCode("STOCK_REFUSED", fmt.Errorf("inventory: %s", resp.Status)) // out of stock, an unknown item
	}
	var r struct {
		ReservationID string `json:"reservationId"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || r.ReservationID == "" {
		return "", oncely.OutcomeUnknown(fmt.Errorf("inventory: an unreadable answer to a reservation (%v)", err)) // it may hold the stock
	}
	return r.ReservationID, nil
}

// logReplay is one log line per replayed response: how often clients
// retry, with which key (the client's, and the record's: the scoped key
// ctx carries), without the body (it may hold personal data). HTTP APIs
// lower-case header names.
func logReplay(ctx context.Context, req events.APIGatewayV2HTTPRequest, resp *events.APIGatewayV2HTTPResponse) {
	key, _ := oncely.KeyFrom(ctx)
	slog.InfoContext(ctx, "replayed a stored response", "idempotencyKey", req.Headers["idempotency-key"], "key", key,
		"status", resp.StatusCode, "route", req.RouteKey, "requestId", req.RequestContext.RequestID)
}
