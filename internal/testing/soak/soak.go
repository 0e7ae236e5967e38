// Package soak is the chaos soak: N events sent twice each to the local
// queues of template.yaml, processed by the real bootstrap under the
// Runtime Interface Emulator through the event-source-mapping runner,
// while a fault proxy in front of DynamoDB, a chaotic webhook with one
// full outage, and SIGKILLs of the runtime do their worst. When the queues
// are empty (and the dead-letter queues redriven) it checks, per event:
//
//   - it was delivered to the webhook, or is in a DLQ with a record saying
//     why: nothing is lost;
//   - no message was deleted from a queue before a final record for its key
//     (or a poison note for it) was written;
//   - every duplicate delivery falls in a documented window: (1) the
//     completion write did not land after the side effect, (2) the runtime
//     died after the side effect and before the completion landed, (3) the
//     webhook accepted the delivery but its reply was lost;
//   - a FIFO group's events were delivered in order.
//
// `make soak` runs it with 5,000 events and writes RELIABILITY.md (cmd/soak);
// `make test` runs 300 (internal/e2e). It is test support; no shipped
// command links it.
package soak

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/oncely/oncely/internal/ddbstore"
	"github.com/oncely/oncely/internal/sqsvisibility"
	"github.com/oncely/oncely/internal/testing/ddblocal"
	"github.com/oncely/oncely/internal/testing/esm"
	"github.com/oncely/oncely/internal/testing/fakewebhook"
	"github.com/oncely/oncely/internal/testing/faults"
	"github.com/oncely/oncely/internal/testing/rie"
	"github.com/oncely/oncely/internal/testing/samtemplate"
	"github.com/oncely/oncely/internal/testing/sqslocal"
)

// StoreFaults are the fault proxy's probabilities per DynamoDB request.
type StoreFaults struct {
	Throttle, ServerError, Unavailable float64
	// Reset drops the connection before forwarding; DropReply forwards,
	// lets the write land, and drops the reply (outcome unknown).
	Reset, DropReply float64
	// Latency adds a delay, uniform in (0, LatencyMax], independently of
	// the other faults.
	Latency    float64
	LatencyMax time.Duration
}

// Config is one soak run; start from Default. Run refuses a Config it
// cannot run (see check).
type Config struct {
	Events int
	Seed   uint64
	// RIE and Bootstrap run the function; Template is template.yaml.
	RIE, Bootstrap, Template string
	// DynamoDB and SQS are the local servers' endpoints.
	DynamoDB, SQS string
	// Scale divides the template's function timeout, visibility timeouts
	// and batching windows.
	Scale sqslocal.Scale
	// Env overrides the template's environment (short leases, a short
	// request timeout, scaled-down queue backoff).
	Env map[string]string
	// SendRate is events per second (each sent twice).
	SendRate float64
	// FIFOShare of the events go to the FIFO queue, in FIFOGroups groups;
	// PoisonShare are not events at all.
	FIFOShare   float64
	FIFOGroups  int
	PoisonShare float64
	// ConcurrentCopies is the share of events whose second copy is sent at
	// the same moment as the first; the others' follow within LateCopy.
	ConcurrentCopies float64
	LateCopy         time.Duration
	Store            StoreFaults
	Webhook          fakewebhook.Chaos
	// OutageAfter is when (after the first send) the webhook's full
	// outage starts; zero means a quarter into the sending. Outage is how
	// long it lasts; zero means twice the queue's retry window (every
	// receive up to maxReceiveCount failing at the longest backoff), so
	// that messages first received early in the outage reach the DLQ even
	// when a loaded machine stretches each receive's turn.
	OutageAfter, Outage time.Duration
	// KillEvery bounds the pause between random kills of a busy runtime;
	// MidActionKill is the chance that an accepted webhook delivery has its
	// sender killed before the reply, and MinMidActionKills makes sure of a
	// few: until that many happened, every accepted delivery has its
	// sender killed.
	KillEvery         [2]time.Duration
	MidActionKill     float64
	MinMidActionKills int
	// Settle bounds each wait for the queues to empty.
	Settle time.Duration
	// RedriveRounds bounds the redrives of the DLQs.
	RedriveRounds int
	// Log receives progress lines.
	Log io.Writer
}

// Default returns the configuration `make soak` uses for n events.
func Default(n int) Config {
	return Config{
		Events: n, Seed: 12, Template: "template.yaml", Scale: 10,
		Env: map[string]string{
			"IDEMPOTENCY_LEASE":        "2s",
			"NOTIFY_TIMEOUT":           "1s",
			"IDEMPOTENCY_BACKOFF_BASE": "10ms",
			"IDEMPOTENCY_BACKOFF_MAX":  "50ms",
			"SQS_BACKOFF_BASE":         "1s",
			"SQS_BACKOFF_MAX":          "2s",
		},
		SendRate: 30, FIFOShare: 0.2, FIFOGroups: 8, PoisonShare: 0.01,
		ConcurrentCopies: 0.5, LateCopy: 3 * time.Second,
		Store: StoreFaults{Throttle: 0.02, ServerError: 0.01, Unavailable: 0.01, Reset: 0.01, DropReply: 0.01,
			Latency: 0.03, LatencyMax: 300 * time.Millisecond},
		Webhook:   fakewebhook.Chaos{Unavailable: 0.03, Throttled: 0.02, Hang: 0.005, ResetBefore: 0.01, ResetAfter: 0.005, RetryAfter: "1"},
		KillEvery: [2]time.Duration{2 * time.Second, 6 * time.Second}, MidActionKill: 0.003, MinMidActionKills: 2,
		Settle: 3 * time.Minute, RedriveRounds: 3,
	}
}

// Function is the name the function runs under, so its records are
// "<Function>#<key>".
const Function = "oncely-soak"

// lane is one event source: its queues, runner and emulators.
type lane struct {
	name   string
	source samtemplate.EventSource
	pair   sqslocal.Pair
	runner *esm.Runner
	emus   []*rie.Emulator
}

// event is one business event (or one poison message) the producer sends.
type event struct {
	n      int
	id     string // the body's id
	key    string // the idempotency key; "" for poison
	body   string
	lane   int
	group  string
	seq    int // order within its FIFO group
	poison bool
	copies []string // message ids, the redriven ones included
}

// kill is one SIGKILL of a runtime.
type kill struct {
	At         time.Time
	Lane       string
	Slot       int
	Invocation int64
	MidAction  string // the key whose delivery was accepted, for a mid-action kill
}

// run is the state of one soak.
type run struct {
	cfg       Config
	tpl       *samtemplate.Template
	fn        samtemplate.Function
	sqs       *sqs.Client
	ddb       *dynamodb.Client
	table     string
	proxy     *faults.Proxy
	hook      *fakewebhook.Server
	lanes     []*lane
	events    []*event
	byMessage sync.Map // message id -> *event
	start     time.Time
	logf      func(format string, args ...any)

	mu          sync.Mutex
	kills       []kill
	invocations []laneInvocation
	moved       []movedMessage
	sendErrors  []string
	resent      int // messages adopted by their body (adoptResentCopies)
	phases      map[string]time.Time
	chaos       atomic.Bool // kills only while the chaos phase lasts
	killRand    *rand.Rand
	stops       []func()
}

type laneInvocation struct {
	lane string
	esm.Invocation
}

type movedMessage struct {
	sqslocal.Moved
	lane  string
	round int
	why   string // the record's state when it was redriven
}

// check refuses what Run cannot run, naming the field.
func (c *Config) check() error {
	switch {
	case c.Events <= 0:
		return fmt.Errorf("soak: Events is %d; want at least 1", c.Events)
	case c.Template == "" || c.Scale <= 0 || c.SendRate <= 0 || c.FIFOGroups <= 0 || c.Settle <= 0 || c.RedriveRounds <= 0:
		return errors.New("soak: Template, Scale, SendRate, FIFOGroups, Settle and RedriveRounds must be set: start from Default")
	case c.KillEvery[0] <= 0 || c.KillEvery[0] > c.KillEvery[1]:
		return fmt.Errorf("soak: KillEvery is %v; want 0 < min <= max", c.KillEvery)
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	return nil
}

// Run runs one soak and returns its report. An error means the soak could
// not run (a server missing, the template unreadable); a run whose
// invariants broke returns a report with Violations.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	r := &run{cfg: cfg, phases: map[string]time.Time{}, killRand: rand.New(rand.NewPCG(cfg.Seed, 3))}
	r.logf = func(format string, args ...any) {
		fmt.Fprintf(cfg.Log, "soak %6.1fs  %s\n", time.Since(r.start).Seconds(), fmt.Sprintf(format, args...))
	}
	r.start = time.Now()
	defer r.stop()
	if err := r.setUp(ctx); err != nil {
		return nil, err
	}
	if err := r.drive(ctx); err != nil {
		return nil, err
	}
	return r.analyze(ctx)
}

func (r *run) phase(name string) {
	r.mu.Lock()
	r.phases[name] = time.Now()
	r.mu.Unlock()
	r.logf("%s", name)
}

func (r *run) setUp(ctx context.Context) error {
	var err error
	if r.cfg.RIE == "" || r.cfg.Bootstrap == "" || r.cfg.DynamoDB == "" || r.cfg.SQS == "" {
		return errors.New("soak: RIE, Bootstrap, DynamoDB and SQS are required")
	}
	if r.tpl, err = samtemplate.Load(r.cfg.Template); err != nil {
		return fmt.Errorf("soak: %w", err)
	}
	if len(r.tpl.Sources) == 0 {
		return fmt.Errorf("soak: %s has no SQS event source", r.cfg.Template)
	}
	r.fn = r.tpl.Functions[r.tpl.Sources[0].Function]
	r.sqs = sqslocal.Client(r.cfg.SQS)
	r.ddb, _ = ddblocal.Client(ddblocal.Config(r.cfg.DynamoDB, nil))
	r.table = fmt.Sprintf("oncely-soak-%d-%d", r.cfg.Seed, time.Now().UnixNano())
	if _, err := ddbstore.CreateTable(ctx, r.ddb, r.table); err != nil && !errors.Is(err, ddbstore.ErrNoTTL) {
		return fmt.Errorf("soak: %w", err)
	}

	storeRand := rand.New(rand.NewPCG(r.cfg.Seed, 1))
	var storeMu sync.Mutex
	r.proxy = &faults.Proxy{Target: r.cfg.DynamoDB, Describe: ddblocal.Describe, Replies: ddblocal.Replies,
		Decide: func(op, key string) faults.Decision {
			if !slices.Contains(ddblocal.StoreOperations, op) {
				return faults.Decision{}
			}
			storeMu.Lock()
			defer storeMu.Unlock()
			return r.cfg.Store.decide(storeRand)
		}}
	proxyURL, err := r.proxy.Start()
	if err != nil {
		return err
	}

	r.hook = fakewebhook.New()
	chaos := r.cfg.Webhook
	chaos.Seed = r.cfg.Seed
	r.hook.SetChaos(&chaos)
	r.hook.OnAccept(r.midActionKill)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: r.hook, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	r.onStop(func() { r.hook.Close(); _ = srv.Close() })

	prefix := fmt.Sprintf("soak%d-%x", r.cfg.Seed, time.Now().UnixNano()&0xffffff)
	for _, s := range r.tpl.Sources {
		ln := &lane{name: s.Name, source: s}
		if ln.pair, err = sqslocal.CreatePair(ctx, r.sqs, r.tpl, s.Queue, prefix, r.cfg.Scale); err != nil {
			return err
		}
		env := rie.Local{DynamoDB: proxyURL, SQS: r.cfg.SQS, Table: r.table, DownstreamURL: "http://" + l.Addr().String() + "/webhook",
			Name: Function, TimeoutSeconds: r.cfg.Scale.Seconds(r.fn.Timeout), Extra: r.functionEnv()}.Env()
		var invokers []esm.Invoker
		for range s.MaximumConcurrency {
			emu, err := rie.Start(rie.Options{RIE: r.cfg.RIE, Bootstrap: r.cfg.Bootstrap, Env: env})
			if err != nil {
				return err
			}
			r.onStop(emu.Stop)
			ln.emus = append(ln.emus, emu)
			invokers = append(invokers, emu)
		}
		name := ln.name
		ln.runner, err = esm.New(r.sqs, esm.Config{
			QueueURL: ln.pair.Source.URL, QueueARN: ln.pair.Source.ARN, Region: sqslocal.Region, FIFO: ln.pair.Source.FIFO,
			BatchSize: s.BatchSize, BatchingWindow: r.cfg.Scale.Duration(s.BatchingWindow), MaximumConcurrency: s.MaximumConcurrency,
			ReportBatchItemFailures: s.ReportBatchItemFailures, Name: name,
			OnInvocation: func(inv esm.Invocation) {
				r.mu.Lock()
				r.invocations = append(r.invocations, laneInvocation{lane: name, Invocation: inv})
				r.mu.Unlock()
			},
		}, invokers)
		if err != nil {
			return err
		}
		r.lanes = append(r.lanes, ln)
	}
	r.logf("table %s, proxy %s -> %s, SQS %s, %d lanes, %d emulators", r.table, proxyURL, r.cfg.DynamoDB, r.cfg.SQS, len(r.lanes), r.emulators())
	return nil
}

func (r *run) emulators() int {
	n := 0
	for _, ln := range r.lanes {
		n += len(ln.emus)
	}
	return n
}

// functionEnv is the template's literal environment, minus what the run
// sets itself, plus the overrides.
func (r *run) functionEnv() []string {
	env := map[string]string{}
	for k, v := range r.fn.Env {
		if v == "" || strings.HasPrefix(k, "AWS_") || k == "DOWNSTREAM_URL" || k == "IDEMPOTENCY_TABLE" {
			continue
		}
		env[k] = v
	}
	// The template signs with a secret it creates; the soak's receiver
	// does not verify (internal/e2e checks signatures), so deliveries go
	// unsigned unless the configuration says otherwise.
	env["WEBHOOK_SIGNING"] = "off"
	for k, v := range r.cfg.Env {
		env[k] = v
	}
	env["AWS_LAMBDA_LOG_FORMAT"] = "JSON"
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}

func (r *run) onStop(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stops = append(r.stops, f)
}

// stop ends everything the run started: emulators, servers, the proxy.
func (r *run) stop() {
	r.mu.Lock()
	fs := r.stops
	r.stops = nil
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, f := range fs {
		wg.Go(f)
	}
	wg.Wait()
	if r.proxy != nil {
		_ = r.proxy.Close()
	}
}

func (s StoreFaults) decide(rng *rand.Rand) faults.Decision {
	var d faults.Decision
	if rng.Float64() < s.Latency && s.LatencyMax > 0 {
		d.Delay = time.Duration(rng.Int64N(int64(s.LatencyMax))) + time.Millisecond
	}
	x := rng.Float64()
	for _, k := range []struct {
		p    float64
		kind faults.Kind
	}{{s.Throttle, faults.Throttle}, {s.ServerError, faults.ServerError}, {s.Unavailable, faults.Unavailable}, {s.Reset, faults.Reset}, {s.DropReply, faults.DropReply}} {
		if x < k.p {
			d.Kind = k.kind
			return d
		}
		x -= k.p
	}
	return d
}

// retryWindow is the longest a message can fail before its queue moves it
// to the DLQ: every receive at the longest backoff.
func (r *run) retryWindow() time.Duration {
	base, _ := time.ParseDuration(r.cfg.Env["SQS_BACKOFF_BASE"])
	maxd, _ := time.ParseDuration(r.cfg.Env["SQS_BACKOFF_MAX"])
	longest := time.Duration(0)
	for _, ln := range r.lanes {
		_, l := sqsvisibility.Policy{Base: base, Max: maxd}.Range(ln.pair.Source.MaxReceiveCount)
		longest = max(longest, l)
	}
	return longest
}

// drive runs the producer, the outage, the kills, the settling and the
// redrives.
func (r *run) drive(ctx context.Context) error {
	rctx, cancel := context.WithCancel(ctx)
	var runners sync.WaitGroup
	for _, ln := range r.lanes {
		runners.Go(func() { _ = ln.runner.Run(rctx) })
	}
	defer func() { cancel(); runners.Wait() }()
	if r.cfg.Outage <= 0 {
		r.cfg.Outage = 2 * r.retryWindow()
	}
	if r.cfg.OutageAfter <= 0 {
		r.cfg.OutageAfter = time.Duration(float64(r.cfg.Events) / r.cfg.SendRate / 4 * float64(time.Second))
	}
	r.chaos.Store(true)
	r.phase("sending")
	outageDone := make(chan struct{})
	go func() {
		defer close(outageDone)
		if !sleep(ctx, r.cfg.OutageAfter) {
			return
		}
		r.hook.SetOutage(true)
		r.phase(fmt.Sprintf("webhook outage starts (%v, longer than the retry window)", r.cfg.Outage))
		sleep(ctx, r.cfg.Outage)
		r.hook.SetOutage(false)
		r.phase("webhook outage ends")
	}()
	killDone := make(chan struct{})
	go func() { defer close(killDone); r.randomKills(ctx) }()
	progressDone := make(chan struct{})
	pctx, stopProgress := context.WithCancel(ctx)
	go func() { defer close(progressDone); r.progress(pctx) }()
	defer func() { stopProgress(); <-progressDone }()

	if err := r.produce(ctx); err != nil {
		return err
	}
	r.phase("all events sent")
	<-outageDone
	r.chaos.Store(false)
	<-killDone
	r.phase("chaos ends (webhook chaos and store faults go on)")
	if err := r.settle(ctx, "settled"); err != nil {
		return err
	}
	for round := 1; round <= r.cfg.RedriveRounds; round++ {
		n, err := r.redrive(ctx, round)
		if err != nil {
			return err
		}
		if n == 0 {
			break
		}
		if err := r.settle(ctx, fmt.Sprintf("settled after redrive %d", round)); err != nil {
			return err
		}
	}
	return nil
}

func (r *run) progress(ctx context.Context) {
	for sleep(ctx, 5*time.Second) {
		var depth []string
		for _, ln := range r.lanes {
			s, _ := sqslocal.Count(ctx, r.sqs, ln.pair.Source.URL)
			d, _ := sqslocal.Count(ctx, r.sqs, ln.pair.DLQ.URL)
			depth = append(depth, fmt.Sprintf("%s %d+%d in flight, DLQ %d", ln.name, s.Visible+s.Delayed, s.InFlight, d.Total()))
		}
		r.mu.Lock()
		kills := len(r.kills)
		r.mu.Unlock()
		r.logf("accepted %d, %s, kills %d", len(r.hook.Accepted()), strings.Join(depth, "; "), kills)
	}
}

// produce sends every event twice, at SendRate.
func (r *run) produce(ctx context.Context) error {
	rng := rand.New(rand.NewPCG(r.cfg.Seed, 2))
	var fifo, standard []int
	for i, ln := range r.lanes {
		if ln.pair.Source.FIFO {
			fifo = append(fifo, i)
		} else {
			standard = append(standard, i)
		}
	}
	if len(standard) == 0 {
		return errors.New("soak: the template has no standard queue source")
	}
	seqs := map[string]int{}
	for n := range r.cfg.Events {
		ev := &event{n: n, id: fmt.Sprintf("soak-%d-%05d", r.cfg.Seed, n), lane: standard[n%len(standard)]}
		if len(fifo) > 0 && rng.Float64() < r.cfg.FIFOShare {
			ev.lane = fifo[n%len(fifo)]
			ev.group = fmt.Sprintf("g%d", rng.IntN(r.cfg.FIFOGroups))
			ev.seq = seqs[ev.group]
			seqs[ev.group]++
		}
		switch {
		case rng.Float64() < r.cfg.PoisonShare:
			ev.poison = true
			if n%2 == 0 {
				ev.body = fmt.Sprintf("not json %d", n)
			} else {
				ev.body = fmt.Sprintf(`{"id":"","action":"notify","n":%d}`, n)
			}
		default:
			ev.key = "evt:" + ev.id + ":notify"
			ev.body = fmt.Sprintf(`{"id":%q,"action":"notify","group":%q,"seq":%d}`, ev.id, ev.group, ev.seq)
		}
		r.events = append(r.events, ev)
	}
	interval := time.Duration(float64(time.Second) / r.cfg.SendRate)
	var late sync.WaitGroup
	defer late.Wait()
	next := time.Now()
	for _, ev := range r.events {
		if !sleep(ctx, time.Until(next)) {
			return ctx.Err()
		}
		next = next.Add(interval)
		concurrent := rng.Float64() < r.cfg.ConcurrentCopies
		delay := time.Duration(rng.Int64N(int64(r.cfg.LateCopy)))
		copy2 := make(chan struct{})
		late.Go(func() {
			if concurrent {
				<-copy2 // the same moment as the first copy
			} else if !sleep(ctx, delay) {
				return
			}
			r.send(ctx, ev, 2)
		})
		close(copy2)
		r.send(ctx, ev, 1) // in order: a FIFO group's first copies go out in sequence
	}
	return nil
}

func (r *run) send(ctx context.Context, ev *event, copy int) {
	ln := r.lanes[ev.lane]
	in := &sqs.SendMessageInput{QueueUrl: aws.String(ln.pair.Source.URL), MessageBody: aws.String(ev.body)}
	if ln.pair.Source.FIFO {
		// Distinct deduplication ids, or SQS would drop the second copy.
		in.MessageGroupId = aws.String(ev.group)
		if ev.group == "" {
			in.MessageGroupId = aws.String("poison")
		}
		in.MessageDeduplicationId = aws.String(fmt.Sprintf("%s-c%d", ev.id, copy))
	}
	for attempt := 1; ; attempt++ {
		out, err := r.sqs.SendMessage(ctx, in)
		if err == nil {
			id := aws.ToString(out.MessageId)
			r.byMessage.Store(id, ev)
			r.mu.Lock()
			ev.copies = append(ev.copies, id)
			r.mu.Unlock()
			return
		}
		if attempt == 5 || ctx.Err() != nil {
			r.mu.Lock()
			r.sendErrors = append(r.sendErrors, fmt.Sprintf("event %s copy %d: %v", ev.id, copy, err))
			r.mu.Unlock()
			return
		}
		sleep(ctx, 100*time.Millisecond)
	}
}

// randomKills SIGKILLs a busy runtime now and then, while the chaos lasts.
func (r *run) randomKills(ctx context.Context) {
	for r.chaos.Load() {
		r.mu.Lock()
		lo, hi := r.cfg.KillEvery[0], r.cfg.KillEvery[1]
		wait := lo + time.Duration(r.killRand.Int64N(int64(hi-lo)+1))
		r.mu.Unlock()
		if !sleep(ctx, wait) {
			return
		}
		var busy []struct {
			ln *lane
			f  esm.Flight
		}
		for _, ln := range r.lanes {
			for _, f := range ln.runner.InFlight() {
				busy = append(busy, struct {
					ln *lane
					f  esm.Flight
				}{ln, f})
			}
		}
		if len(busy) == 0 || !r.chaos.Load() {
			continue
		}
		r.mu.Lock()
		b := busy[r.killRand.IntN(len(busy))]
		r.mu.Unlock()
		r.kill(b.ln, b.f, "")
	}
}

// midActionKill kills the runtime whose delivery of d.Key the webhook just
// accepted, before it gets the reply: a crash after the side effect.
func (r *run) midActionKill(d fakewebhook.Delivery) {
	if !r.chaos.Load() {
		return
	}
	r.mu.Lock()
	mid := 0
	for _, k := range r.kills {
		if k.MidAction != "" {
			mid++
		}
	}
	hit := r.killRand.Float64() < r.cfg.MidActionKill || mid < r.cfg.MinMidActionKills
	r.mu.Unlock()
	if !hit {
		return
	}
	for _, ln := range r.lanes {
		for _, f := range ln.runner.InFlight() {
			for _, b := range f.Bodies {
				if strings.Contains(b, `"id":"`+strings.TrimSuffix(strings.TrimPrefix(d.Key, "evt:"), ":notify")+`"`) {
					r.kill(ln, f, d.Key)
					return
				}
			}
		}
	}
}

func (r *run) kill(ln *lane, f esm.Flight, midAction string) {
	if err := ln.emus[f.Slot].KillRuntime(); err != nil {
		return // the runtime ended or had not started: nothing killed
	}
	r.mu.Lock()
	r.kills = append(r.kills, kill{At: time.Now(), Lane: ln.name, Slot: f.Slot, Invocation: f.Invocation, MidAction: midAction})
	r.mu.Unlock()
}

// settle waits until every source queue is empty and no batch is in
// flight, or the Settle bound passes.
func (r *run) settle(ctx context.Context, name string) error {
	deadline := time.Now().Add(r.cfg.Settle)
	for empty := 0; empty < 2; {
		if time.Now().After(deadline) {
			r.phase(name + ": NOT settled within the bound")
			return nil
		}
		if !sleep(ctx, 250*time.Millisecond) {
			return ctx.Err()
		}
		total := 0
		for _, ln := range r.lanes {
			d, err := sqslocal.Count(ctx, r.sqs, ln.pair.Source.URL)
			if err != nil {
				return err
			}
			total += d.Total()
			if ln.runner.Busy() {
				total++
			}
		}
		if total == 0 {
			empty++
		} else {
			empty = 0
		}
	}
	r.phase(name)
	return nil
}

// redrive moves every DLQ's messages back to its source queue, noting the
// record each message's key had.
func (r *run) redrive(ctx context.Context, round int) (int, error) {
	n := 0
	for _, ln := range r.lanes {
		// What the record says while the message is still in the DLQ (the
		// runner delivers redriven messages at once).
		why := map[string]string{}
		moved, err := sqslocal.Redrive(ctx, r.sqs, ln.pair, func(m sqslocal.Moved) {
			if ev := r.eventOf(m.OldID); ev != nil {
				why[m.OldID] = r.recordSummary(ctx, ev)
			}
		})
		for _, m := range moved {
			mm := movedMessage{Moved: m, lane: ln.name, round: round, why: why[m.OldID]}
			if v, ok := r.byMessage.Load(m.OldID); ok {
				ev := v.(*event)
				r.byMessage.Store(m.NewID, ev)
				r.mu.Lock()
				ev.copies = append(ev.copies, m.NewID)
				r.mu.Unlock()
			}
			r.mu.Lock()
			r.moved = append(r.moved, mm)
			r.mu.Unlock()
		}
		n += len(moved)
		if err != nil {
			return n, err
		}
	}
	r.phase(fmt.Sprintf("redrive %d: %d messages moved back from the DLQs", round, n))
	return n, nil
}

// recordSummary says what the record of ev's key holds.
func (r *run) recordSummary(ctx context.Context, ev *event) string {
	if ev.poison {
		return "poison"
	}
	rec, ok, err := r.record(ctx, Function+"#"+ev.key)
	switch {
	case err != nil:
		return "record unreadable: " + err.Error()
	case !ok:
		return "no record"
	}
	s := rec.status
	if rec.errorCode != "" {
		s += " " + rec.errorCode
	}
	if rec.status == "FAILED" {
		s += " retryable=" + strconv.FormatBool(rec.retryable)
	}
	return s
}

func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
