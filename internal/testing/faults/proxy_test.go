package faults_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncely/oncely/internal/testing/ddblocal"
	"github.com/oncely/oncely/internal/testing/faults"
)

// backend is a real server that counts the requests it got.
func backend(t *testing.T) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var got atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Add(1)
		w.Header().Set("X-Backend", "yes")
		_, _ = io.WriteString(w, "hello from the backend")
	}))
	t.Cleanup(srv.Close)
	return srv, &got
}

func startProxy(t *testing.T, p *faults.Proxy) string {
	t.Helper()
	url, err := p.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return url
}

func TestProxyDoesWhatEachKindSays(t *testing.T) {
	for _, c := range []struct {
		kind          faults.Kind
		delay         time.Duration
		forwarded     bool
		clientErr     bool
		status        int
		fromTheServer bool
	}{
		{kind: faults.None, forwarded: true, status: 200, fromTheServer: true},
		{kind: faults.None, delay: 30 * time.Millisecond, forwarded: true, status: 200, fromTheServer: true},
		{kind: faults.Throttle, status: 400},
		{kind: faults.ServerError, status: 500},
		{kind: faults.Unavailable, status: 503},
		{kind: faults.Reset, clientErr: true},
		{kind: faults.Refuse, clientErr: true},
		{kind: faults.DropReply, forwarded: true, clientErr: true},
	} {
		t.Run(string(c.kind)+"/"+c.delay.String(), func(t *testing.T) {
			srv, got := backend(t)
			p := &faults.Proxy{
				Target:   srv.URL,
				Describe: func(r *http.Request, body []byte) (string, string) { return r.Header.Get("X-Op"), string(body) },
				Decide:   func(op, subject string) faults.Decision { return faults.Decision{Kind: c.kind, Delay: c.delay} },
				Replies:  ddblocal.Replies,
			}
			url := startProxy(t, p)
			req, _ := http.NewRequest(http.MethodPost, url+"/x", strings.NewReader("the-key"))
			req.Header.Set("X-Op", "PutItem")
			resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
			if c.clientErr {
				if err == nil {
					resp.Body.Close()
					t.Fatalf("the client got %d; want a connection error", resp.StatusCode)
				}
			} else {
				if err != nil {
					t.Fatalf("the client got %v; want a reply", err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != c.status || (resp.Header.Get("X-Backend") == "yes") != c.fromTheServer {
					t.Errorf("reply %d %q; want %d from the server: %t", resp.StatusCode, body, c.status, c.fromTheServer)
				}
			}
			if n := got.Load(); (n == 1) != c.forwarded || n > 1 {
				t.Errorf("the server got %d requests; want forwarded: %t", n, c.forwarded)
			}
			events := p.Events()
			logged := c.kind != faults.None || c.delay > 0
			if (len(events) == 1) != logged {
				t.Fatalf("events %v; want one logged: %t", events, logged)
			}
			if logged {
				e := events[0]
				if e.Op != "PutItem" || e.Subject != "the-key" || e.Kind != c.kind || e.Delay != c.delay || e.Forwarded != c.forwarded {
					t.Errorf("event %+v; want PutItem the-key %s delay %v forwarded %t", e, c.kind, c.delay, c.forwarded)
				}
			}
			if counts, total := p.Counts(); total != 1 || counts[c.kind] != 1 {
				t.Errorf("counts %v of %d; want one %q", counts, total, c.kind)
			}
		})
	}
}

// A reply dropped after the write: the write landed in the real server,
// and the client could not know.
func TestProxyDropReplyOnDynamoDBLeavesTheWriteDone(t *testing.T) {
	moto := ddblocal.MotoEndpoint(t)
	setup, _ := ddblocal.Client(ddblocal.Config(moto, nil))
	table := ddblocal.NewTable(t, setup)
	var drop atomic.Bool
	p := &faults.Proxy{Target: moto, Describe: ddblocal.Describe, Replies: ddblocal.Replies, Decide: func(op, key string) faults.Decision {
		if op == "PutItem" && key == "ns#k1" && drop.CompareAndSwap(false, true) {
			return faults.Decision{Kind: faults.DropReply}
		}
		return faults.Decision{}
	}}
	url := startProxy(t, p)
	cfg := ddblocal.Config(url, nil)
	cfg.RetryMaxAttempts = 1 // see the client's view of the one request
	client := dynamodb.NewFromConfig(cfg)
	_, err := client.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: &table,
		Item: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "ns#k1"}}})
	if err == nil {
		t.Fatal("PutItem succeeded; want the dropped reply to be an error")
	}
	out, err := setup.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: &table, ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "ns#k1"}}})
	if err != nil || out.Item == nil {
		t.Fatalf("item %v (%v); want the write done", out, err)
	}
	ev := p.Events()
	if len(ev) != 1 || ev[0].Op != "PutItem" || ev[0].Subject != "ns#k1" || ev[0].Status != 200 {
		t.Errorf("events %v; want one drop_reply of PutItem ns#k1 that the server answered 200", ev)
	}
}
