package ddbstore_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/apigw"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncely/oncely/internal/action"
	"github.com/oncely/oncely/internal/ddbstore"
	"github.com/oncely/oncely/internal/engineref"
	"github.com/oncely/oncely/internal/eventsapi"
	"github.com/oncely/oncely/internal/notify"
)

func TestItemSizeFollowsDynamoDBRules(t *testing.T) {
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	n := func(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }
	tests := []struct {
		name string
		item map[string]types.AttributeValue
		want int
	}{
		{"string: name and UTF-8 bytes", map[string]types.AttributeValue{"pk": s("héllo")}, 2 + 6},
		{"number: a byte per two significant digits, plus one", map[string]types.AttributeValue{"n": n("1764633600123")}, 1 + 7 + 1},
		{"number: leading and trailing zeros trimmed", map[string]types.AttributeValue{"n": n("-0012300")}, 1 + 2 + 1},
		{"number: zero", map[string]types.AttributeValue{"n": n("0")}, 1 + 1},
		{"binary: raw bytes", map[string]types.AttributeValue{"b": &types.AttributeValueMemberB{Value: make([]byte, 10)}}, 1 + 10},
		{"boolean and null: one byte", map[string]types.AttributeValue{"t": &types.AttributeValueMemberBOOL{Value: true}, "z": &types.AttributeValueMemberNULL{Value: true}}, 2 + 2},
		{"map: 3 bytes, and a byte per element", map[string]types.AttributeValue{"m": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"a": s("xy")}}}, 1 + 3 + (1 + 2 + 1)},
		{"list: 3 bytes, and a byte per element", map[string]types.AttributeValue{"l": &types.AttributeValueMemberL{Value: []types.AttributeValue{s("xy"), n("5")}}}, 1 + 3 + (2 + 1) + (2 + 1)},
	}
	for _, tt := range tests {
		if got := ddbstore.ItemSize(tt.item); got != tt.want {
			t.Errorf("%s: ItemSize = %d, want %d", tt.name, got, tt.want)
		}
	}
	for size, want := range map[int]int{0: 1, 1: 1, 1024: 1, 1025: 2, 4096: 4} {
		if got := ddbstore.WriteUnits(size); got != want {
			t.Errorf("WriteUnits(%d) = %d, want %d", size, got, want)
		}
	}
	for size, want := range map[int]int{1: 1, 4096: 1, 4097: 2} {
		if got := ddbstore.ReadUnits(size); got != want {
			t.Errorf("ReadUnits(%d) = %d, want %d", size, got, want)
		}
	}
}

// A typical event's record stays within one write unit (1 KB) at every
// write, whatever the downstream replies: its completion, and so every
// replay's reservation, which DynamoDB charges by the larger of the item
// sent and the item stored. A change that makes it cross 1 KB (a second
// encoding, escaped HTML, the reply's body kept for SQS) fails here.
func TestTypicalEventFitsOneWriteUnit(t *testing.T) {
	e := minidynEnv(t)
	// A namespace as long as a deployed function's generated name, an event id as long as a UUID.
	store, err := ddbstore.New(e.client, e.table, "oncely-prod-NotifyFunction-1A2B3C4D5E6F")
	if err != nil {
		t.Fatal(err)
	}
	const eventID = "9f1c2d3e-4b5a-4c89-abcd-ef0123456789"
	body := `{"id":"` + eventID + `","action":"notify","version":"1.4.2"}`
	replies := map[string]string{"no reply": "", "255-byte HTML reply": htmlReply(255), "4 KB reply": htmlReply(4096)}
	for name, reply := range replies {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.Contains(r.Header.Get("Idempotency-Key"), "-fail") {
				w.WriteHeader(http.StatusNotFound)
			}
			_, _ = io.WriteString(w, reply)
		}))
		n := notify.New(srv.URL, 5*time.Second, notify.Classifier{})
		for _, source := range []string{"sqs", "http"} {
			for _, outcome := range []string{"succeeded", "failed"} {
				key := "evt:" + eventID + ":notify"
				if source == "http" {
					key = apigw.ScopedKey("arn:aws:iam::123456789012:role/orders-service", eventID)
				}
				key += "-" + strconv.Itoa(len(reply))
				if outcome == "failed" {
					key += "-fail"
				}
				ev := action.Event{Key: key, Body: json.RawMessage(body), Source: source, ID: "m1"}
				out := engineOn(t, store).DoWork(context.Background(), request(t, key, body), action.Work(n.Do, ev))
				if !out.Stored {
					t.Fatalf("%s, %s, %s: %+v; want a stored outcome", name, source, outcome, out)
				}
				got, err := e.client.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: &e.table,
					Key: map[string]types.AttributeValue{ddbstore.AttrPK: &types.AttributeValueMemberS{Value: "oncely-prod-NotifyFunction-1A2B3C4D5E6F#" + key}}})
				if err != nil {
					t.Fatal(err)
				}
				size := ddbstore.ItemSize(got.Item)
				t.Logf("%s, %s, %s: %d bytes", name, source, outcome, size)
				if size > ddbstore.WriteUnitBytes {
					t.Errorf("%s, %s, %s: the record is %d bytes; want at most %d (one write unit)", name, source, outcome, size, ddbstore.WriteUnitBytes)
				}
			}
		}
		srv.Close()
	}
}

// A record written before this version (every result HTML-escaped and
// encoded twice) replays byte for byte: the item below is what the
// function wrote for a notify event over the API before the deploy.
func TestRecordWrittenBeforeTheDeployReplaysByteForByte(t *testing.T) {
	e := minidynEnv(t)
	req := events.APIGatewayV2HTTPRequest{
		Version: "2.0", RouteKey: "POST /events", RawPath: "/events",
		Headers: map[string]string{"content-type": "application/json", "idempotency-key": "order-7f3a9c21"},
		Body:    `{"id":"release-42","action":"notify"}`,
		RequestContext: events.APIGatewayV2HTTPRequestContext{Stage: "$default", RouteKey: "POST /events", RequestID: "r2",
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "POST", Path: "/events"}},
	}
	scope, _ := apigw.Scope(req, "")
	key := apigw.ScopedKey(scope, "order-7f3a9c21")
	r := request(t, key, req.Body)
	now := time.Now()
	stored := `{"status":200,"body":"{\"delivered\":true,\"downstream_status\":202,\"reply\":\"\\u003chtml\\u003e\\u0026amp;\\u003c/html\\u003e\"}"}`
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	n := func(v int64) types.AttributeValue {
		return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
	}
	_, err := e.client.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: &e.table, Item: map[string]types.AttributeValue{
		"pk": s("test-fn#" + key), "status": s("SUCCEEDED"), "fingerprint": s(r.Fingerprint), "attempts": n(1),
		"token": s("0123456789abcdef0123456789abcdef"), "lease_until": n(now.Add(-time.Hour).UnixMilli()),
		"expires_at": n(now.Add(24 * time.Hour).Unix()), "created_at": n(now.Add(-time.Hour).UnixMilli()),
		"updated_at": n(now.Add(-time.Hour).UnixMilli()), "result": s(stored), "result_encoding": s("none"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	h, err := eventsapi.New(eventsapi.Options{Engine: engineref.Wrap(engineOn(t, e.store)).(*oncely.Engine), Logger: slog.New(slog.DiscardHandler),
		Action: func(context.Context, action.Event) (action.Result, error) { ran = true; return action.Result{}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	resp, _ := h.Handle(context.Background(), req)
	want := `{"delivered":true,"downstream_status":202,"reply":"\u003chtml\u003e\u0026amp;\u003c/html\u003e"}`
	if ran || resp.StatusCode != 200 || resp.Body != want || resp.Headers["Idempotent-Replayed"] != "true" || resp.Headers["Content-Type"] != "application/json" {
		t.Errorf("replay: ran %v, %d %v %s\nwant the stored reply byte for byte: 200 %s", ran, resp.StatusCode, resp.Headers, resp.Body, want)
	}
}

// htmlReply is a page of n bytes (n >= 200) as dense in tags, quotes and
// entities as a web server's stock reply: the worst case for JSON with
// HTML escaping.
func htmlReply(n int) string {
	head := "<!DOCTYPE html>\n<html lang=\"en\">\n<head><meta charset=\"utf-8\"><title>Accepted</title></head>\n" +
		"<body>\n<div class=\"msg\"><p>Event <b>accepted</b> &amp; queued.</p></div>\n"
	tail := "</body>\n</html>\n"
	pad := n - len(head) - len(tail)
	return head + strings.Repeat("<p><i>ok</i></p>", pad/16) + strings.Repeat("x", pad%16) + tail
}
