package sqsbatch_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/go-cmp/cmp"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/driver"
	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/sqsbatch"
)

// Two identical copies of one event in one batch run the function once and
// are both acknowledged: the second shares the first's outcome (labelled
// replayed) without a store call of its own, instead of meeting the first's
// lease (IN_PROGRESS) and going back to the queue.
func TestIdenticalCopiesInOneBatchRunOnceAndBothAreAcknowledged(t *testing.T) {
	f := newFixture(t)
	resp, results := f.run(t, batch(false,
		rec{id: "m1", body: body("co-00001", "")}, rec{id: "m2", body: body("co-00001", "")}, rec{id: "m3", body: body("co-00002", "")}))
	if got := failures(resp); len(got) != 0 {
		t.Fatalf("batchItemFailures %v; want none: the copy shares the outcome", got)
	}
	if a, b := f.runCount("co-00001"), f.runCount("co-00002"); a != 1 || b != 1 {
		t.Errorf("runs co-00001=%d co-00002=%d; want 1 each", a, b)
	}
	labels := []string{string(results[0].Label), string(results[1].Label)}
	slices.Sort(labels)
	if !slices.Equal(labels, []string{"executed", "replayed"}) || results[2].Label != "executed" {
		t.Errorf("labels %v, %s; want one copy executed, the other replayed, m3 executed", labels, results[2].Label)
	}
	if n := f.store.reserveCount(); n != 2 {
		t.Errorf("%d reservations; want 2, one per key: the in-batch copy costs no store call", n)
	}
}

// The same key with another payload in one batch is a reuse: one message
// runs, the other is refused as poison (KEY_REUSED) with a note naming the
// key, whatever order the two run in.
func TestSameKeyOtherPayloadInOneBatchIsKeyReused(t *testing.T) {
	f := newFixture(t)
	resp, results := f.run(t, batch(false, rec{id: "m1", body: body("kr-00001", "")}, rec{id: "m2", body: body("kr-00001", "other")}))
	if got := failures(resp); len(got) != 0 {
		t.Fatalf("batchItemFailures %v; want none", got)
	}
	var poisoned []sqsbatch.Result
	for _, r := range results {
		if r.Label == "poison" {
			poisoned = append(poisoned, r)
		} else if r.Label != "executed" && r.Label != "transient" {
			t.Errorf("%s: label %s; want executed or the reuse's poison", r.MessageID, r.Label)
		}
	}
	if len(poisoned) != 1 || poisoned[0].Code != oncely.CodeKeyReused {
		t.Fatalf("results %+v; want exactly one KEY_REUSED poison", results)
	}
	if note, ok := f.note(t, poisoned[0].MessageID); !ok || note.Key != "order:kr-00001" || note.Reason != oncely.CodeKeyReused {
		t.Errorf("note %+v (%v); want KEY_REUSED naming order:kr-00001", note, ok)
	}
	if n := f.runCount("kr-00001"); n != 1 {
		t.Errorf("runs %d; want 1", n)
	}
}

// A FIFO message group stops at its first failure: the rest of the group
// is not run and goes back (skipped, FIFO_GROUP_STOPPED), every failed
// record of a group at the group's first failure's visibility, while other
// groups go on.
func TestFIFOGroupStopsAtItsFirstFailureOtherGroupsGoOn(t *testing.T) {
	f := newFixture(t)
	resp, results := f.run(t, batch(true,
		rec{id: "a1", group: "A", body: body("fa-00001", "")},
		rec{id: "b1", group: "B", body: body("fb-00001", "transient"), receive: 2},
		rec{id: "a2", group: "A", body: body("fa-00002", "retry-after")},
		rec{id: "c1", group: "C", body: body("fc-00001", "")},
		rec{id: "a3", group: "A", body: body("fa-00003", "")},
		rec{id: "b2", group: "B", body: body("fb-00002", "")},
		rec{id: "a4", group: "A", body: body("fa-00004", "transient")},
		rec{id: "c2", group: "C", body: body("fc-00002", "")},
	))
	if got, want := failures(resp), []string{"b1", "a2", "a3", "b2", "a4"}; !slices.Equal(got, want) {
		t.Fatalf("batchItemFailures %v; want %v", got, want)
	}
	for id, want := range map[string]int{"fa-00001": 1, "fa-00002": 1, "fa-00003": 0, "fa-00004": 0, "fb-00001": 2, "fb-00002": 0, "fc-00001": 1, "fc-00002": 1} {
		if n := f.runCount(id); n != want {
			t.Errorf("runs of %s: %d; want %d", id, n, want)
		}
	}
	r := byID(results)
	for _, id := range []string{"a3", "a4", "b2"} {
		if r[id].Label != "skipped" || r[id].Code != idem.CodeFIFOGroupStopped || r[id].Ack() {
			t.Errorf("%s: %s %s; want skipped FIFO_GROUP_STOPPED, not acknowledged", id, r[id].Label, r[id].Code)
		}
	}
	// a2 asked for 120 s; b1's backoff on its 2nd receive is 20 s (b1 ran
	// twice: the engine's two attempts per delivery).
	want := map[string]time.Duration{"a2": 120 * time.Second, "a3": 120 * time.Second, "a4": 120 * time.Second, "b1": 20 * time.Second, "b2": 20 * time.Second}
	got := map[string]time.Duration{}
	for _, id := range []string{"a1", "a2", "a3", "a4", "b1", "b2", "c1", "c2"} {
		if d, ok := f.sqs.requested("rh-" + id); ok {
			got[id] = d
		}
		if r[id].Visibility != want[id] {
			t.Errorf("%s: Result.Visibility %v; want %v", id, r[id].Visibility, want[id])
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("visibility requested by message (-want +got):\n%s", diff)
	}
}

// A FIFO group runs one message at a time, in the batch's order: no
// message of a group starts before its predecessor ended.
func TestFIFOGroupRunsOneAtATimeInOrder(t *testing.T) {
	var mu sync.Mutex
	running, overlap := 0, false
	var ran []string
	started := make(chan struct{}, 16)
	f := newFixture(t, func(s *setup) {
		s.work = func(ctx context.Context, o order) ([]byte, oncely.Effects, error) {
			mu.Lock()
			running++
			overlap = overlap || running > 1
			ran = append(ran, o.ID)
			mu.Unlock()
			if o.ID != "g-0" {
				started <- struct{}{}
			} else {
				// Give a message running beside this one time to start:
				// run in parallel, the group would overlap here.
				select {
				case <-started:
				case <-time.After(200 * time.Millisecond):
				}
			}
			mu.Lock()
			running--
			mu.Unlock()
			return nil, nil, nil
		}
	})
	var recs []rec
	var want []string
	for i := range 8 {
		id := "g-" + string(rune('0'+i))
		recs = append(recs, rec{id: id, group: "G", body: body(id, "")})
		want = append(want, id)
	}
	resp, _ := f.run(t, batch(true, recs...))
	if len(resp.BatchItemFailures) != 0 {
		t.Fatalf("batchItemFailures %v", failures(resp))
	}
	if overlap || !slices.Equal(ran, want) {
		t.Errorf("ran %v (overlapping %v); want %v one at a time", ran, overlap, want)
	}
}

// A panic in the function is the engine's stored permanent failure (PANIC):
// the message is acknowledged, its redelivery replays the failure without
// running, and the rest of the batch is unaffected.
func TestPanicInTheFunctionIsAStoredFailureAndTheBatchGoesOn(t *testing.T) {
	f := newFixture(t)
	resp, results := f.run(t, batch(false, rec{id: "m1", body: body("boom-0001", "panic")}, rec{id: "m2", body: body("calm-0001", "")}))
	if got := failures(resp); len(got) != 0 {
		t.Fatalf("batchItemFailures %v; want none: the panic is a stored failure", got)
	}
	if r := results[0]; r.Label != "permanent" || r.Code != oncely.CodePanic || !r.Ack() {
		t.Errorf("m1: %s %s; want permanent PANIC, acknowledged", r.Label, r.Code)
	}
	if r := results[1]; r.Label != "executed" {
		t.Errorf("m2: %s; want executed", r.Label)
	}
	stored, ok, err := f.store.Get(context.Background(), "order:boom-0001", f.clock.Now())
	if err != nil || !ok || stored.Status != driver.StatusFailed || stored.ErrorCode != oncely.CodePanic || stored.Retryable {
		t.Errorf("record %+v (%v, %v); want FAILED PANIC, not retryable", stored, ok, err)
	}
	_, again := f.run(t, batch(false, rec{id: "m1", body: body("boom-0001", "panic")}))
	if again[0].Label != "permanent" || f.runCount("boom-0001") != 1 {
		t.Errorf("redelivery: %s, %d runs; want the stored PANIC replayed, 1 run", again[0].Label, f.runCount("boom-0001"))
	}
	if !strings.Contains(f.logs.String(), "goroutine") {
		t.Errorf("the panic's stack is not logged")
	}
}

// A panic in the decoder leaves nothing that says what happened: that
// message goes back to the queue (store_error, PANIC), unacknowledged and
// without a note; the others are processed.
func TestPanicInTheDecoderSendsThatMessageBack(t *testing.T) {
	json := sqsbatch.JSON(orderKey)
	f := newFixture(t, func(s *setup) {
		s.decoder = func(m events.SQSMessage) (oncely.Request, order, error) {
			if m.Body == "boom" {
				panic("the decoder hit a bug")
			}
			return json(m)
		}
	})
	resp, results := f.run(t, batch(false, rec{id: "m1", body: body("dp-00001", "")}, rec{id: "m2", body: "boom"}, rec{id: "m3", body: body("dp-00003", "")}))
	if got := failures(resp); !slices.Equal(got, []string{"m2"}) {
		t.Fatalf("batchItemFailures %v; want [m2]", got)
	}
	if r := results[1]; r.Label != "store_error" || r.Code != oncely.CodePanic || r.Ack() {
		t.Errorf("m2: %s %s; want store_error PANIC, not acknowledged", r.Label, r.Code)
	}
	if _, ok := f.note(t, "m2"); ok {
		t.Errorf("a poison note was stored for a message whose decoder panicked")
	}
	if results[0].Label != "executed" || results[2].Label != "executed" {
		t.Errorf("m1 %s, m3 %s; want both executed", results[0].Label, results[2].Label)
	}
	if !strings.Contains(f.logs.String(), "record processing panicked") {
		t.Errorf("the decoder's panic is not logged")
	}
}

// The MessageID decoder keys a message by its SQS message id: SQS's own
// redelivery of one send (same messageId) runs once, but a producer that
// sends the same body twice (a new messageId) gets it run twice.
func TestMessageIDDecoderRunsARedeliveryOnceButAProducerResendTwice(t *testing.T) {
	f := newFixture(t)
	runs := 0
	var mu sync.Mutex
	h := sqsbatch.Wrap(f.engine, sqsbatch.MessageID(), func(_ context.Context, m events.SQSMessage) error {
		mu.Lock()
		defer mu.Unlock()
		if m.Body != "pay invoice 7" {
			t.Errorf("the function got body %q; want the message whole", m.Body)
		}
		runs++
		return nil
	}, sqsbatch.Options{})
	for i, ev := range []events.SQSEvent{
		batch(false, rec{id: "send-1", body: "pay invoice 7"}),
		batch(false, rec{id: "send-1", body: "pay invoice 7", receive: 2}), // SQS redelivers
		batch(false, rec{id: "send-2", body: "pay invoice 7"}),             // the producer sends again
	} {
		resp, err := h(context.Background(), ev)
		if err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("batch %d: %v, %v; want acknowledged", i, resp, err)
		}
	}
	if runs != 2 {
		t.Errorf("runs %d; want 2: one per send, SQS's redelivery replayed", runs)
	}
	if _, ok, _ := f.store.Get(context.Background(), "msg:send-1", f.clock.Now()); !ok {
		t.Errorf("no record under msg:send-1")
	}
}
