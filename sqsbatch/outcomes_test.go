package sqsbatch_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/driver"
	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/keyexpr"
	"github.com/oncely/oncely/sqsbatch"
)

// TestOutcomes is the adapter's table: what each outcome means for the
// message (acknowledged or not, in batchItemFailures or not), its label and
// code, the visibility Backoff requests for it (Base 10 s, Max 1 min, the
// largest jitter, the engine's SentPause 15 s), and the poison note with
// the key where one was computed.
func TestOutcomes(t *testing.T) {
	byID := func(s *setup) { s.expr = mustExpr(t, "['order', id]") }
	tests := []struct {
		name       string
		body       string
		receive    int
		mod        func(*setup)
		before     func(*fixture)
		label      string
		code       oncely.Code
		ack        bool
		visibility time.Duration
		noteKey    string // the key the poison note names
	}{
		{name: "success", body: body("ok-00001", ""), label: "executed", ack: true},
		{name: "transient: the first receive's backoff", body: body("tr-00001", "transient"),
			label: "transient", code: oncely.CodeTransientFailure, visibility: 10 * time.Second},
		{name: "transient: the backoff grows with the receive count", body: body("tr-00002", "transient"), receive: 3,
			label: "transient", code: oncely.CodeTransientFailure, visibility: 40 * time.Second},
		{name: "transient on the 50th receive: capped at Max, still not acknowledged", body: body("tr-00003", "transient"), receive: 50,
			label: "transient", code: oncely.CodeTransientFailure, visibility: time.Minute},
		{name: "the function's Retry-After, exactly", body: body("ra-00001", "retry-after"),
			label: "transient", code: oncely.CodeTransientFailure, visibility: 120 * time.Second},
		{name: "a gateway's 504 with Retry-After 1 s once sent: the pause, not 1 s", body: body("gw-00001", "gateway-504"),
			label: "transient", code: oncely.CodeTransientFailure, visibility: pause},
		{name: "sent: the backoff once it passes the pause", body: body("se-00001", "sent"), receive: 3,
			label: "transient", code: oncely.CodeTransientFailure, visibility: 40 * time.Second},
		{name: "held off after a sent request: in progress for the pause's time left", body: body("ho-00001", "gateway-504"),
			before: func(f *fixture) {
				f.run(t, batch(false, rec{id: "earlier", body: body("ho-00001", "gateway-504")}))
				f.clock.Advance(5 * time.Second)
			}, label: "in_progress", code: oncely.CodeInProgress, visibility: pause - 5*time.Second + 2*time.Second},
		{name: "permanent: stored and acknowledged", body: body("pe-00001", "permanent"), label: "permanent", code: "HTTP_404", ack: true},
		{name: "in progress: another owner's lease, its time left", body: body("ip-00001", ""),
			before: func(f *fixture) {
				req, err := oncely.NewRequest("order:ip-00001", []byte(body("ip-00001", "")))
				if err != nil {
					t.Fatal(err)
				}
				now := f.clock.Now()
				if _, ok, err := f.store.Reserve(context.Background(), driver.Reservation{Key: req.Key, Fingerprint: req.Fingerprint, Token: "another-owner",
					Now: now, LeaseUntil: now.Add(30 * time.Second), ExpiresAt: now.Add(time.Hour)}); !ok || err != nil {
					t.Fatalf("reserve: %v %v", ok, err)
				}
			}, label: "in_progress", code: oncely.CodeInProgress, visibility: 32 * time.Second},
		{name: "replay of a stored success", body: body("rp-00001", ""),
			before: func(f *fixture) { f.run(t, batch(false, rec{id: "earlier", body: body("rp-00001", "")})) },
			label:  "replayed", ack: true},
		{name: "replay of a stored permanent failure", body: body("rp-00002", "permanent"),
			before: func(f *fixture) { f.run(t, batch(false, rec{id: "earlier", body: body("rp-00002", "permanent")})) },
			label:  "permanent", code: "HTTP_404", ack: true},
		{name: "permanent through Expr: the function gets the body", body: body("px-00001", "permanent"), mod: byID, label: "permanent", code: "HTTP_404", ack: true},
		{name: "poison: not JSON (Expr)", body: `{"id":`, mod: byID, label: "poison", code: idem.CodeNotJSON, ack: true},
		{name: "poison: no key (Expr, KEY_MISSING)", body: `{"reply":""}`, mod: byID, label: "poison", code: idem.CodeKeyMissing, ack: true},
		{name: "poison: not JSON (JSON decoder)", body: `{"id":`, label: "poison", code: oncely.CodeInvalidPayload, ack: true},
		{name: "poison: too large", body: `{"id":"big-00001","pad":"` + strings.Repeat("x", 5000) + `"}`, label: "poison", code: idem.CodeTooLarge, ack: true},
		{name: "poison: key reused with another payload, the note names the key", body: body("ku-00001", "other"),
			before: func(f *fixture) { f.run(t, batch(false, rec{id: "earlier", body: body("ku-00001", "")})) },
			label:  "poison", code: oncely.CodeKeyReused, ack: true, noteKey: "order:ku-00001"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mods []func(*setup)
			if tt.mod != nil {
				mods = append(mods, tt.mod)
			}
			f := newFixture(t, mods...)
			if tt.before != nil {
				tt.before(f)
			}
			resp, results := f.run(t, batch(false, rec{id: "m1", body: tt.body, receive: tt.receive}))
			r := results[0]
			if string(r.Label) != tt.label || r.Code != tt.code || r.Ack() != tt.ack {
				t.Errorf("got label %s code %s ack %v; want %s %s %v", r.Label, r.Code, r.Ack(), tt.label, tt.code, tt.ack)
			}
			if inFailures := slices.Equal(failures(resp), []string{"m1"}); inFailures == tt.ack {
				t.Errorf("batchItemFailures %v; want m1 there exactly when it is not acknowledged", failures(resp))
			}
			got, asked := f.sqs.requested("rh-m1")
			if got != tt.visibility || r.Visibility != tt.visibility || asked == tt.ack {
				t.Errorf("visibility requested %v (asked %v, result %v); want %v, asked only when not acknowledged", got, asked, r.Visibility, tt.visibility)
			}
			note, noted := f.note(t, "m1")
			if noted != (tt.label == "poison") {
				t.Fatalf("poison note stored %v; want one exactly for a poison message", noted)
			}
			if noted && (note.Key != tt.noteKey || note.Reason != tt.code || r.Key != tt.noteKey) {
				t.Errorf("note key %q reason %s (result key %q); want key %q reason %s", note.Key, note.Reason, r.Key, tt.noteKey, tt.code)
			}
		})
	}
}

func mustExpr(t testing.TB, key string) *keyexpr.Extractor {
	t.Helper()
	x, err := keyexpr.New(key, "")
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// A failed visibility change (one entry refused) keeps the outcome: the
// message is still in batchItemFailures, its Result says why in
// VisibilityErr, and the failure is logged.
func TestBackoffFailedEntryKeepsTheOutcomeAndSetsVisibilityErr(t *testing.T) {
	f := newFixture(t)
	f.sqs.failEntry["rh-m1"] = true
	resp, results := f.run(t, batch(false, rec{id: "m1", body: body("vf-00001", "transient")}, rec{id: "m2", body: body("vf-00002", "transient")}))
	if got := failures(resp); !slices.Equal(got, []string{"m1", "m2"}) {
		t.Fatalf("batchItemFailures %v; want [m1 m2]", got)
	}
	if r := results[0]; r.Label != "transient" || r.VisibilityErr == nil || r.Visibility != 10*time.Second {
		t.Errorf("m1: %+v; want transient, 10 s wanted, VisibilityErr set", r)
	}
	if r := results[1]; r.VisibilityErr != nil || r.Visibility != 10*time.Second {
		t.Errorf("m2: %+v; want 10 s, no VisibilityErr", r)
	}
	if d, ok := f.sqs.requested("rh-m2"); !ok || d != 10*time.Second {
		t.Errorf("m2's change %v (%v); want 10 s", d, ok)
	}
	if !strings.Contains(f.logs.String(), "visibility not changed") {
		t.Errorf("the failed change is not logged: %s", f.logs.String())
	}
}

// A failed call fails every change in it: each message going back gets
// VisibilityErr, keeps its outcome, and the acknowledged ones are not
// touched.
func TestBackoffFailedCallKeepsEveryOutcome(t *testing.T) {
	f := newFixture(t)
	f.sqs.failCall = errors.New("connection reset by peer")
	resp, results := f.run(t, batch(false, rec{id: "m1", body: body("fc-00001", "transient")},
		rec{id: "m2", body: body("fc-00002", "")}, rec{id: "m3", body: body("fc-00003", "retry-after")}))
	if got := failures(resp); !slices.Equal(got, []string{"m1", "m3"}) {
		t.Fatalf("batchItemFailures %v; want [m1 m3]", got)
	}
	want := map[string]bool{"m1": true, "m2": false, "m3": true}
	for _, r := range results {
		if (r.VisibilityErr != nil) != want[r.MessageID] {
			t.Errorf("%s: VisibilityErr %v; want set exactly for the messages that go back", r.MessageID, r.VisibilityErr)
		}
	}
	if results[0].Label != "transient" || results[1].Label != "executed" || results[2].Visibility != 120*time.Second {
		t.Errorf("results %+v; want the outcomes a working SQS gives", results)
	}
}

// Messages that are acknowledged cost no visibility call: a batch of
// successes makes none.
func TestBackoffMakesNoCallWhenNothingGoesBack(t *testing.T) {
	f := newFixture(t)
	f.run(t, batch(false, rec{id: "m1", body: body("nc-00001", "")}, rec{id: "m2", body: body("nc-00002", "permanent")}))
	if n := f.sqs.callCount(); n != 0 {
		t.Errorf("%d visibility calls; want none", n)
	}
}

// Without Backoff the queue's own visibility timeout applies: no change is
// requested.
func TestNoBackoffRequestsNoVisibility(t *testing.T) {
	f := newFixture(t, func(s *setup) { s.noBackoff = true })
	resp, results := f.run(t, batch(false, rec{id: "m1", body: body("off-00001", "transient")}))
	if results[0].Visibility != 0 || results[0].VisibilityErr != nil || len(resp.BatchItemFailures) != 1 {
		t.Errorf("result %+v; want back to the queue with no visibility requested", results[0])
	}
	if n := f.sqs.callCount(); n != 0 {
		t.Errorf("%d visibility calls; want none", n)
	}
}

// A record without a messageId cannot be answered record by record: the
// whole batch fails, and nothing runs.
func TestARecordWithoutMessageIDFailsTheWholeBatch(t *testing.T) {
	f := newFixture(t)
	ev := batch(false, rec{id: "m1", body: body("mid-00001", "")}, rec{id: "m2", body: body("mid-00002", "")})
	ev.Records[1].MessageId = ""
	if _, _, err := f.handle(context.Background(), ev); err == nil || !strings.Contains(err.Error(), "messageId") {
		t.Fatalf("Handle = %v; want an error naming the missing messageId", err)
	}
	if f.runCount("mid-00001")+f.runCount("mid-00002") != 0 {
		t.Errorf("the function ran for a batch that fails whole")
	}
	// Wrap's Lambda handler fails it the same way.
	h := sqsbatch.Wrap(f.engine, sqsbatch.JSON(orderKey), func(context.Context, order) error { return nil }, sqsbatch.Options{})
	if _, err := h(context.Background(), ev); err == nil {
		t.Errorf("Wrap's handler answered a record without messageId")
	}
}
