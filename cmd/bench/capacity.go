package main

// Section 0: what DynamoDB would charge per outcome. Local servers report
// no consumed capacity (moto answers a constant), so every store call is
// watched: the item it sent, the item stored before and after it (read
// aside, uncounted), the item a failed condition returned, and the triage
// index's entries; the units follow DynamoDB's published rounding
// (ddbstore.ItemSize, WriteUnits, ReadUnits).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/internal/ddbstore"
	"github.com/oncely/oncely/internal/engineref"
	"github.com/oncely/oncely/internal/eventsapi"
	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/notify"
	"github.com/oncely/oncely/internal/queue"
	"github.com/oncely/oncely/internal/testing/ddblocal"
	"github.com/oncely/oncely/keyexpr"
	"github.com/oncely/oncely/sqsbatch"
)

// capCall is one store call and what DynamoDB would charge for it.
type capCall struct {
	op              string // PutItem, UpdateItem, GetItem
	conditionFailed bool
	sent            int // PutItem: the item sent
	before, after   int // the stored item before and after (0: none)
	returned        int // the item a failed condition returned (ALL_OLD), free
	read            int // GetItem: the item read
	wcu, indexWCU   int
	rcu             int
	indexWrites     int
}

// capClient is a ddbstore.Client that records capCalls.
type capClient struct {
	client *dynamodb.Client
	table  string
	mu     sync.Mutex
	calls  []capCall
}

func (c *capClient) reset() []capCall {
	c.mu.Lock()
	defer c.mu.Unlock()
	calls := c.calls
	c.calls = nil
	return calls
}

func (c *capClient) add(call capCall) {
	c.mu.Lock()
	c.calls = append(c.calls, call)
	c.mu.Unlock()
}

// stored reads an item aside (not a measured call).
func (c *capClient) stored(ctx context.Context, key map[string]types.AttributeValue) map[string]types.AttributeValue {
	out, err := c.client.GetItem(ctx, &dynamodb.GetItemInput{TableName: &c.table, Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		fail(fmt.Errorf("capacity: reading an item aside: %w", err))
	}
	return out.Item
}

func pkOf(item map[string]types.AttributeValue) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{ddbstore.AttrPK: item[ddbstore.AttrPK]}
}

// write charges a write by the larger of the item before and after it, and
// the triage index by its entries' transition (GSI writes: a new entry is
// one put, a removed one a delete, a changed key a delete and a put, a
// changed entry under the same key one write).
func (c *capClient) write(call capCall, before, after map[string]types.AttributeValue) {
	call.before, call.after = size(before), size(after)
	call.wcu = ddbstore.WriteUnits(max(call.sent, call.before, call.after))
	if call.conditionFailed {
		c.add(call)
		return
	}
	tb, ta := triageKey(before), triageKey(after)
	switch {
	case tb == "" && ta != "":
		call.indexWrites, call.indexWCU = 1, ddbstore.WriteUnits(call.after)
	case tb != "" && ta == "":
		call.indexWrites, call.indexWCU = 1, ddbstore.WriteUnits(call.before)
	case tb != "" && tb != ta:
		call.indexWrites, call.indexWCU = 2, ddbstore.WriteUnits(call.before)+ddbstore.WriteUnits(call.after)
	case tb != "":
		call.indexWrites, call.indexWCU = 1, ddbstore.WriteUnits(max(call.before, call.after))
	}
	c.add(call)
}

func size(item map[string]types.AttributeValue) int {
	if len(item) == 0 {
		return 0
	}
	return ddbstore.ItemSize(item)
}

// triageKey is the item's key in the triage index (which projects every
// attribute), empty when the item is not in it (the index is sparse).
func triageKey(item map[string]types.AttributeValue) string {
	pk, ok1 := item[ddbstore.AttrTriage].(*types.AttributeValueMemberS)
	sk, ok2 := item[ddbstore.AttrTriageSK].(*types.AttributeValueMemberS)
	if !ok1 || !ok2 {
		return ""
	}
	return pk.Value + "\x00" + sk.Value
}

func (c *capClient) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	before := c.stored(ctx, pkOf(in.Item))
	out, err := c.client.PutItem(ctx, in, opts...)
	call := capCall{op: "PutItem", sent: ddbstore.ItemSize(in.Item)}
	if ccf, ok := errors.AsType[*types.ConditionalCheckFailedException](err); ok {
		call.conditionFailed, call.returned = true, size(ccf.Item)
		c.write(call, before, before)
		return out, err
	}
	if err != nil {
		return out, err
	}
	c.write(call, before, c.stored(ctx, pkOf(in.Item)))
	return out, err
}

func (c *capClient) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	before := c.stored(ctx, in.Key)
	out, err := c.client.UpdateItem(ctx, in, opts...)
	call := capCall{op: "UpdateItem"}
	if _, ok := errors.AsType[*types.ConditionalCheckFailedException](err); ok {
		call.conditionFailed = true
		c.write(call, before, before)
		return out, err
	}
	if err != nil {
		return out, err
	}
	c.write(call, before, c.stored(ctx, in.Key))
	return out, err
}

func (c *capClient) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	out, err := c.client.GetItem(ctx, in, opts...)
	if err == nil {
		// A strongly consistent read; an absent item is charged the minimum.
		c.add(capCall{op: "GetItem", read: size(out.Item), rcu: ddbstore.ReadUnits(size(out.Item))})
	}
	return out, err
}

// replyServer answers every delivery with the status and body set last.
type replyServer struct {
	mu     sync.Mutex
	status int
	body   string
}

func (s *replyServer) set(status int, body string) {
	s.mu.Lock()
	s.status, s.body = status, body
	s.mu.Unlock()
}

func (s *replyServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	s.mu.Lock()
	status, body := s.status, s.body
	s.mu.Unlock()
	w.Header().Set("Content-Type", "text/html")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

// htmlReply is a page of n bytes as dense in tags, quotes and entities as
// a web server's stock reply (the worst case for JSON with HTML escaping).
func htmlReply(n int) string {
	if n == 0 {
		return ""
	}
	head := "<!DOCTYPE html>\n<html lang=\"en\">\n<head><meta charset=\"utf-8\"><title>Accepted</title></head>\n" +
		"<body>\n<div class=\"msg\"><p>Event <b>accepted</b> &amp; queued.</p></div>\n"
	tail := "</body>\n</html>\n"
	pad := n - len(head) - len(tail)
	return head + strings.Repeat("<p><i>ok</i></p>", pad/16) + strings.Repeat("x", pad%16) + tail
}

// capRow is one line of the capacity table.
type capRow struct {
	outcome, reply string
	calls          []capCall
}

// capacityNamespace is as long as a deployed function's generated name,
// capacityEventID as long as a UUID: the typical event's item size.
const (
	capacityNamespace = "oncely-prod-NotifyFunction-1A2B3C4D5E6F"
	capacityEventID   = "9f1c2d3e-4b5a-4c89-abcd-ef0123456789"
)

func capacityRows(ctx context.Context, moto string) ([]capRow, error) {
	client, _ := ddblocal.Client(ddblocal.Config(moto, nil))
	table := fmt.Sprintf("bench-capacity-%d", time.Now().UnixNano())
	if _, err := ddbstore.CreateTable(ctx, client, table); err != nil && !errors.Is(err, ddbstore.ErrNoTTL) {
		return nil, err
	}
	cc := &capClient{client: client, table: table}
	store, err := ddbstore.New(cc, table, capacityNamespace)
	if err != nil {
		return nil, err
	}
	aside, err := ddbstore.New(client, table, capacityNamespace) // set-up writes, not measured
	if err != nil {
		return nil, err
	}
	logger := slog.New(slog.DiscardHandler)
	engine, err := idem.New(idem.Options{Store: store, Lease: time.Minute, Logger: logger,
		Retry: idem.RetryPolicy{AttemptsPerDelivery: 3, Base: time.Millisecond, Max: 5 * time.Millisecond}})
	if err != nil {
		return nil, err
	}
	down := &replyServer{status: 200}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: down, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()
	n := notify.New("http://"+l.Addr().String()+"/webhook", 5*time.Second, notify.Classifier{})
	keys, err := keyexpr.New("", "")
	if err != nil {
		return nil, err
	}
	sqs, err := queue.New(engineref.Wrap(engine).(*oncely.Engine), keys, n.Do, sqsbatch.Options{Poison: store}, queue.Proof{})
	if err != nil {
		return nil, err
	}
	api, err := eventsapi.New(eventsapi.Options{Engine: engineref.Wrap(engine).(*oncely.Engine), Action: n.Do, Logger: logger})
	if err != nil {
		return nil, err
	}

	seq := 0
	newEvent := func() (id, body string) {
		seq++
		id = fmt.Sprintf("%s-%03d", capacityEventID[:32], seq) // as long as the UUID
		return id, `{"id":"` + id + `","action":"notify","version":"1.4.2"}`
	}
	deliver := func(bodies ...string) error {
		var b events.SQSEvent
		for i, body := range bodies {
			b.Records = append(b.Records, events.SQSMessage{MessageId: fmt.Sprintf("c7a1e0f4-9b2d-4e5f-8a6b-%012d", seq*10+i), Body: body,
				EventSource: "aws:sqs", EventSourceARN: "arn:aws:sqs:us-east-1:123456789012:oncely-events"})
		}
		_, _, err := sqs.Handle(ctx, b)
		return err
	}
	var rows []capRow
	measure := func(outcome, reply string, fn func() error) error {
		cc.reset()
		if err := fn(); err != nil {
			return fmt.Errorf("capacity, %s: %w", outcome, err)
		}
		rows = append(rows, capRow{outcome: outcome, reply: reply, calls: cc.reset()})
		return nil
	}
	inProgress := func(id, body string, leaseUntil time.Time) error {
		key := "evt:" + id + ":notify"
		req, err := idem.NewRequest(key, []byte(body))
		if err != nil {
			return err
		}
		now := time.Now()
		_, ok, err := aside.Reserve(ctx, idem.Reservation{Key: key, Fingerprint: req.Fingerprint, Token: "0123456789abcdef0123456789abcdef",
			Now: now, LeaseUntil: leaseUntil, ExpiresAt: now.Add(24 * time.Hour)})
		if err == nil && !ok {
			err = errors.New("the set-up reservation was refused")
		}
		return err
	}

	for _, rs := range []struct {
		label string
		size  int
	}{{"0 B", 0}, {"256 B", 256}, {"4 KB", 4096}} {
		down.set(200, htmlReply(rs.size))
		_, body := newEvent()
		if err := measure("fresh (SQS)", rs.label, func() error { return deliver(body) }); err != nil {
			return nil, err
		}
		if err := measure("replay (SQS)", rs.label, func() error { return deliver(body) }); err != nil {
			return nil, err
		}
		_, dup := newEvent()
		if err := measure("in-batch duplicate (SQS, 2 copies)", rs.label, func() error { return deliver(dup, dup) }); err != nil {
			return nil, err
		}
		id, late := newEvent()
		if err := inProgress(id, late, time.Now().Add(-time.Second)); err != nil {
			return nil, err
		}
		if err := measure("take-over after a lease ended (SQS)", rs.label, func() error { return deliver(late) }); err != nil {
			return nil, err
		}
		clientKey := fmt.Sprintf("%s-%03d", capacityEventID[:32], seq)
		req := events.APIGatewayV2HTTPRequest{
			Version: "2.0", RouteKey: "POST /events", RawPath: "/events",
			Headers: map[string]string{"content-type": "application/json", "idempotency-key": clientKey},
			Body:    body,
			RequestContext: events.APIGatewayV2HTTPRequestContext{Stage: "$default", RouteKey: "POST /events", RequestID: "r1",
				HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "POST", Path: "/events"}},
		}
		call := func() error {
			if resp, _ := api.Handle(ctx, req); resp.StatusCode != 200 {
				return fmt.Errorf("the API answered %d %s", resp.StatusCode, resp.Body)
			}
			return nil
		}
		if err := measure("fresh (API)", rs.label, call); err != nil {
			return nil, err
		}
		if err := measure("replay (API)", rs.label, call); err != nil {
			return nil, err
		}
	}
	down.set(200, htmlReply(256))
	id, busy := newEvent()
	if err := inProgress(id, busy, time.Now().Add(time.Minute)); err != nil {
		return nil, err
	}
	if err := measure("in-flight duplicate (SQS)", "—", func() error { return deliver(busy) }); err != nil {
		return nil, err
	}
	down.set(404, htmlReply(256))
	_, perm := newEvent()
	if err := measure("permanent failure (SQS, 404)", "—", func() error { return deliver(perm) }); err != nil {
		return nil, err
	}
	down.set(503, htmlReply(256))
	_, trans := newEvent()
	if err := measure("transient release (SQS, 503 three times)", "—", func() error { return deliver(trans) }); err != nil {
		return nil, err
	}
	down.set(200, htmlReply(256))
	if err := measure("take-over of a released key (SQS)", "256 B", func() error { return deliver(trans) }); err != nil {
		return nil, err
	}
	_, reuse := newEvent()
	if err := deliver(reuse); err != nil {
		return nil, err
	}
	if err := measure("key reused with another payload (SQS: poison note)", "—", func() error {
		return deliver(strings.Replace(reuse, `"1.4.2"`, `"1.4.3"`, 1))
	}); err != nil {
		return nil, err
	}
	return rows, nil
}

// capacityTable renders the rows as a Markdown table.
func capacityTable(rows []capRow) string {
	var b strings.Builder
	b.WriteString("| outcome | reply | store calls | items written (bytes) | items read (bytes) | write units | index write units | read units |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		var writes, reads []string
		wcu, iwcu, rcu := 0, 0, 0
		for _, c := range r.calls {
			wcu, iwcu, rcu = wcu+c.wcu, iwcu+c.indexWCU, rcu+c.rcu
			op := strings.TrimSuffix(c.op, "Item")
			switch {
			case c.op == "GetItem":
				reads = append(reads, fmt.Sprintf("Get %d", c.read))
			case c.conditionFailed && c.op == "PutItem":
				writes = append(writes, fmt.Sprintf("%s %d, condition failed on %d", op, c.sent, c.before))
				if c.returned > 0 {
					reads = append(reads, fmt.Sprintf("%d (returned by the failed condition, free)", c.returned))
				}
			case c.conditionFailed:
				writes = append(writes, fmt.Sprintf("%s, condition failed on %d", op, c.before))
			default:
				w := fmt.Sprintf("%s %d → %d", op, c.before, c.after)
				if c.indexWrites > 0 {
					w += fmt.Sprintf(" (+%d index)", c.indexWrites)
				}
				writes = append(writes, w)
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %s | %d | %d | %d |\n", r.outcome, r.reply, len(r.calls),
			orDash(strings.Join(writes, "; ")), orDash(strings.Join(reads, "; ")), wcu, iwcu, rcu)
	}
	return b.String()
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}
