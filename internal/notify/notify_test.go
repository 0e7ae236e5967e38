package notify_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/oncely/oncely/internal/action"
	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/notify"
	"github.com/oncely/oncely/internal/testing/fakewebhook"
)

var ev = action.Event{Key: "evt:release-42:notify", Body: json.RawMessage(`{"id":"release-42","action":"notify"}`), Source: "sqs", ID: "m1"}

func TestRepliesAreClassified(t *testing.T) {
	tests := []struct {
		reply fakewebhook.Reply
		class idem.Class
		after time.Duration
	}{
		{fakewebhook.Reply{Status: 429, RetryAfter: "7"}, idem.ClassTransient, 7 * time.Second},
		{fakewebhook.Reply{Status: 502}, idem.ClassTransient, 0},
		{fakewebhook.Reply{Status: 503}, idem.ClassTransient, 0},
		{fakewebhook.Reply{Status: 504}, idem.ClassTransient, 0},
		{fakewebhook.Reply{Status: 400}, idem.ClassPermanent, 0},
		{fakewebhook.Reply{Status: 401}, idem.ClassPermanent, 0},
		{fakewebhook.Reply{Status: 403}, idem.ClassPermanent, 0},
		{fakewebhook.Reply{Status: 404}, idem.ClassPermanent, 0},
		{fakewebhook.Reply{Status: 409}, idem.ClassPermanent, 0},
		{fakewebhook.Reply{Status: 422}, idem.ClassPermanent, 0},
		{fakewebhook.Reply{Status: 418}, idem.ClassPermanent, 0},
		{fakewebhook.Reply{Status: 500}, idem.ClassPermanent, 0},
		{fakewebhook.Reply{Hang: true}, idem.ClassTransient, 0}, // the per-request timeout
	}
	for _, tt := range tests {
		t.Run(http.StatusText(tt.reply.Status), func(t *testing.T) {
			down := fakewebhook.New()
			srv := httptest.NewServer(down)
			defer srv.Close()
			defer down.Close()
			down.Script(ev.Key, tt.reply)
			// A reply must arrive within the timeout even on a loaded
			// machine (100 ms did not: a 400 timed out and was transient);
			// only the hanging downstream is meant to run into it.
			timeout := 30 * time.Second
			if tt.reply.Hang {
				timeout = 100 * time.Millisecond
			}
			n := notify.New(srv.URL, timeout, notify.Classifier{})
			_, err := n.Do(context.Background(), ev)
			if got := idem.Classify(err); got != tt.class {
				t.Errorf("class %v (%v); want %v", got, err, tt.class)
			}
			var ce *idem.ClassifiedError
			if errors.As(err, &ce) && ce.RetryAfter != tt.after {
				t.Errorf("Retry-After %v; want %v", ce.RetryAfter, tt.after)
			}
		})
	}
}

func TestConfiguredTransientStatuses(t *testing.T) {
	down := fakewebhook.New()
	srv := httptest.NewServer(down)
	defer srv.Close()
	down.Script(ev.Key, fakewebhook.Reply{Status: 500})
	n := notify.New(srv.URL, time.Second, notify.Classifier{Transient: map[int]bool{500: true}})
	if _, err := n.Do(context.Background(), ev); idem.Classify(err) != idem.ClassTransient {
		t.Errorf("500 with 500 configured transient: %v", err)
	}
}

func TestSuccessSendsKeyAndStoresSummary(t *testing.T) {
	var got http.Header
	var body []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		body = make([]byte, r.ContentLength)
		_, _ = r.Body.Read(body)
		w.WriteHeader(201)
		_, _ = w.Write([]byte(`{"ticket":"T-1"}`))
	}))
	defer srv.Close()
	res, err := notify.New(srv.URL, time.Second, notify.Classifier{}).Do(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	if got.Get("Idempotency-Key") != ev.Key || got.Get("Content-Type") != "application/json" || string(body) != string(ev.Body) {
		t.Errorf("request headers %v body %s; want the key, JSON and the event", got, body)
	}
	if res.Status != 200 || string(res.Body) != `{"delivered":true,"downstream_status":201,"reply":"{\"ticket\":\"T-1\"}"}` {
		t.Errorf("result %d %s", res.Status, res.Body)
	}
}

func TestConnectionRefusedAndResetAreTransient(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0) // close with RST
			}
			c.Close()
		}
	}()
	if _, err := notify.New("http://"+addr, time.Second, notify.Classifier{}).Do(context.Background(), ev); idem.Classify(err) != idem.ClassTransient {
		t.Errorf("reset: %v (class %v); want transient", err, idem.Classify(err))
	}
	l.Close()
	if _, err := notify.New("http://"+addr, time.Second, notify.Classifier{}).Do(context.Background(), ev); idem.Classify(err) != idem.ClassTransient {
		t.Errorf("refused: %v (class %v); want transient", err, idem.Classify(err))
	}
}

func TestBadURLIsPermanent(t *testing.T) {
	if _, err := notify.New("http://bad host/", time.Second, notify.Classifier{}).Do(context.Background(), ev); idem.Classify(err) != idem.ClassPermanent {
		t.Errorf("got %v; want permanent", err)
	}
}

func TestRedirectIsNotADelivery(t *testing.T) {
	target := fakewebhook.New()
	final := httptest.NewServer(target)
	defer final.Close()
	redirect := httptest.NewServer(http.RedirectHandler(final.URL, http.StatusFound))
	defer redirect.Close()
	_, err := notify.New(redirect.URL, time.Second, notify.Classifier{}).Do(context.Background(), ev)
	if err == nil || target.Total() != 0 {
		t.Fatalf("got %v, %d deliveries at the redirect target; want an error and no GET passed off as a delivery", err, target.Total())
	}
}
