package soak

import (
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/oncely/oncely/internal/testing/esm"
	"github.com/oncely/oncely/internal/testing/fakewebhook"
	"github.com/oncely/oncely/internal/testing/faults"
)

// Violation is one broken invariant.
type Violation struct {
	Event  string // the event's id; empty when no event is known
	Rule   string
	Detail string
	event  *event
}

// LaneReport is one event source as the run set it up.
type LaneReport struct {
	Name, Queue, DLQ                  string
	FIFO                              bool
	BatchSize, MaxConcurrency         int
	BatchingWindow, VisibilityTimeout time.Duration
	MaxReceiveCount                   int
	Emulators                         int
	Stats                             esm.Stats
}

// Report is what a soak found. Violations is empty exactly when every
// invariant held.
type Report struct {
	Config   Config
	Started  time.Time
	Duration time.Duration
	// Phases are the run's milestones, as offsets from Started.
	Phases          []string
	Lanes           []LaneReport
	FunctionTimeout time.Duration
	FunctionEnv     []string
	RetryWindow     time.Duration

	EventsSent, PoisonSent, MessagesSent, SendErrors int
	// ResentCopies are messages no send returned the id of: copies left
	// by a send the SDK or the producer sent again after a lost or slow
	// reply, matched to their event by body.
	ResentCopies                                 int
	DeliveredOnce, DeliveredTwice, DeliveredMore int
	// Duplicates counts extra deliveries by window; Examples shows a few.
	Duplicates   map[Window]int
	Examples     map[Window][]string
	Unattributed int
	InDLQ        int
	InDLQWhy     map[string]int
	Lost         int
	PoisonNotes  int
	Deleted      int
	FIFOChecked  int

	// ReachedDLQ events had a message moved to a DLQ; Redriven messages
	// were moved back; RedrivenDelivered of those events were delivered.
	ReachedDLQ, Redriven, RedriveRounds, RedrivenDelivered int
	RedriveWhy                                             map[string]int

	Kills, MidActionKills, RuntimeDeaths, Timeouts int
	// StoreP50 and StoreP99 are how long moto's DynamoDB took to answer
	// the requests the proxy forwarded (faults and added latency aside).
	StoreP50, StoreP99 time.Duration
	StoreRequests      int
	StoreFaults        map[faults.Kind]int
	StoreDelays        int
	WebhookModes       map[fakewebhook.Mode]int
	WebhookDeliveries  int
	// FunctionWarnings counts the function's WARN and ERROR log lines by
	// level and message.
	FunctionWarnings map[string]int

	// ChaosEnded, Settled and Finished are offsets from Started.
	ChaosEnded, Settled, Finished time.Duration

	Violations []Violation
	// Details trace the first events that broke an invariant.
	Details []string
}

// OK reports whether every invariant held.
func (rep *Report) OK() bool { return len(rep.Violations) == 0 }

func (rep *Report) violate(ev *event, rule, detail string) {
	rep.Violations = append(rep.Violations, Violation{Event: ev.id, Rule: rule, Detail: detail, event: ev})
}

func (r *run) newReport(e *evidence) *Report {
	rep := &Report{Config: r.cfg, Started: r.start, Duration: time.Since(r.start),
		Duplicates: map[Window]int{}, Examples: map[Window][]string{}, InDLQWhy: map[string]int{}, RedriveWhy: map[string]int{},
		WebhookModes: map[fakewebhook.Mode]int{}, StoreFaults: map[faults.Kind]int{}, FunctionWarnings: map[string]int{},
		FunctionTimeout: r.cfg.Scale.Duration(r.fn.Timeout), FunctionEnv: r.functionEnv(), RetryWindow: r.retryWindow()}
	r.mu.Lock()
	defer r.mu.Unlock()
	type phase struct {
		name string
		at   time.Time
	}
	var phases []phase
	for name, at := range r.phases {
		phases = append(phases, phase{name, at})
	}
	slices.SortFunc(phases, func(a, b phase) int { return a.at.Compare(b.at) })
	for _, p := range phases {
		rep.Phases = append(rep.Phases, fmt.Sprintf("%6.1f s  %s", p.at.Sub(r.start).Seconds(), p.name))
		switch {
		case strings.HasPrefix(p.name, "chaos ends"):
			rep.ChaosEnded = p.at.Sub(r.start)
		case p.name == "settled" || strings.HasPrefix(p.name, "settled after redrive"):
			rep.Settled = p.at.Sub(r.start)
		}
	}
	rep.Finished = time.Since(r.start)
	for _, ln := range r.lanes {
		rep.Lanes = append(rep.Lanes, LaneReport{Name: ln.name, Queue: ln.source.Queue, DLQ: r.tpl.Queues[ln.source.Queue].DLQ,
			FIFO: ln.pair.Source.FIFO, BatchSize: ln.source.BatchSize, MaxConcurrency: ln.source.MaximumConcurrency,
			BatchingWindow: r.cfg.Scale.Duration(ln.source.BatchingWindow), VisibilityTimeout: ln.pair.Source.VisibilityTimeout,
			MaxReceiveCount: ln.pair.Source.MaxReceiveCount, Emulators: len(ln.emus), Stats: ln.runner.Stats()})
	}
	for _, ev := range r.events {
		rep.MessagesSent += len(ev.copies)
	}
	for _, m := range r.moved {
		rep.Redriven++
		rep.RedriveRounds = max(rep.RedriveRounds, m.round)
		if m.why != "" {
			rep.RedriveWhy[m.why]++
		}
	}
	// Redriven copies were appended to the events' messages: they are not sends.
	rep.MessagesSent -= len(r.moved)
	// Re-sent copies were appended too; they are counted on their own.
	rep.ResentCopies = r.resent
	rep.MessagesSent -= r.resent
	rep.SendErrors = len(r.sendErrors)
	for _, k := range r.kills {
		rep.Kills++
		if k.MidAction != "" {
			rep.MidActionKills++
		}
	}
	for _, inv := range r.invocations {
		if ok, how := died(inv.Invocation); ok {
			rep.RuntimeDeaths++
			if how == "timeout" {
				rep.Timeouts++
			}
		}
	}
	counts, total := r.proxy.Counts()
	rep.StoreRequests = total
	for k, n := range counts {
		if k != faults.None {
			rep.StoreFaults[k] = n
		}
	}
	for _, pe := range r.proxy.Events() {
		if pe.Delay > 0 {
			rep.StoreDelays++
		}
	}
	for _, l := range e.fnLines {
		if l.Level == "WARN" || l.Level == "ERROR" {
			rep.FunctionWarnings[l.Level+" "+l.Message]++
		}
	}
	if ft := r.proxy.ForwardTimes(); len(ft) > 0 {
		slices.Sort(ft)
		rep.StoreP50, rep.StoreP99 = ft[len(ft)/2], ft[len(ft)*99/100]
	}
	for _, d := range r.hook.Audit() {
		rep.WebhookDeliveries++
		rep.WebhookModes[d.Mode]++
	}
	return rep
}

// Summary is a few lines for a test log or a terminal.
func (rep *Report) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "events %d (+%d poison), messages sent %d (+%d left by re-sent sends); delivered once %d, twice %d, more %d; in DLQ %d; lost %d\n",
		rep.EventsSent, rep.PoisonSent, rep.MessagesSent, rep.ResentCopies, rep.DeliveredOnce, rep.DeliveredTwice, rep.DeliveredMore, rep.InDLQ, rep.Lost)
	fmt.Fprintf(&b, "duplicates: %s; unattributed %d\n", rep.duplicateLine(), rep.Unattributed)
	fmt.Fprintf(&b, "reached the DLQ %d events, redriven %d messages in %d rounds, %d of those events delivered\n", rep.ReachedDLQ, rep.Redriven, rep.RedriveRounds, rep.RedrivenDelivered)
	fmt.Fprintf(&b, "kills %d (%d mid-action), runtime deaths %d (timeouts %d); store faults %v of %d requests (+%d delayed); webhook %v\n",
		rep.Kills, rep.MidActionKills, rep.RuntimeDeaths, rep.Timeouts, rep.StoreFaults, rep.StoreRequests, rep.StoreDelays, rep.WebhookModes)
	if len(rep.FunctionWarnings) > 0 {
		fmt.Fprintf(&b, "function warnings and errors: %v\n", rep.FunctionWarnings)
	}
	fmt.Fprintf(&b, "moto DynamoDB answered in %v (p50), %v (p99); %s\n", rep.StoreP50.Round(100*time.Microsecond), rep.StoreP99.Round(100*time.Microsecond), rep.sqsLine())
	fmt.Fprintf(&b, "chaos ended at %.1f s, settled at %.1f s, finished at %.1f s; %d violations\n", rep.ChaosEnded.Seconds(), rep.Settled.Seconds(), rep.Finished.Seconds(), len(rep.Violations))
	return b.String()
}

// Failures prints every violation and the traces of the first events that
// broke an invariant.
func (rep *Report) Failures() string {
	var b strings.Builder
	for i, v := range rep.Violations {
		if i == 100 {
			fmt.Fprintf(&b, "... and %d more\n", len(rep.Violations)-100)
			break
		}
		fmt.Fprintf(&b, "VIOLATION %s: %s: %s\n", v.Rule, v.Event, v.Detail)
	}
	for _, d := range rep.Details {
		b.WriteString("\n" + d)
	}
	return b.String()
}

func (rep *Report) sqsLine() string {
	var parts []string
	for _, l := range rep.Lanes {
		mean := time.Duration(0)
		if l.Stats.SQSCalls > 0 {
			mean = l.Stats.SQSTime / time.Duration(l.Stats.SQSCalls)
		}
		parts = append(parts, fmt.Sprintf("%s: %d SQS calls by the runner, %v mean, %v longest", l.Name, l.Stats.SQSCalls, mean.Round(100*time.Microsecond), l.Stats.SQSMax.Round(time.Millisecond)))
	}
	return strings.Join(parts, "; ")
}

func (rep *Report) duplicateLine() string {
	var parts []string
	for _, w := range []Window{WindowCompletion, WindowCrash, WindowReplyLost} {
		parts = append(parts, fmt.Sprintf("(%s) %d", w, rep.Duplicates[w]))
	}
	return strings.Join(parts, ", ")
}

// Markdown renders RELIABILITY.md.
func (rep *Report) Markdown(machine string) string {
	c := rep.Config
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("# Reliability\n\n")
	w("Regenerate with `make soak` (it installs moto and the emulator, builds the bootstrap, starts moto's DynamoDB and SQS, and runs `go run ./cmd/soak`). `make test` runs the same soak with 300 events (`internal/e2e`, `TestSoak`).\n\n")
	w("- Run: %s, %s, %s\n", rep.Started.UTC().Format(time.RFC3339), machine, runtime.Version())
	w("- Seed: %d. The producer, the fault proxy, the webhook's chaos and the kills draw from it; the interleaving of a concurrent run is not reproducible, the fault mix is.\n", c.Seed)
	verdict := "**all invariants held**"
	if !rep.OK() {
		verdict = fmt.Sprintf("**%d invariant violations** (listed below)", len(rep.Violations))
	}
	w("- Result: %s.\n\n", verdict)

	w("## Outcome\n\n| | count |\n|---|---|\n")
	w("| events sent (each twice) | %d |\n", rep.EventsSent)
	w("| poison messages sent (each twice; noted, acknowledged, never delivered) | %d (%d poison notes) |\n", rep.PoisonSent, rep.PoisonNotes)
	w("| messages sent | %d (send errors: %d; %d more copies left by sends re-sent after a lost or slow reply, matched to their events by body) |\n", rep.MessagesSent, rep.SendErrors, rep.ResentCopies)
	w("| delivered once | %d |\n", rep.DeliveredOnce)
	w("| delivered twice (every extra delivery attributed below) | %d |\n", rep.DeliveredTwice)
	w("| delivered three times or more | %d |\n", rep.DeliveredMore)
	w("| in a DLQ at the end, with a record saying why | %d |\n", rep.InDLQ)
	w("| **lost** (neither delivered nor in a DLQ) | **%d** |\n", rep.Lost)
	w("| messages deleted by the event source mapping, each checked for a final record written before the delete | %d |\n", rep.Deleted)
	w("| FIFO events checked for group order | %d |\n\n", rep.FIFOChecked)

	w("### Duplicate deliveries, by documented window\n\n| window | extra deliveries | example |\n|---|---|---|\n")
	for _, win := range []Window{WindowCompletion, WindowCrash, WindowReplyLost} {
		ex := "—"
		if len(rep.Examples[win]) > 0 {
			ex = "`" + strings.ReplaceAll(trim(rep.Examples[win][0], 220), "|", "\\|") + "`"
		}
		w("| %s | %d | %s |\n", win, rep.Duplicates[win], ex)
	}
	w("| **unattributed** | **%d** | |\n\n", rep.Unattributed)

	w("### Dead-letter queues and redrive\n\n")
	w("- Events with a message moved to a DLQ: %d (the webhook's full outage of %v outlasted the queue's retry window of at most %v).\n", rep.ReachedDLQ, c.Outage.Round(time.Second), rep.RetryWindow)
	w("- Redrive (receive from the DLQ, send to the source: moto has no `StartMessageMoveTask`): %d messages in %d rounds; %d of those events delivered afterwards; %d events still in a DLQ at the end.\n", rep.Redriven, rep.RedriveRounds, rep.RedrivenDelivered, rep.InDLQ)
	if len(rep.RedriveWhy) > 0 {
		w("- What the record of each redriven message's key said at the redrive (`SUCCEEDED`: the event's other copy was delivered, and the redriven copy is replayed; `no record`: a FIFO message never started, held behind its group's failing head):\n")
		for _, k := range sortedKeys(rep.RedriveWhy) {
			w("  - `%s`: %d\n", k, rep.RedriveWhy[k])
		}
	}
	if len(rep.InDLQWhy) > 0 {
		w("- Records of the events left in a DLQ:\n")
		for _, k := range sortedKeys(rep.InDLQWhy) {
			w("  - `%s`: %d\n", k, rep.InDLQWhy[k])
		}
	}
	w("\n## Faults injected\n\n| fault | count |\n|---|---|\n")
	w("| DynamoDB requests through the fault proxy | %d |\n", rep.StoreRequests)
	for _, k := range slices.Sorted(maps.Keys(rep.StoreFaults)) {
		w("| DynamoDB: %s | %d |\n", storeFaultName(k), rep.StoreFaults[k])
	}
	w("| DynamoDB: latency added (up to %v) | %d |\n", c.Store.LatencyMax, rep.StoreDelays)
	w("| webhook deliveries | %d |\n", rep.WebhookDeliveries)
	for _, m := range slices.Sorted(maps.Keys(rep.WebhookModes)) {
		w("| webhook: %s | %d |\n", m, rep.WebhookModes[m])
	}
	w("| runtime SIGKILLs (at random moments) | %d |\n", rep.Kills-rep.MidActionKills)
	w("| runtime SIGKILLs right after the webhook accepted, before the reply | %d |\n", rep.MidActionKills)
	w("| invocations whose runtime died (crashes survived) | %d |\n", rep.RuntimeDeaths)
	w("| of those, the function's own timeout | %d |\n\n", rep.Timeouts)

	if len(rep.FunctionWarnings) > 0 {
		w("The function's own warnings and errors (its JSON log), by message:\n\n| level and message | lines |\n|---|---|\n")
		for _, k := range sortedKeys(rep.FunctionWarnings) {
			w("| %s | %d |\n", strings.ReplaceAll(k, "|", "\\|"), rep.FunctionWarnings[k])
		}
		w("\n")
	}
	w("## Time\n\n")
	w("- Chaos phase (sending, the outage, the kills) ended at %.1f s; the queues were empty at %.1f s (after the last redrive); the run, analysis included, took %.1f s.\n", rep.ChaosEnded.Seconds(), rep.Settled.Seconds(), rep.Finished.Seconds())
	w("- Time to settle after the chaos: %.1f s.\n", (rep.Settled - rep.ChaosEnded).Seconds())
	w("- moto's DynamoDB answered the forwarded requests in %v (p50) and %v (p99); %s.\n\n", rep.StoreP50.Round(100*time.Microsecond), rep.StoreP99.Round(100*time.Microsecond), rep.sqsLine())
	w("```\n%s\n```\n\n", strings.Join(rep.Phases, "\n"))

	w("## Configuration\n\n")
	w("Queues, event source mappings and the function's environment come from `template.yaml` (internal/testing/samtemplate); times are divided by %d. The runner is internal/testing/esm (what it does not emulate is in its package doc).\n\n", c.Scale)
	w("| event source | queue | FIFO | batch | window | max concurrency | visibility | maxReceiveCount | emulators |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, l := range rep.Lanes {
		w("| %s | %s (DLQ %s) | %t | %d | %v | %d | %v | %d | %d |\n", l.Name, l.Queue, l.DLQ, l.FIFO, l.BatchSize, l.BatchingWindow, l.MaxConcurrency, l.VisibilityTimeout, l.MaxReceiveCount, l.Emulators)
	}
	w("\n- Function timeout: %v. Environment (the template's literal values, then the soak's overrides):\n\n```\n%s\n```\n\n", rep.FunctionTimeout, strings.Join(rep.FunctionEnv, "\n"))
	w("- Producer: %d events at %.0f events/s, %.0f%% on the FIFO queue in %d groups, %.1f%% poison; the second copy of %.0f%% of the events sent at the same moment as the first, the others within %v (FIFO copies carry distinct deduplication ids).\n",
		c.Events, c.SendRate, c.FIFOShare*100, c.FIFOGroups, c.PoisonShare*100, c.ConcurrentCopies*100, c.LateCopy)
	s := c.Store
	w("- DynamoDB fault proxy, per request: throttle %.1f%%, HTTP 500 %.1f%%, HTTP 503 %.1f%%, connection reset before forwarding %.1f%%, reply dropped after the write %.1f%%; latency up to %v on %.1f%%.\n",
		s.Throttle*100, s.ServerError*100, s.Unavailable*100, s.Reset*100, s.DropReply*100, s.LatencyMax, s.Latency*100)
	h := c.Webhook
	w("- Webhook, per delivery: 503 %.1f%%, 429 with Retry-After %s s %.1f%%, hang after accepting %.1f%%, reset before accepting %.1f%%, reset after accepting %.1f%%; one full outage (503) from %v for %v.\n",
		h.Unavailable*100, h.RetryAfter, h.Throttled*100, h.Hang*100, h.ResetBefore*100, h.ResetAfter*100, c.OutageAfter.Round(100*time.Millisecond), c.Outage.Round(time.Second))
	w("- Kills: a busy runtime every %v to %v while the chaos lasts, and %.1f%% of accepted deliveries have their sender killed before the reply.\n\n", c.KillEvery[0], c.KillEvery[1], c.MidActionKill*100)

	w("## What is checked\n\n")
	w("- Every event is delivered to the webhook, or sits in a DLQ with a record saying why; otherwise it is **lost**.\n")
	w("- Every message the runner deleted had, before the delete, a final record for its key (`SUCCEEDED`, or `FAILED` not retryable) or a poison note for it (`updated_at` ≤ the delete).\n")
	w("- Every extra delivery of an event is explained by one documented window, from the evidence: (2) an invocation carrying the event was in flight at the earlier delivery and its runtime died (or it died at most %v before the webhook read that delivery, and no carrier was in flight then: the request was in the socket); (3) the webhook's audit log says it accepted the earlier delivery and the reply was lost; (1) the function logged that the completion write for the key failed for good or was fenced off after a take-over (`lease lost`), either between the two deliveries or from the invocation that was carrying the event at the earlier delivery (a completion still in flight when the lease ended fails after the take-over's delivery). (4), an abandoned action still running when a redelivery took its key over, has no rule of its own: the soak's action (`notify`) ends its request with its context, so none is abandoned unless the machine stalls it past the grace; if one is, its late return is fenced off and logged as `lease lost`, which (1) counts when it was logged before the second delivery, and otherwise the duplicate is unattributed and fails the soak (the function's `action abandoned` line for the key says which window it was). Anything else fails the soak. The webhook does not de-duplicate.\n", senderGone)
	w("- The events of a FIFO group are first delivered in the order they were sent (events that went through a DLQ are left out: the group went on without them).\n")
	if !rep.OK() {
		w("\n## Violations\n\n```\n%s```\n", rep.Failures())
	}
	return b.String()
}

func storeFaultName(k faults.Kind) string {
	switch k {
	case faults.Throttle:
		return "throttled (ThrottlingException)"
	case faults.ServerError:
		return "HTTP 500 (InternalServerError)"
	case faults.Unavailable:
		return "HTTP 503 (ServiceUnavailable)"
	case faults.Reset:
		return "connection reset before forwarding"
	case faults.DropReply:
		return "reply dropped after the write (outcome unknown)"
	}
	return string(k)
}
