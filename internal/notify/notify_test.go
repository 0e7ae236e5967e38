package notify_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/oncely/oncely/internal/action"
	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/notify"
	"github.com/oncely/oncely/internal/testing/fakewebhook"
)

var ev = action.Event{Key: "evt:release-42:notify", Body: json.RawMessage(`{"id":"release-42","action":"notify"}`), Source: action.SourceSQS, ID: "m1"}

func TestRepliesAreClassified(t *testing.T) {
	tests := []struct {
		reply fakewebhook.Reply
		class idem.Class
		after time.Duration
		sent  bool // the receiver may have it: no further POST in this delivery
	}{
		{fakewebhook.Reply{Status: 429, RetryAfter: "7"}, idem.ClassTransient, 7 * time.Second, false},
		{fakewebhook.Reply{Status: 502}, idem.ClassTransient, 0, true},
		{fakewebhook.Reply{Status: 503}, idem.ClassTransient, 0, false},
		{fakewebhook.Reply{Status: 504}, idem.ClassTransient, 0, true},
		{fakewebhook.Reply{Status: 400}, idem.ClassPermanent, 0, false},
		{fakewebhook.Reply{Status: 401}, idem.ClassPermanent, 0, false},
		{fakewebhook.Reply{Status: 403}, idem.ClassPermanent, 0, false},
		{fakewebhook.Reply{Status: 404}, idem.ClassPermanent, 0, false},
		{fakewebhook.Reply{Status: 409}, idem.ClassPermanent, 0, false},
		{fakewebhook.Reply{Status: 422}, idem.ClassPermanent, 0, false},
		{fakewebhook.Reply{Status: 418}, idem.ClassPermanent, 0, false},
		{fakewebhook.Reply{Status: 500}, idem.ClassPermanent, 0, false},
		{fakewebhook.Reply{Hang: true}, idem.ClassTransient, 0, true}, // the per-request timeout, once written
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
			if got := idem.IsSent(err); got != tt.sent {
				t.Errorf("sent %v (%v); want %v", got, err, tt.sent)
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
	// An SQS event's record keeps the reply's size, digest and start, not its body.
	want := `{"delivered":true,"downstream_status":201,"reply_bytes":16,"reply_sha256":"e885f615ad80117f9518c80aade42b4b9ba0c123cae390e47e608becd5a66460","reply_prefix":"{\"ticket\":\"T-1\"}"}`
	if res.Status != 200 || string(res.Body) != want {
		t.Errorf("result %d %s\nwant       200 %s", res.Status, res.Body, want)
	}
	// So does an inbound webhook's, taken from the queue: no caller reads
	// its reply either (before, it got the API summary).
	wh := ev
	wh.Source, wh.Inbound = action.SourceWebhook, &action.Inbound{Source: "acme", Scheme: "standard-webhooks", DeliveryID: "msg_1"}
	res, err = notify.New(srv.URL, time.Second, notify.Classifier{}).Do(context.Background(), wh)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != 200 || string(res.Body) != want {
		t.Errorf("inbound webhook's result %d %s\nwant                      200 %s", res.Status, res.Body, want)
	}
	// An API caller gets the start of the reply back.
	api := ev
	api.Source = action.SourceHTTP
	res, err = notify.New(srv.URL, time.Second, notify.Classifier{}).Do(context.Background(), api)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"delivered":true,"downstream_status":201,"reply":"{\"ticket\":\"T-1\"}"}`; res.Status != 200 || string(res.Body) != want {
		t.Errorf("API result %d %s\nwant           200 %s", res.Status, res.Body, want)
	}
}

// The summary stays small whatever the downstream answers: HTML is not
// escaped, the API's reply is at most 256 bytes as JSON (quotes and
// control characters included, cut between characters), the SQS prefix at
// most 64, and size and digest cover the whole reply.
func TestSummaryIsBoundedWhateverTheReply(t *testing.T) {
	// A 255-byte HTML page with two quotes: its JSON form is 257 bytes.
	html := `<!DOCTYPE html><html><head><title>Accepted</title></head><body><p class="ok">Your event &amp; its data were <b>accepted</b>.</p>`
	html += strings.Repeat("x", 255-len(html)-len(`</body></html>`)) + `</body></html>`
	tests := []struct {
		name, reply    string
		api, sqs       string // reply and reply_prefix wanted
		sqsBytes       int
		apiMax, sqsMax int // bound on the whole summary
	}{
		{"empty", "", "", "", 0, 60, 160},
		{"html", html, html[:254], html[:64], 255, 330, 260},
		{"quotes", strings.Repeat(`"`, 300), strings.Repeat(`"`, 128), strings.Repeat(`"`, 32), 300, 330, 260},
		{"control characters", strings.Repeat("\x01", 100), strings.Repeat("\x01", 42), strings.Repeat("\x01", 10), 100, 330, 260},
		{"multibyte cut", strings.Repeat("é", 200), strings.Repeat("é", 128), strings.Repeat("é", 32), 400, 330, 260},
		{"4 KB", strings.Repeat("x", 4096), strings.Repeat("x", 256), strings.Repeat("x", 64), 4096, 330, 260},
		{"not UTF-8", "ok\xff\xfe", "ok", "ok", 4, 330, 260},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, tt.reply) }))
			defer srv.Close()
			n := notify.New(srv.URL, time.Second, notify.Classifier{})
			api := ev
			api.Source = "http"
			res, err := n.Do(context.Background(), api)
			if err != nil {
				t.Fatal(err)
			}
			var a struct{ Reply string }
			if err := json.Unmarshal(res.Body, &a); err != nil || a.Reply != tt.api || len(res.Body) > tt.apiMax || bytes.Contains(res.Body, []byte(`\u003c`)) {
				t.Errorf("API summary (%d bytes) %s: reply %q, %v; want reply %q within %d bytes, unescaped HTML", len(res.Body), res.Body, a.Reply, err, tt.api, tt.apiMax)
			}
			res, err = n.Do(context.Background(), ev)
			if err != nil {
				t.Fatal(err)
			}
			var q struct {
				ReplyBytes  int    `json:"reply_bytes"`
				ReplySHA256 string `json:"reply_sha256"`
				ReplyPrefix string `json:"reply_prefix"`
			}
			sum := sha256.Sum256([]byte(tt.reply))
			if err := json.Unmarshal(res.Body, &q); err != nil || q.ReplyPrefix != tt.sqs || q.ReplyBytes != tt.sqsBytes || q.ReplySHA256 != hex.EncodeToString(sum[:]) || len(res.Body) > tt.sqsMax {
				t.Errorf("SQS summary (%d bytes) %s: %+v, %v; want prefix %q, %d bytes, its digest, within %d bytes", len(res.Body), res.Body, q, err, tt.sqs, tt.sqsBytes, tt.sqsMax)
			}
		})
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
