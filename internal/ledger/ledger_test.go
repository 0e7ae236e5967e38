package ledger_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncely/oncely/dynamostore"
	"github.com/oncely/oncely/internal/action"
	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/ledger"
	"github.com/oncely/oncely/internal/testing/ddblocal"
)

// Through the engine and the public DynamoDB store (minidyn): the entry is written
// once per event, with the record, and a second delivery replays.
func TestOneEntryPerEvent(t *testing.T) {
	_, ep := ddblocal.Minidyn(t)
	client, _ := ddblocal.Client(ddblocal.Config(ep, nil))
	records, entries := ddblocal.NewTable(t, client), ddblocal.NewTable(t, client)
	store, err := dynamostore.New(client, records, dynamostore.Options{Namespace: "ledger-fn"})
	if err != nil {
		t.Fatal(err)
	}
	engine, err := idem.New(idem.Options{Store: store, Lease: time.Minute, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	l := &ledger.Ledger{Table: entries}
	body := `{"id":"pay-7","action":"ledger","amount":"12.50"}`
	ev := action.Event{Key: "evt:pay-7:ledger", Body: []byte(body), Source: "sqs"}
	req, _ := idem.NewRequest(ev.Key, ev.Body)
	for i := range 2 {
		out := engine.DoWork(context.Background(), req, action.Work(l.Do, ev))
		if out.Err != nil || !out.Stored || out.Replayed != (i == 1) {
			t.Fatalf("delivery %d: %+v", i+1, out)
		}
	}
	out, err := client.Scan(context.Background(), &dynamodb.ScanInput{TableName: &entries})
	if err != nil || len(out.Items) != 1 {
		t.Fatalf("entries %d (%v); want 1", len(out.Items), err)
	}
	if e := out.Items[0]; e["pk"].(*types.AttributeValueMemberS).Value != ev.Key || e["event"].(*types.AttributeValueMemberS).Value != body {
		t.Errorf("entry %v; want the event under its key", e)
	}
	// Even a writer that bypasses the engine cannot enter the event twice.
	again, _ := l.Do(context.Background(), ev)
	put := again.Effects.(dynamostore.Effects)[0].Put
	_, err = client.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: put.TableName, Item: put.Item,
		ConditionExpression: put.ConditionExpression, ExpressionAttributeNames: put.ExpressionAttributeNames})
	if _, ok := errors.AsType[*types.ConditionalCheckFailedException](err); !ok {
		t.Errorf("a second put of the entry = %v; want ConditionalCheckFailed", err)
	}
}

func TestTooLargeEventIsPermanent(t *testing.T) {
	l := &ledger.Ledger{Table: "entries"}
	_, err := l.Do(context.Background(), action.Event{Key: "evt:big-1:ledger", Body: []byte(`"` + strings.Repeat("x", 400_000) + `"`)})
	if idem.Classify(err) != idem.ClassPermanent || !strings.Contains(err.Error(), "400002 bytes") {
		t.Errorf("got %v; want a permanent error naming the size", err)
	}
}

func TestEntryShape(t *testing.T) {
	at := time.UnixMilli(1796083200123)
	l := &ledger.Ledger{Table: "entries", Now: func() time.Time { return at }}
	res, err := l.Do(context.Background(), action.Event{Key: "evt:pay-8:ledger", Body: []byte(`{"id":"pay-8"}`), Source: "http"})
	if err != nil {
		t.Fatal(err)
	}
	eff := res.Effects.(dynamostore.Effects)
	if len(eff) != 1 || eff[0].Put == nil || aws.ToString(eff[0].Put.ConditionExpression) != "attribute_not_exists(#entry)" {
		t.Fatalf("effects %+v; want one conditional put", eff)
	}
	item := eff[0].Put.Item
	if item["recorded_at"].(*types.AttributeValueMemberN).Value != "1796083200123" || item["source"].(*types.AttributeValueMemberS).Value != "http" {
		t.Errorf("entry %v", item)
	}
	if res.Status != 201 || string(res.Body) != `{"ledger_entry":"evt:pay-8:ledger","table":"entries"}` {
		t.Errorf("result %d %s", res.Status, res.Body)
	}
}
