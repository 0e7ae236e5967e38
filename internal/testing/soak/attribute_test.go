package soak

import (
	"testing"
	"time"

	"github.com/oncely/oncely/internal/testing/esm"
	"github.com/oncely/oncely/internal/testing/fakewebhook"
	"github.com/oncely/oncely/internal/testing/faults"
)

// The attribution of a duplicate, from synthetic evidence: each window
// needs its own evidence, in the right time range, for the right key.
func TestAttributeNeedsEvidenceForEachWindow(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ev := &event{id: "e1", key: "evt:e1:notify"}
	pk := Function + "#" + ev.key
	prev := fakewebhook.Delivery{Seq: 1, At: at(100), Key: ev.key, Mode: fakewebhook.ModeAccept, Accepted: true}
	next := fakewebhook.Delivery{Seq: 9, At: at(5000), Key: ev.key, Mode: fakewebhook.ModeAccept, Accepted: true}
	inv := func(start, end int, failure string) laneInvocation {
		return laneInvocation{lane: "StandardQueue", Invocation: esm.Invocation{ID: 7, Started: at(start), Ended: at(end), Failure: failure}}
	}
	for _, c := range []struct {
		name string
		prev fakewebhook.Delivery
		e    evidence
		want Window
	}{
		{name: "no evidence", prev: prev, want: ""},
		{name: "killed while carrying it", prev: prev, want: WindowCrash,
			e: evidence{invocations: map[string][]laneInvocation{ev.key: {inv(50, 200, `function error: {"errorType":"Runtime.ExitError"}`)}}}},
		{name: "timed out while carrying it", prev: prev, want: WindowCrash,
			e: evidence{invocations: map[string][]laneInvocation{ev.key: {inv(50, 3050, "function error: Task timed out after 3.00 seconds")}}}},
		{name: "killed, and the webhook read its request just after", prev: prev, want: WindowCrash,
			e: evidence{invocations: map[string][]laneInvocation{ev.key: {inv(10, 90, "function error: killed")}}}},
		{name: "killed just before, but another carrier was in flight", prev: prev, want: "",
			e: evidence{invocations: map[string][]laneInvocation{ev.key: {inv(10, 90, "function error: killed"), inv(50, 300, "")}}}},
		{name: "killed long before the delivery", prev: fakewebhook.Delivery{Seq: 1, At: at(2500), Key: ev.key, Mode: fakewebhook.ModeAccept, Accepted: true}, want: "",
			e: evidence{invocations: map[string][]laneInvocation{ev.key: {inv(10, 90, "function error: killed")}}}},
		{name: "ended just before the delivery, alive", prev: prev, want: "",
			e: evidence{invocations: map[string][]laneInvocation{ev.key: {inv(10, 90, "")}}}},
		{name: "killed, but started after the delivery", prev: prev, want: "",
			e: evidence{invocations: map[string][]laneInvocation{ev.key: {inv(150, 400, "function error: killed")}}}},
		{name: "carried it and answered", prev: prev, want: "",
			e: evidence{invocations: map[string][]laneInvocation{ev.key: {inv(50, 200, "")}}}},
		{name: "reply lost", prev: fakewebhook.Delivery{Seq: 1, At: at(100), Key: ev.key, Mode: fakewebhook.ModeHang, Accepted: true, ReplyLost: true}, want: WindowReplyLost},
		{name: "completion write hit, but retried and landed", prev: prev, want: "",
			e: evidence{proxy: map[string][]faults.Event{pk: {{At: at(300), Op: "UpdateItem", Subject: pk, Kind: faults.Throttle}}}}},
		{name: "completion write hit and failed for good", prev: prev, want: WindowCompletion,
			e: evidence{proxy: map[string][]faults.Event{pk: {{At: at(300), Op: "UpdateItem", Subject: pk, Kind: faults.Throttle}}},
				fnByKey: map[string][]fnLine{ev.key: {{At: at(900), Message: "completion write failed", Key: ev.key}}}}},
		{name: "completion write failed, but before the delivery", prev: prev, want: "",
			e: evidence{fnByKey: map[string][]fnLine{ev.key: {{At: at(50), Message: "completion write failed", Key: ev.key}}}}},
		{name: "reserve hit, not the completion", prev: prev, want: "",
			e: evidence{proxy: map[string][]faults.Event{pk: {{At: at(300), Op: "PutItem", Subject: pk, Kind: faults.Throttle}}}}},
		{name: "completion hit before the delivery", prev: prev, want: "",
			e: evidence{proxy: map[string][]faults.Event{pk: {{At: at(50), Op: "UpdateItem", Subject: pk, Kind: faults.Throttle}}}}},
		{name: "another key's completion hit", prev: prev, want: "",
			e: evidence{proxy: map[string][]faults.Event{Function + "#evt:e2:notify": {{At: at(300), Op: "UpdateItem", Kind: faults.Throttle}}}}},
		{name: "lease lost, logged", prev: prev, want: WindowCompletion,
			e: evidence{fnByKey: map[string][]fnLine{ev.key: {{At: at(2000), Message: "lease lost: result discarded", Key: ev.key}}}}},
		{name: "completion write failed, logged", prev: prev, want: WindowCompletion,
			e: evidence{fnByKey: map[string][]fnLine{ev.key: {{At: at(2000), Message: "completion write failed", Key: ev.key}}}}},
		{name: "completion failed after the next delivery, by the invocation carrying it at the earlier one", prev: prev, want: WindowCompletion,
			e: evidence{invocations: map[string][]laneInvocation{ev.key: {inv(50, 5200, "")}},
				fnByKey: map[string][]fnLine{ev.key: {{At: at(5100), Lane: "StandardQueue", Slot: 0, Message: "completion write failed", Key: ev.key}}}}},
		{name: "completion failed after the next delivery, from another emulator", prev: prev, want: "",
			e: evidence{invocations: map[string][]laneInvocation{ev.key: {inv(50, 5200, "")}},
				fnByKey: map[string][]fnLine{ev.key: {{At: at(5100), Lane: "StandardQueue", Slot: 1, Message: "completion write failed", Key: ev.key}}}}},
		{name: "completion failed after the next delivery, by an invocation that began after the earlier one", prev: prev, want: "",
			e: evidence{invocations: map[string][]laneInvocation{ev.key: {inv(150, 5200, "")}},
				fnByKey: map[string][]fnLine{ev.key: {{At: at(5100), Lane: "StandardQueue", Slot: 0, Message: "completion write failed", Key: ev.key}}}}},
		{name: "completion failed after the carrier ended", prev: prev, want: "",
			e: evidence{invocations: map[string][]laneInvocation{ev.key: {inv(50, 5050, "")}},
				fnByKey: map[string][]fnLine{ev.key: {{At: at(5100), Lane: "StandardQueue", Slot: 0, Message: "completion write failed", Key: ev.key}}}}},
		{name: "an unrelated log line", prev: prev, want: "",
			e: evidence{fnByKey: map[string][]fnLine{ev.key: {{At: at(2000), Message: "record", Key: ev.key}}}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &run{}
			got, why := r.attribute(&c.e, ev, c.prev, next)
			if got != c.want {
				t.Errorf("window %q (%s); want %q", got, why, c.want)
			}
		})
	}
}
