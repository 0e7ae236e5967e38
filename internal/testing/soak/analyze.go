package soak

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/oncely/oncely/internal/ddbstore"
	"github.com/oncely/oncely/internal/testing/esm"
	"github.com/oncely/oncely/internal/testing/fakewebhook"
	"github.com/oncely/oncely/internal/testing/faults"
)

// Window is a documented window for a duplicate delivery (docs/guarantees.md,
// "Guarantees and limits").
type Window string

// The windows.
const (
	// WindowCompletion: the completion write did not land after the side
	// effect (it kept failing until the invocation's budget ran out, or it
	// landed after the lease had been taken over); the record stayed
	// IN_PROGRESS until the lease ended and a later delivery ran again.
	WindowCompletion Window = "1. completion write did not land"
	// WindowCrash: the runtime died (SIGKILL, or the function's timeout)
	// after the side effect and before the completion landed.
	WindowCrash Window = "2. runtime died after the side effect"
	// WindowReplyLost: the webhook accepted the delivery but the sender
	// never got the reply (a hang past the request timeout, a reset after
	// accepting, the sender gone); the webhook's own de-duplication by
	// Idempotency-Key would absorb it.
	WindowReplyLost Window = "3. webhook accepted, reply lost"
)

// record is one item of the records table.
type record struct {
	status, errorCode string
	retryable         bool
	attempts          int
	updatedAt         time.Time
}

func decodeRecord(item map[string]types.AttributeValue) record {
	var r record
	s := func(a string) string {
		switch v := item[a].(type) {
		case *types.AttributeValueMemberS:
			return v.Value
		case *types.AttributeValueMemberN:
			return v.Value
		}
		return ""
	}
	r.status, r.errorCode = s(ddbstore.AttrStatus), s(ddbstore.AttrErrorCode)
	if b, ok := item[ddbstore.AttrRetryable].(*types.AttributeValueMemberBOOL); ok {
		r.retryable = b.Value
	}
	r.attempts, _ = strconv.Atoi(s(ddbstore.AttrAttempts))
	ms, _ := strconv.ParseInt(s(ddbstore.AttrUpdatedAt), 10, 64)
	if ms == 0 {
		ms, _ = strconv.ParseInt(s(ddbstore.AttrCreatedAt), 10, 64)
	}
	r.updatedAt = time.UnixMilli(ms)
	return r
}

func (r record) final() bool {
	return r.status == "SUCCEEDED" || (r.status == "FAILED" && !r.retryable) || r.status == "POISON"
}

func (r *run) record(ctx context.Context, pk string) (record, bool, error) {
	out, err := r.ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: &r.table, ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{ddbstore.AttrPK: &types.AttributeValueMemberS{Value: pk}}})
	if err != nil || out.Item == nil {
		return record{}, false, err
	}
	return decodeRecord(out.Item), true, nil
}

// scan reads the whole table, straight from the server (not through the
// fault proxy).
func (r *run) scan(ctx context.Context) (map[string]record, error) {
	out := map[string]record{}
	p := dynamodb.NewScanPaginator(r.ddb, &dynamodb.ScanInput{TableName: &r.table, ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, item := range page.Items {
			if pk, ok := item[ddbstore.AttrPK].(*types.AttributeValueMemberS); ok {
				out[pk.Value] = decodeRecord(item)
			}
		}
	}
	return out, nil
}

// fnLine is one JSON log line of the function.
type fnLine struct {
	At   time.Time
	Lane string
	// Slot is the emulator that printed the line: the runner's slot, so
	// the line belongs to the invocation that slot was running then.
	Slot                                int
	Level, Message, Key, MessageID, Raw string
}

func (r *run) functionLines() []fnLine {
	var out []fnLine
	for _, ln := range r.lanes {
		for slot, emu := range ln.emus {
			sc := bufio.NewScanner(strings.NewReader(emu.Log()))
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			for sc.Scan() {
				line := sc.Text()
				i := strings.IndexByte(line, '{')
				if i < 0 {
					continue
				}
				var v struct {
					Timestamp string `json:"timestamp"`
					Level     string `json:"level"`
					Message   string `json:"message"`
					Key       string `json:"key"`
					MessageID string `json:"messageId"`
				}
				if json.Unmarshal([]byte(line[i:]), &v) != nil || v.Message == "" {
					continue
				}
				at, _ := time.Parse(time.RFC3339Nano, v.Timestamp)
				out = append(out, fnLine{At: at, Lane: ln.name, Slot: slot, Level: v.Level, Message: v.Message, Key: v.Key, MessageID: v.MessageID, Raw: line[i:]})
			}
		}
	}
	slices.SortFunc(out, func(a, b fnLine) int { return a.At.Compare(b.At) })
	return out
}

// dlqAtEnd peeks at what the DLQs still hold (the messages come back to the
// DLQ after its visibility timeout; nothing is deleted).
func (r *run) dlqAtEnd(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	for _, ln := range r.lanes {
		for empty := 0; empty < 2; {
			got, err := r.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(ln.pair.DLQ.URL), MaxNumberOfMessages: 10, VisibilityTimeout: 600})
			if err != nil {
				return nil, err
			}
			if len(got.Messages) == 0 {
				empty++
			}
			for _, m := range got.Messages {
				out[aws.ToString(m.MessageId)] = ln.name
			}
		}
	}
	return out, nil
}

// evidence is everything the analysis reads, gathered once.
type evidence struct {
	records     map[string]record
	accepted    map[string][]fakewebhook.Delivery // by key
	audit       map[string][]fakewebhook.Delivery // by key
	proxy       map[string][]faults.Event         // by pk
	runnerLog   map[string][]esm.Entry            // by message id
	deletions   []esm.Entry
	invocations map[string][]laneInvocation // by key (each invocation under every key it carried)
	fnLines     []fnLine
	fnByKey     map[string][]fnLine
	dlq         map[string]string // message id -> lane, what the DLQs hold at the end
	movedEvents map[*event][]movedMessage
}

func (r *run) gather(ctx context.Context) (*evidence, error) {
	e := &evidence{accepted: map[string][]fakewebhook.Delivery{}, audit: map[string][]fakewebhook.Delivery{},
		proxy: map[string][]faults.Event{}, runnerLog: map[string][]esm.Entry{}, invocations: map[string][]laneInvocation{},
		fnByKey: map[string][]fnLine{}, movedEvents: map[*event][]movedMessage{}}
	var err error
	if e.records, err = r.scan(ctx); err != nil {
		return nil, fmt.Errorf("soak: scan the records: %w", err)
	}
	if e.dlq, err = r.dlqAtEnd(ctx); err != nil {
		return nil, fmt.Errorf("soak: read the DLQs: %w", err)
	}
	for _, d := range r.hook.Audit() {
		e.audit[d.Key] = append(e.audit[d.Key], d)
		if d.Accepted {
			e.accepted[d.Key] = append(e.accepted[d.Key], d)
		}
	}
	for _, pe := range r.proxy.Events() {
		e.proxy[pe.Subject] = append(e.proxy[pe.Subject], pe)
	}
	for _, ln := range r.lanes {
		for _, le := range ln.runner.Log() {
			if le.MessageID != "" {
				e.runnerLog[le.MessageID] = append(e.runnerLog[le.MessageID], le)
			}
			if le.Op == esm.OpDeleted {
				e.deletions = append(e.deletions, le)
			}
		}
	}
	r.mu.Lock()
	invs := slices.Clone(r.invocations)
	moved := slices.Clone(r.moved)
	r.mu.Unlock()
	r.adoptResentCopies(invs)
	for _, inv := range invs {
		seen := map[string]bool{}
		for _, rec := range inv.Records {
			if ev := r.eventOf(rec.MessageID); ev != nil && ev.key != "" && !seen[ev.key] {
				seen[ev.key] = true
				e.invocations[ev.key] = append(e.invocations[ev.key], inv)
			}
		}
	}
	for _, m := range moved {
		if ev := r.eventOf(m.OldID); ev != nil {
			e.movedEvents[ev] = append(e.movedEvents[ev], m)
		}
	}
	e.fnLines = r.functionLines()
	for _, l := range e.fnLines {
		if l.Key != "" {
			e.fnByKey[l.Key] = append(e.fnByKey[l.Key], l)
		}
	}
	return e, nil
}

// adoptResentCopies finds the messages the runner received whose ids no
// send returned, and makes each a copy of the event whose body it carries.
// A producer's send is at least once too: when a SendMessage reply is lost
// or slow, the SDK (or the producer's own loop) sends again, and the queue
// may hold both; on a FIFO queue moto drops the re-send by its
// deduplication id but answers with a fresh id it never enqueued, so the
// id the producer holds is not the one delivered. Bodies are unique per
// event, so the body names the event.
func (r *run) adoptResentCopies(invs []laneInvocation) {
	byBody := map[string]*event{}
	for _, ev := range r.events {
		byBody[ev.body] = ev
	}
	for _, inv := range invs {
		for _, rec := range inv.Records {
			if r.eventOf(rec.MessageID) != nil {
				continue
			}
			if ev := byBody[rec.Body]; ev != nil {
				r.byMessage.Store(rec.MessageID, ev)
				r.mu.Lock()
				ev.copies = append(ev.copies, rec.MessageID)
				r.resent++
				r.mu.Unlock()
			}
		}
	}
}

func (r *run) eventOf(messageID string) *event {
	if v, ok := r.byMessage.Load(messageID); ok {
		return v.(*event)
	}
	return nil
}

// died reports whether an invocation ended with its runtime gone (killed,
// or out of time), and which.
func died(inv esm.Invocation) (bool, string) {
	switch {
	case inv.Failure == "":
		return false, ""
	case strings.Contains(inv.Failure, "timed out") || strings.Contains(inv.Failure, "Timedout"):
		return true, "timeout"
	case strings.HasPrefix(inv.Failure, "function error"), strings.HasPrefix(inv.Failure, "no answer"):
		return true, "killed"
	}
	return false, ""
}

// senderGone bounds how long after its sender died a delivery may reach
// the webhook and still be counted as that sender's (see attribute).
const senderGone = 2 * time.Second

// attribute finds the window that let next follow prev for ev's key, and
// says what shows it.
func (r *run) attribute(e *evidence, ev *event, prev, next fakewebhook.Delivery) (Window, string) {
	for _, inv := range e.invocations[ev.key] {
		if inv.Started.After(prev.At) || inv.Ended.Before(prev.At) {
			continue
		}
		if ok, how := died(inv.Invocation); ok {
			return WindowCrash, fmt.Sprintf("invocation %s/%d (slot %d) carrying it %s at %s, after the delivery at %s: %s",
				inv.lane, inv.ID, inv.Slot, how, inv.Ended.Format("15:04:05.000"), prev.At.Format("15:04:05.000"), trim(inv.Failure, 120))
		}
	}
	// A request its sender wrote just before it was killed still reaches
	// the webhook: the kernel holds it, and the server reads and stamps it
	// when its goroutine runs, which on a loaded machine is after the
	// runner saw the runtime die. So when no invocation carrying the event
	// was in flight at the delivery, the one that died last before it,
	// shortly before, sent it; nothing else could have.
	var sender *laneInvocation
	for i, inv := range e.invocations[ev.key] {
		if inv.Started.After(prev.At) {
			continue
		}
		if !inv.Ended.Before(prev.At) {
			sender = nil // a live carrier: the request may be its own
			break
		}
		if ok, _ := died(inv.Invocation); ok && prev.At.Sub(inv.Ended) <= senderGone && (sender == nil || inv.Ended.After(sender.Ended)) {
			sender = &e.invocations[ev.key][i]
		}
	}
	if sender != nil {
		_, how := died(sender.Invocation)
		return WindowCrash, fmt.Sprintf("invocation %s/%d (slot %d) carrying it %s at %s, %v before the webhook read the delivery at %s, and no other carrier was in flight then: %s",
			sender.lane, sender.ID, sender.Slot, how, sender.Ended.Format("15:04:05.000"), prev.At.Sub(sender.Ended).Round(time.Millisecond),
			prev.At.Format("15:04:05.000"), trim(sender.Failure, 120))
	}
	if prev.ReplyLost {
		return WindowReplyLost, fmt.Sprintf("delivery #%d at %s was accepted (%s) and its reply lost", prev.Seq, prev.At.Format("15:04:05.000"), prev.Mode)
	}
	// Window 1 needs the function's own word that the completion did not
	// land (its write failed for good, or it was fenced off after a
	// take-over); a fault the proxy injected into a completion that was
	// then retried successfully explains nothing. The word counts when it
	// was said between the two deliveries, or when the invocation that
	// was carrying the event at the earlier delivery said it before it
	// ended: a completion write still in flight (slow, or retried) when
	// the lease ended and another delivery took the key over fails
	// after that delivery, and it is the same window.
	for _, l := range e.fnByKey[ev.key] {
		if l.Message != "completion write failed" && !strings.HasPrefix(l.Message, "lease lost") || l.At.Before(prev.At) {
			continue
		}
		carrier := ""
		for _, inv := range e.invocations[ev.key] {
			if inv.lane == l.Lane && inv.Slot == l.Slot && !inv.Started.After(prev.At) && !inv.Ended.Before(l.At) {
				carrier = fmt.Sprintf(" (by invocation %s/%d, slot %d, in flight at the earlier delivery)", inv.lane, inv.ID, inv.Slot)
				break
			}
		}
		if l.At.After(next.At) && carrier == "" {
			continue
		}
		why := "the function logged" + carrier + ": " + trim(l.Raw, 300)
		pk := Function + "#" + ev.key
		for _, pe := range e.proxy[pk] {
			if pe.Op == "UpdateItem" && !pe.At.Before(prev.At) && !pe.At.After(l.At) {
				why += "; the proxy: " + pe.String()
				break
			}
		}
		return WindowCompletion, why
	}
	return "", ""
}

func trim(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// analyze checks every invariant and builds the report.
func (r *run) analyze(ctx context.Context) (*Report, error) {
	r.phase("analysing")
	e, err := r.gather(ctx)
	if err != nil {
		return nil, err
	}
	rep := r.newReport(e)
	// Per event: delivered, or in a DLQ with a record; duplicates attributed.
	for _, ev := range r.events {
		if ev.poison {
			rep.PoisonSent++
			noted := 0
			for _, id := range ev.copies {
				if rec, ok := e.records[Function+"#poison#"+id]; ok && rec.status != "" {
					noted++
				}
			}
			rep.PoisonNotes += noted
			if got := len(e.accepted[ev.key]); ev.key != "" && got > 0 {
				rep.violate(ev, "poison delivered", fmt.Sprintf("%d deliveries", got))
			}
			continue
		}
		rep.EventsSent++
		if len(e.movedEvents[ev]) > 0 {
			rep.ReachedDLQ++
		}
		acc := e.accepted[ev.key]
		inDLQ := false
		for _, id := range ev.copies {
			if _, ok := e.dlq[id]; ok {
				inDLQ = true
			}
		}
		switch {
		case len(acc) == 0 && inDLQ:
			rep.InDLQ++
			rep.InDLQWhy[r.recordSummary(ctx, ev)]++
			continue
		case len(acc) == 0:
			rep.Lost++
			rep.violate(ev, "lost", "never delivered and not in a DLQ; record: "+r.recordSummary(ctx, ev))
			continue
		case len(acc) == 1:
			rep.DeliveredOnce++
		case len(acc) == 2:
			rep.DeliveredTwice++
		default:
			rep.DeliveredMore++
		}
		if len(e.movedEvents[ev]) > 0 {
			rep.RedrivenDelivered++
		}
		for i := 1; i < len(acc); i++ {
			w, why := r.attribute(e, ev, acc[i-1], acc[i])
			if w == "" {
				rep.Unattributed++
				rep.violate(ev, "unattributed duplicate", fmt.Sprintf("delivery #%d at %s after #%d at %s, and no window explains it",
					acc[i].Seq, acc[i].At.Format("15:04:05.000"), acc[i-1].Seq, acc[i-1].At.Format("15:04:05.000")))
				continue
			}
			rep.Duplicates[w]++
			if len(rep.Examples[w]) < 3 {
				rep.Examples[w] = append(rep.Examples[w], ev.key+": "+why)
			}
		}
	}
	// No message deleted without a final record for its key.
	for _, d := range e.deletions {
		ev := r.eventOf(d.MessageID)
		if ev == nil {
			rep.Violations = append(rep.Violations, Violation{Rule: "deleted unknown", Detail: d.String()})
			continue
		}
		rep.Deleted++
		pk := Function + "#" + ev.key
		if ev.poison {
			pk = Function + "#poison#" + d.MessageID
		}
		rec, ok := e.records[pk]
		switch {
		case !ok:
			rep.violate(ev, "deleted without a record", d.String())
		case !rec.final():
			rep.violate(ev, "deleted without a final record", fmt.Sprintf("%s; record now %s", d.String(), rec.status))
		case rec.updatedAt.After(d.At):
			rep.violate(ev, "deleted before its record was final", fmt.Sprintf("%s; record final at %s", d.String(), rec.updatedAt.Format("15:04:05.000")))
		}
	}
	// FIFO: each group's events delivered in the order they were sent
	// (events that went through a DLQ are out of the group's order by
	// design: the group went on without them).
	groups := map[string][]*event{}
	for _, ev := range r.events {
		if ev.group != "" && !ev.poison && len(e.movedEvents[ev]) == 0 && len(e.accepted[ev.key]) > 0 {
			groups[ev.group] = append(groups[ev.group], ev)
		}
	}
	for _, g := range sortedKeys(groups) {
		evs := groups[g]
		slices.SortFunc(evs, func(a, b *event) int { return a.seq - b.seq })
		rep.FIFOChecked += len(evs)
		for i := 1; i < len(evs); i++ {
			a, b := e.accepted[evs[i-1].key][0], e.accepted[evs[i].key][0]
			if b.At.Before(a.At) {
				rep.violate(evs[i], "FIFO order", fmt.Sprintf("group %s: seq %d first delivered at %s, before seq %d at %s",
					g, evs[i].seq, b.At.Format("15:04:05.000"), evs[i-1].seq, a.At.Format("15:04:05.000")))
			}
		}
	}
	for _, v := range rep.Violations {
		if v.event != nil && len(rep.Details) < 20 && !slices.ContainsFunc(rep.Details, func(d string) bool { return strings.Contains(d, v.event.id) }) {
			rep.Details = append(rep.Details, r.trace(e, v.event))
		}
	}
	r.phase(fmt.Sprintf("done: %d violations", len(rep.Violations)))
	return rep, nil
}

// trace prints everything known about one event: its messages, the
// runner's, the proxy's, the webhook's and the function's lines for it.
func (r *run) trace(e *evidence, ev *event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "event %s (key %q, lane %s, group %q seq %d, poison %t), messages %v\n", ev.id, ev.key, r.lanes[ev.lane].name, ev.group, ev.seq, ev.poison, ev.copies)
	pk := Function + "#" + ev.key
	if rec, ok := e.records[pk]; ok {
		fmt.Fprintf(&b, "  record: %s %s retryable=%t attempts=%d updated %s\n", rec.status, rec.errorCode, rec.retryable, rec.attempts, rec.updatedAt.Format("15:04:05.000"))
	}
	var lines []struct {
		at   time.Time
		text string
	}
	add := func(at time.Time, s string) {
		lines = append(lines, struct {
			at   time.Time
			text string
		}{at, s})
	}
	ids := map[string]bool{}
	for _, id := range ev.copies {
		ids[id] = true
		for _, le := range e.runnerLog[id] {
			add(le.At, le.String())
		}
	}
	for _, pe := range e.proxy[pk] {
		add(pe.At, pe.String())
	}
	for _, d := range e.audit[ev.key] {
		add(d.At, fmt.Sprintf("%s webhook #%d %s accepted=%t reply_lost=%t status=%d", d.At.Format("15:04:05.000"), d.Seq, d.Mode, d.Accepted, d.ReplyLost, d.Status))
	}
	for _, inv := range e.invocations[ev.key] {
		if inv.Failure != "" {
			add(inv.Ended, fmt.Sprintf("%s esm[%s] inv=%d ended: %s", inv.Ended.Format("15:04:05.000"), inv.lane, inv.ID, trim(inv.Failure, 200)))
		}
	}
	r.mu.Lock()
	for _, k := range r.kills {
		for _, inv := range e.invocations[ev.key] {
			if inv.lane == k.Lane && inv.ID == k.Invocation {
				add(k.At, fmt.Sprintf("%s KILL %s slot %d inv %d %s", k.At.Format("15:04:05.000"), k.Lane, k.Slot, k.Invocation, k.MidAction))
			}
		}
	}
	r.mu.Unlock()
	for _, l := range e.fnLines {
		if (ev.key != "" && l.Key == ev.key) || ids[l.MessageID] {
			add(l.At, "fn["+l.Lane+"] "+trim(l.Raw, 400))
		}
	}
	slices.SortStableFunc(lines, func(a, b struct {
		at   time.Time
		text string
	}) int {
		return a.at.Compare(b.at)
	})
	for _, l := range lines {
		b.WriteString("  " + l.text + "\n")
	}
	return b.String()
}
