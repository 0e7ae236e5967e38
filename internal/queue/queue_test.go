package queue_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/internal/action"
	"github.com/oncely/oncely/internal/engineref"
	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/queue"
	"github.com/oncely/oncely/internal/sqsvisibility"
	"github.com/oncely/oncely/internal/testing/memstore"
	"github.com/oncely/oncely/keyexpr"
	"github.com/oncely/oncely/sqsbatch"
)

const (
	arn     = "arn:aws:sqs:us-east-1:123456789012:oncely-events"
	fifoARN = "arn:aws:sqs:us-east-1:123456789012:oncely-events.fifo"
)

// recorder is the SQS API the adapter's backoff calls: it records each
// entry's timeout by message id (the fixture's receipt handles are
// "rh-"+id), and fails the message ids in fail. (The SQS client itself is
// tested against moto in package sqsvisibility.)
type recorder struct {
	mu      sync.Mutex
	changes map[string]time.Duration
	fail    map[string]bool
}

func (r *recorder) ChangeMessageVisibilityBatch(_ context.Context, in *sqs.ChangeMessageVisibilityBatchInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := &sqs.ChangeMessageVisibilityBatchOutput{}
	for _, e := range in.Entries {
		id := strings.TrimPrefix(aws.ToString(e.ReceiptHandle), "rh-")
		r.changes[id] = time.Duration(e.VisibilityTimeout) * time.Second
		if r.fail[id] {
			out.Failed = append(out.Failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String("ServiceUnavailable"), Message: aws.String("sqs unavailable")})
		}
	}
	return out, nil
}

// scripted is the business action: its reply is chosen by the event body's
// "reply" field.
func scripted(ctx context.Context, ev action.Event) (action.Result, error) {
	var b struct{ Reply string }
	_ = json.Unmarshal(ev.Body, &b)
	switch b.Reply {
	case "transient":
		return action.Result{}, idem.Transient(errors.New("503"))
	case "retry-after":
		return action.Result{}, idem.TransientAfter(errors.New("429"), 120*time.Second)
	case "gateway-504":
		// A gateway's 504 with Retry-After: 1 after its upstream timed out:
		// the origin may have the request.
		return action.Result{}, &idem.ClassifiedError{Class: idem.ClassTransient, Sent: true, RetryAfter: time.Second, Err: errors.New("504")}
	case "sent":
		return action.Result{}, idem.TransientSent(errors.New("timed out once written"))
	case "permanent":
		return action.Result{}, idem.PermanentCode("HTTP_404", errors.New("404"))
	case "hang":
		<-ctx.Done()
		return action.Result{}, idem.Transient(ctx.Err())
	}
	return action.Result{Body: []byte(`{"ok":true}`)}, nil
}

// fixturePause is the engine's pause after a sent request: longer than the
// fixture's first backoff (10 s at most), so that a table row shows which
// of the two a delay follows.
const fixturePause = 15 * time.Second

type fixture struct {
	store  *memstore.Store
	engine *oncely.Engine // the queue path's
	vis    *recorder
	h      *queue.Handler
	keys   *keyexpr.Extractor
	logs   *bytes.Buffer
}

// fixtureOptions are what a test may change of the queue path.
type fixtureOptions struct {
	action  action.Func
	keys    *keyexpr.Extractor
	maxBody int
	proof   queue.Proof
}

func newFixture(t testing.TB, mod ...func(*fixtureOptions)) *fixture {
	t.Helper()
	f := &fixture{store: memstore.New(), vis: &recorder{changes: map[string]time.Duration{}, fail: map[string]bool{}}, logs: &bytes.Buffer{}}
	logger := slog.New(slog.NewJSONHandler(f.logs, nil))
	engine, err := idem.New(idem.Options{Store: f.store, Lease: time.Minute, Logger: logger, SentPause: fixturePause,
		Retry:  idem.RetryPolicy{AttemptsPerDelivery: 2, Base: time.Millisecond, Max: time.Millisecond},
		Sleep:  func(context.Context, time.Duration) error { return nil },
		Random: func() float64 { return 0.999 }})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := keyexpr.New("", "")
	if err != nil {
		t.Fatal(err)
	}
	o := fixtureOptions{action: scripted, keys: keys, maxBody: 4096}
	for _, m := range mod {
		m(&o)
	}
	f.keys = o.keys
	f.engine = engineref.Wrap(engine).(*oncely.Engine)
	f.h, err = queue.New(f.engine, o.keys, o.action, sqsbatch.Options{MaxBodyBytes: o.maxBody,
		Backoff: &sqsbatch.Backoff{SQS: f.vis, Base: 10 * time.Second, Max: time.Minute}}, o.proof)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

type rec struct {
	id, body, group string
	receive         int
}

func batch(fifo bool, recs ...rec) events.SQSEvent {
	var ev events.SQSEvent
	for _, r := range recs {
		m := events.SQSMessage{MessageId: r.id, ReceiptHandle: "rh-" + r.id, Body: r.body, EventSource: "aws:sqs", EventSourceARN: arn,
			Attributes: map[string]string{"ApproximateReceiveCount": fmt.Sprint(max(r.receive, 1))}}
		if fifo {
			m.EventSourceARN = fifoARN
			m.Attributes["MessageGroupId"] = r.group
		}
		ev.Records = append(ev.Records, m)
	}
	return ev
}

func event(id, reply string) string {
	return fmt.Sprintf(`{"id":%q,"action":"notify","reply":%q}`, id, reply)
}

// TestOutcomes is the queue path's table (the public adapter's own is
// in package sqsbatch; this one goes through the product's decoder): what each outcome means for the
// message (acknowledged or not), its label, code and requested visibility.
func TestOutcomes(t *testing.T) {
	tests := []struct {
		name       string
		body       string
		receive    int
		setup      func(*fixture)
		label      idem.Label
		code       idem.Code
		ack        bool
		visibility time.Duration
		noteKey    string // the key a poison note names
	}{
		{name: "success", body: event("ok-00001", ""), label: idem.LabelExecuted, ack: true},
		{name: "transient: backoff on the first receive", body: event("tr-00001", "transient"), label: idem.LabelTransient, code: idem.CodeTransientFailure, visibility: 10 * time.Second},
		{name: "transient: backoff grows with the receive count", body: event("tr-00002", "transient"), receive: 3, label: idem.LabelTransient, code: idem.CodeTransientFailure, visibility: 40 * time.Second},
		{name: "transient on the 50th receive: still not acknowledged", body: event("tr-00003", "transient"), receive: 50, label: idem.LabelTransient, code: idem.CodeTransientFailure, visibility: time.Minute},
		{name: "downstream Retry-After", body: event("ra-00001", "retry-after"), label: idem.LabelTransient, code: idem.CodeTransientFailure, visibility: 120 * time.Second},
		{name: "a gateway's 504 with Retry-After: 1 once sent: the pause, not 1 s", body: event("gw-00001", "gateway-504"), label: idem.LabelTransient, code: idem.CodeTransientFailure, visibility: fixturePause},
		{name: "sent: the backoff once it passes the pause", body: event("se-00001", "sent"), receive: 3, label: idem.LabelTransient, code: idem.CodeTransientFailure, visibility: 40 * time.Second},
		{name: "held off after a sent request: in progress for the pause's time left", body: event("ho-00001", "gateway-504"), label: idem.LabelInProgress, code: idem.CodeInProgress,
			setup: func(f *fixture) {
				f.h.Handle(context.Background(), batch(false, rec{id: "earlier", body: event("ho-00001", "gateway-504")}))
			}, visibility: fixturePause + sqsvisibility.InProgressMargin},
		{name: "permanent", body: event("pe-00001", "permanent"), label: idem.LabelPermanent, code: "HTTP_404", ack: true},
		{name: "in progress: the lease's time left", body: event("ip-00001", ""), label: idem.LabelInProgress, code: idem.CodeInProgress,
			setup: func(f *fixture) {
				now := time.Now()
				r, _ := idem.NewRequest("evt:ip-00001:notify", []byte(event("ip-00001", "")))
				_, _, _ = f.store.Reserve(context.Background(), idem.Reservation{Key: r.Key, Fingerprint: r.Fingerprint, Token: "other",
					Now: now, LeaseUntil: now.Add(30 * time.Second), ExpiresAt: now.Add(time.Hour)})
			}, visibility: 32 * time.Second},
		{name: "replay of a success", body: event("rp-00001", ""), label: idem.LabelReplayed, ack: true,
			setup: func(f *fixture) {
				f.h.Handle(context.Background(), batch(false, rec{id: "earlier", body: event("rp-00001", "")}))
			}},
		{name: "not JSON", body: `{"id":`, label: idem.LabelPoison, code: idem.CodeNotJSON, ack: true},
		{name: "no key", body: `{"action":"notify"}`, label: idem.LabelPoison, code: idem.CodeKeyMissing, ack: true},
		{name: "ambiguous action", body: `{"id":"a1-col","action":"x:notify"}`, label: idem.LabelPoison, code: idem.CodeInvalidAction, ack: true},
		{name: "too large", body: `{"id":"big-00001","action":"notify","pad":"` + strings.Repeat("x", 5000) + `"}`, label: idem.LabelPoison, code: idem.CodeTooLarge, ack: true},
		{name: "key reused with another payload", body: event("ku-00001", "x"), label: idem.LabelPoison, code: idem.CodeKeyReused, ack: true, noteKey: "evt:ku-00001:notify",
			setup: func(f *fixture) {
				f.h.Handle(context.Background(), batch(false, rec{id: "earlier", body: event("ku-00001", "")}))
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			if tt.setup != nil {
				tt.setup(f)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			resp, results, err := f.h.Handle(ctx, batch(false, rec{id: "m1", body: tt.body, receive: tt.receive}))
			if err != nil {
				t.Fatal(err)
			}
			r := results[0]
			if r.Label != tt.label || r.Code != tt.code || r.Ack() != tt.ack {
				t.Errorf("got label %s code %s ack %v; want %s %s %v", r.Label, r.Code, r.Ack(), tt.label, tt.code, tt.ack)
			}
			inFailures := len(resp.BatchItemFailures) == 1 && resp.BatchItemFailures[0].ItemIdentifier == "m1"
			if inFailures == tt.ack {
				t.Errorf("batchItemFailures %v; want m1 there exactly when not acknowledged", resp.BatchItemFailures)
			}
			if got := f.vis.changes["m1"]; got != tt.visibility || r.Visibility != tt.visibility {
				t.Errorf("visibility requested %v (result %v); want %v", got, r.Visibility, tt.visibility)
			}
			if tt.label == idem.LabelPoison {
				note, ok, _ := f.store.GetPoison(context.Background(), "m1", time.Now())
				if !ok {
					t.Errorf("acknowledged as poison without a stored note")
				}
				if note.Key != tt.noteKey {
					t.Errorf("the poison note names key %q, want %q (the key, where one was computed)", note.Key, tt.noteKey)
				}
			}
		})
	}
}

// Poison notes hold a code, a short description, the body's digest and
// size: never the body. A huge body still gets a note that fits.
func TestPoisonNotesNeverHoldTheBody(t *testing.T) {
	f := newFixture(t, func(o *fixtureOptions) { o.maxBody = 1 << 20 })
	card := "4111111111111111"
	var big strings.Builder
	big.WriteString(`{"action":"notify","id":[`)
	for i := range 20000 {
		if i > 0 {
			big.WriteString(",")
		}
		fmt.Fprintf(&big, `{"c":"%s"}`, card)
	}
	big.WriteString("]}")
	bodies := map[string]string{
		"card in an object id": `{"id":{"card":"` + card + `"},"action":"notify"}`,
		"card in the action":   `{"id":"order-7","action":{"card":"` + card + `"}}`,
		"huge array id":        big.String(),
		"card, not JSON":       `{"card":"` + card,
	}
	for name, body := range bodies {
		t.Run(name, func(t *testing.T) {
			_, results, _ := f.h.Handle(context.Background(), batch(false, rec{id: name, body: body}))
			note, ok, _ := f.store.GetPoison(context.Background(), name, time.Now())
			if !ok || !results[0].Ack() {
				t.Fatalf("no note stored or not acknowledged: %+v", results[0])
			}
			if strings.Contains(note.Detail, card[:8]) || len(note.Detail) > idem.MaxPoisonDetail || note.BodySize != len(body) || len(note.BodySHA256) != 64 {
				t.Errorf("note %+v; want a bounded detail without the card, the body's size %d and digest", note, len(body))
			}
		})
	}
}
