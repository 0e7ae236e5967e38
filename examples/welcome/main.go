// Command welcome is the function a team writes most often besides a queue
// consumer: a plain function (an EventBridge event, or a direct invoke)
// whose logic has a side effect, here a welcome email through a mail API,
// made idempotent with oncely and its DynamoDB store. EventBridge delivers
// at least once and retries a failed invoke: each signup is mailed once.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/dynamostore"
)

func main() {
	cfg, err := config.LoadDefaultConfig(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	store, err := dynamostore.New(dynamodb.NewFromConfig(cfg), os.Getenv("TABLE_NAME"), dynamostore.Options{Namespace: "welcome"})
	if err != nil {
		log.Fatal(err)
	}
	engine, err := oncely.New(store, oncely.Options{SentPause: mailTimeout})
	if err != nil {
		log.Fatal(err)
	}
	lambda.Start(oncely.Wrap(engine, signupKey, sendWelcome, oncely.PayloadOf(signupOf)))
}

// The business logic and its event: everything below is the team's own.

// Signup is the detail of a "user.signed_up" event.
type Signup struct {
	UserID string `json:"userId"`
	Email  string `json:"email"`
}

// Receipt is what the mail API answered: stored, and returned again to a
// duplicate.
type Receipt struct {
	MessageID string `json:"messageId"`
}

const mailTimeout = 5 * time.Second

// signupKey names the business event: one welcome mail per user, however
// many times EventBridge delivers the event or retries the invoke.
func signupKey(e events.EventBridgeEvent) (string, error) {
	s := signupOf(e).(Signup)
	if s.UserID == "" {
		return "", fmt.Errorf("the event has no userId")
	}
	return oncely.HashKey("welcome", s.UserID), nil
}

// signupOf is what identifies the event's content: the signup, not the
// envelope (whose id and time differ between a retry and the original).
func signupOf(e events.EventBridgeEvent) any {
	var s Signup
	_ = json.Unmarshal(e.Detail, &s)
	return s
}

func sendWelcome(ctx context.Context, e events.EventBridgeEvent) (Receipt, error) {
	s := signupOf(e).(Signup)
	key, _ := oncely.KeyFrom(ctx)
	body, _ := json.Marshal(map[string]string{"to": s.Email, "template": "welcome"})
	ctx, cancel := context.WithTimeout(ctx, mailTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, os.Getenv("MAIL_API_URL"), bytes.NewReader(body))
	if err != nil {
		return Receipt{}, oncely.Permanent(err)
	}
	req.Header.Set("Idempotency-Key", key) // the mail API de-duplicates too
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Receipt{}, oncely.TransientSent(err) // it may have the request
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusBadGateway || resp.StatusCode == http.StatusGatewayTimeout:
		return Receipt{}, oncely.TransientSent(fmt.Errorf("mail API: %s", resp.Status)) // a gateway's: it may have forwarded it
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return Receipt{}, oncely.Transient(fmt.Errorf("mail API: %s", resp.Status))
	case resp.StatusCode >= 300:
		return Receipt{}, oncely.PermanentCode("MAIL_REFUSED", fmt.Errorf("mail API: %s", resp.Status))
	}
	var r Receipt
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return Receipt{}, oncely.OutcomeUnknown(err) // sent, and the answer unreadable
	}
	return r, nil
}
