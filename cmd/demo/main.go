// Command demo runs the main job locally, queue-driven: a producer sends
// events to the queues of template.yaml on a local SQS (moto), a local
// event source mapping (internal/testing/esm) polls them and invokes the
// real bootstrap under the AWS Lambda Runtime Interface Emulator, against a
// moto DynamoDB and a local webhook receiver that counts deliveries per
// Idempotency-Key. It shows a duplicate suppressed, a poison message, a FIFO
// group, a downstream outage where a message comes back with growing delays
// and then moves to the DLQ, the redrive after the outage, an API request
// and its replay, one signed webhook from each kind of sender (Standard
// Webhooks, Stripe, GitHub) received on POST /webhooks/{source} with its
// retry and a forged copy, and that every event was delivered once.
//
// `make demo` builds everything, starts moto (DynamoDB and SQS), and runs
// this. Everything it starts listens on 127.0.0.1 on free ports and is
// stopped when it ends, fails or is interrupted.
package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/oncely/oncely/internal/ddbstore"
	"github.com/oncely/oncely/internal/testing/esm"
	"github.com/oncely/oncely/internal/testing/fakewebhook"
	"github.com/oncely/oncely/internal/testing/rie"
	"github.com/oncely/oncely/internal/testing/samtemplate"
	"github.com/oncely/oncely/internal/testing/sqslocal"
	"github.com/oncely/oncely/internal/testing/webhooksender"
	"github.com/oncely/oncely/internal/webhooksig"
)

// scale divides the template's times, so the demo fits in a minute: the
// visibility timeout 210 s becomes 21 s, the function timeout 3 s.
const scale = sqslocal.Scale(10)

// env overrides the template's environment for the demo: the per-message
// backoff starts at 1 s and doubles up to 4 s (the template: 30 s to 15 min).
var env = map[string]string{
	"SQS_BACKOFF_BASE":         "1s",
	"SQS_BACKOFF_MAX":          "4s",
	"NOTIFY_TIMEOUT":           "1s",
	"IDEMPOTENCY_BACKOFF_BASE": "20ms",
	"IDEMPOTENCY_BACKOFF_MAX":  "200ms",
	"AWS_LAMBDA_LOG_FORMAT":    "JSON",
}

func main() {
	rieBin := flag.String("rie", ".tools/bin/aws-lambda-rie", "path to aws-lambda-rie")
	boot := flag.String("bootstrap", "bin/bootstrap", "path to the bootstrap built for this machine")
	eventsDir := flag.String("events", "events", "directory of sample events")
	tplPath := flag.String("template", "template.yaml", "the SAM template")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Bounded: the demo stops by itself whatever happens.
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := run(ctx, os.Stdout, *rieBin, *boot, *eventsDir, *tplPath); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// demo is the running demo: its queues, runners, emulators and output.
type demo struct {
	w       io.Writer
	start   time.Time
	sqs     *sqs.Client
	hook    *fakewebhook.Server
	lanes   map[bool]*lane // by FIFO
	mu      sync.Mutex
	offsets map[*rie.Emulator]int
	sent    map[string]string // message id -> label
	keys    []string          // the events' keys, in the order sent
	// signingKey is the webhook secret's key, for checking deliveries.
	signingKey []byte
	// senders are the inbound sources' secrets, by source name.
	senders map[string]string
}

type lane struct {
	name   string
	pair   sqslocal.Pair
	emus   []*rie.Emulator
	runner *esm.Runner
}

func run(ctx context.Context, w io.Writer, rieBin, boot, eventsDir, tplPath string) error {
	ddbEndpoint, sqsEndpoint := os.Getenv("AWS_ENDPOINT_URL_DYNAMODB"), sqslocal.EndpointFromEnv()
	if ddbEndpoint == "" || sqsEndpoint == "" {
		return errors.New("AWS_ENDPOINT_URL_DYNAMODB and IDEM_TEST_MOTO_SQS_ENDPOINT are not set: run `make demo`, which starts moto")
	}
	tpl, err := samtemplate.Load(tplPath)
	if err != nil {
		return err
	}
	d := &demo{w: w, start: time.Now(), sqs: sqslocal.Client(sqsEndpoint), hook: fakewebhook.New(), lanes: map[bool]*lane{},
		offsets: map[*rie.Emulator]int{}, sent: map[string]string{}}
	defer d.hook.Close()

	table := fmt.Sprintf("oncely-demo-%d", time.Now().UnixNano())
	ddb := dynamodb.NewFromConfig(aws.Config{Region: sqslocal.Region, Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""), BaseEndpoint: &ddbEndpoint})
	if _, err := ddbstore.CreateTable(ctx, ddb, table); err != nil {
		return err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: d.hook, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()

	if len(tpl.Sources) == 0 {
		return fmt.Errorf("%s has no SQS event source", tplPath)
	}
	fn := tpl.Functions[tpl.Sources[0].Function]
	// Deliveries are signed, as deployed: a secret like the template's (32
	// characters without punctuation) in moto's Secrets Manager. The
	// summary verifies every delivery with it.
	secretARN, err := d.newSecret(ctx, ddbEndpoint)
	if err != nil {
		return err
	}
	local := rie.Local{DynamoDB: ddbEndpoint, SQS: sqsEndpoint, Table: table, DownstreamURL: "http://" + l.Addr().String() + "/webhook",
		Name: "oncely-demo", TimeoutSeconds: scale.Seconds(fn.Timeout), WebhookSecret: secretARN, Extra: functionEnv(fn)}
	var emus []*rie.Emulator
	defer func() {
		var wg sync.WaitGroup
		for _, e := range emus {
			wg.Go(e.Stop)
		}
		wg.Wait()
	}()
	startEmu := func(local rie.Local) (*rie.Emulator, error) {
		e, err := rie.Start(rie.Options{RIE: rieBin, Bootstrap: boot, Env: local.Env()})
		if err == nil {
			emus = append(emus, e)
		}
		return e, err
	}

	prefix := fmt.Sprintf("demo-%x", time.Now().UnixNano()&0xffffff)
	rctx, stopRunners := context.WithCancel(ctx)
	var runners sync.WaitGroup
	defer func() { stopRunners(); runners.Wait() }()
	for _, s := range tpl.Sources {
		ln := &lane{name: s.Name}
		if ln.pair, err = sqslocal.CreatePair(ctx, d.sqs, tpl, s.Queue, prefix, scale); err != nil {
			return err
		}
		var invokers []esm.Invoker
		for range s.MaximumConcurrency {
			e, err := startEmu(local)
			if err != nil {
				return err
			}
			ln.emus = append(ln.emus, e)
			invokers = append(invokers, e)
		}
		ln.runner, err = esm.New(d.sqs, esm.Config{QueueURL: ln.pair.Source.URL, QueueARN: ln.pair.Source.ARN, Region: sqslocal.Region,
			FIFO: ln.pair.Source.FIFO, BatchSize: s.BatchSize, BatchingWindow: scale.Duration(s.BatchingWindow),
			MaximumConcurrency: s.MaximumConcurrency, ReportBatchItemFailures: s.ReportBatchItemFailures, Name: s.Name,
			OnInvocation: func(inv esm.Invocation) { d.show(ln, inv) }}, invokers)
		if err != nil {
			return err
		}
		d.lanes[ln.pair.Source.FIFO] = ln
		runners.Go(func() { _ = ln.runner.Run(rctx) })
	}
	std, fifo := d.lanes[false], d.lanes[true]
	if std == nil || fifo == nil {
		return fmt.Errorf("%s: want a standard and a FIFO queue source", tplPath)
	}
	// The API has a function of its own (same bootstrap, its own timeout
	// and in-call settings); its timeout is not scaled: no step of the
	// demo waits for it, and a tenth of it would leave no time for work.
	apiLocal := local
	if api, ok := tpl.Functions[tpl.API]; ok {
		apiLocal.TimeoutSeconds, apiLocal.Extra = int(api.Timeout.Seconds()), functionEnv(api)
	}
	// It also receives webhooks: the senders and their secrets in moto's
	// Secrets Manager, verified deliveries queued on the standard lane's
	// queue.
	sourcesARN, err := d.newSources(ctx, ddbEndpoint)
	if err != nil {
		return err
	}
	apiLocal.Extra = append(slices.Clone(apiLocal.Extra), "INBOUND_WEBHOOKS=on", "INBOUND_SOURCES_SECRET="+sourcesARN, "INBOUND_QUEUE_URL="+std.pair.Source.URL)
	apiEmu, err := startEmu(apiLocal)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "moto: DynamoDB at %s (table %s), SQS at %s\n", ddbEndpoint, table, sqsEndpoint)
	fmt.Fprintf(w, "queues from %s, times divided by %d: %s and %s (visibility %v, maxReceiveCount %d, DLQs), %d emulators (MaximumConcurrency %d + %d, one for the API)\n",
		tplPath, scale, std.pair.Source.Name, fifo.pair.Source.Name, std.pair.Source.VisibilityTimeout, std.pair.Source.MaxReceiveCount, len(emus), len(std.emus), len(fifo.emus))
	fmt.Fprintf(w, "webhook receiver at http://%s; per-message backoff %s to %s\n\n", l.Addr(), env["SQS_BACKOFF_BASE"], env["SQS_BACKOFF_MAX"])
	fmt.Fprintf(w, "%7s  %-9s %-10s %-26s %-4s %s\n", "time", "queue", "message", "key", "recv", "what happened")

	// 1. Sample events, as a producer sends them: duplicates, poison, a FIFO group.
	if err := d.sendSamples(ctx, eventsDir); err != nil {
		return err
	}
	if err := d.settle(ctx); err != nil {
		return err
	}
	// 2. The downstream goes down; one event arrives during the outage.
	d.note("the webhook goes down (every delivery gets 503)")
	d.hook.SetOutage(true)
	outageBody := `{"id":"release-50","action":"notify","version":"2.1.0"}`
	if err := d.send(ctx, std, outageBody, "", "", "release-50"); err != nil {
		return err
	}
	for {
		dlq, err := sqslocal.Count(ctx, d.sqs, std.pair.DLQ.URL)
		if err != nil {
			return err
		}
		if dlq.Total() > 0 {
			break
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return fmt.Errorf("waiting for the DLQ: %w", err)
		}
	}
	d.note(fmt.Sprintf("SQS moved release-50 to %s after %d receives (maxReceiveCount)", std.pair.DLQ.Name, std.pair.Source.MaxReceiveCount))
	// 3. The outage ends; the operator redrives the DLQ.
	d.hook.SetOutage(false)
	d.note("the webhook is back; redrive the DLQ (moto has no StartMessageMoveTask: receive and re-send)")
	moved, err := sqslocal.Redrive(ctx, d.sqs, std.pair, nil)
	if err != nil {
		return err
	}
	for _, m := range moved {
		d.mu.Lock()
		d.sent[m.NewID] = "release-50"
		d.mu.Unlock()
		d.note(fmt.Sprintf("redriven: %s is %s now (a new message id, as on AWS; the key is in the body)", short(m.OldID), short(m.NewID)))
	}
	if err := d.settle(ctx); err != nil {
		return err
	}
	// 4. The API: the same function behind API Gateway.
	if err := d.api(ctx, apiEmu, eventsDir); err != nil {
		return err
	}
	// 5. Webhooks from other services, on the same function.
	if err := d.webhooks(ctx, apiEmu); err != nil {
		return err
	}
	if err := d.settle(ctx); err != nil {
		return err
	}
	return d.summary()
}

// functionEnv is the template's literal environment plus the demo's.
func functionEnv(fn samtemplate.Function) []string {
	vars := map[string]string{}
	for k, v := range fn.Env {
		if v != "" && !strings.HasPrefix(k, "AWS_") && k != "DOWNSTREAM_URL" && k != "IDEMPOTENCY_TABLE" {
			vars[k] = v
		}
	}
	for k, v := range env {
		vars[k] = v
	}
	var out []string
	for k, v := range vars {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}

func (d *demo) sendSamples(ctx context.Context, dir string) error {
	for _, file := range []string{"sqs-duplicate.json", "sqs-poison.json", "sqs-fifo.json"} {
		b, err := os.ReadFile(dir + "/" + file)
		if err != nil {
			return err
		}
		var ev events.SQSEvent
		if err := json.Unmarshal(b, &ev); err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		d.note(fmt.Sprintf("the producer sends the %d bodies of events/%s", len(ev.Records), file))
		for i, r := range ev.Records {
			label := labelOf(r.Body)
			if g := r.Attributes["MessageGroupId"]; g != "" {
				// Distinct deduplication ids: these are separate sends, even
				// when a body repeats.
				if err := d.send(ctx, d.lanes[true], r.Body, g, fmt.Sprintf("%s-%d", file, i), label); err != nil {
					return err
				}
				continue
			}
			if err := d.send(ctx, d.lanes[false], r.Body, "", "", label); err != nil {
				return err
			}
		}
	}
	return nil
}

func (d *demo) send(ctx context.Context, ln *lane, body, group, dedup, label string) error {
	in := &sqs.SendMessageInput{QueueUrl: aws.String(ln.pair.Source.URL), MessageBody: aws.String(body)}
	if group != "" {
		in.MessageGroupId, in.MessageDeduplicationId = aws.String(group), aws.String(dedup)
	}
	out, err := d.sqs.SendMessage(ctx, in)
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sent[aws.ToString(out.MessageId)] = label
	if k := keyOf(body); k != "" && !slices.Contains(d.keys, k) {
		d.keys = append(d.keys, k)
	}
	return nil
}

// keyOf is the template's key expression for a sample body ("" if the
// body is poison).
func keyOf(body string) string {
	var v struct{ ID, Action string }
	if json.Unmarshal([]byte(body), &v) != nil || v.ID == "" || v.Action == "" || strings.ContainsAny(v.ID, " /.") {
		return ""
	}
	return "evt:" + v.ID + ":" + v.Action
}

func labelOf(body string) string {
	if k := keyOf(body); k != "" {
		return strings.TrimPrefix(k, "evt:")
	}
	return "poison"
}

// settle waits until both queues are empty and nothing is in flight.
func (d *demo) settle(ctx context.Context) error {
	for quiet := 0; quiet < 3; {
		if err := sleep(ctx, 150*time.Millisecond); err != nil {
			return fmt.Errorf("waiting for the queues to empty: %w", err)
		}
		busy := false
		for _, ln := range d.lanes {
			n, err := sqslocal.Count(ctx, d.sqs, ln.pair.Source.URL)
			if err != nil {
				return err
			}
			busy = busy || n.Total() > 0 || ln.runner.Busy()
		}
		if busy {
			quiet = 0
		} else {
			quiet++
		}
	}
	return nil
}

func (d *demo) note(s string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(d.w, "%6.1fs  -- %s\n", time.Since(d.start).Seconds(), s)
}

// fnRecord is the function's log line for one record.
type fnRecord struct {
	Message, MessageID, Key, Outcome, Code string
	Attempts                               int
	VisibilityS                            int `json:"visibility_s"`
}

// show prints one line per record of an invocation: what the function did
// (its own log line) and what the event source mapping did.
func (d *demo) show(ln *lane, inv esm.Invocation) {
	emu := ln.emus[inv.Slot]
	want := map[string]bool{}
	for _, r := range inv.Records {
		want[r.MessageID] = true
	}
	got := map[string]fnRecord{}
	// The emulator copies the function's output asynchronously: wait
	// (briefly) for every record's line.
	for try := 0; try < 50 && len(got) < len(want); try++ {
		d.mu.Lock()
		text := emu.Log()
		start := d.offsets[emu]
		d.mu.Unlock()
		sc := bufio.NewScanner(strings.NewReader(text[start:]))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if i := strings.IndexByte(line, '{'); i >= 0 {
				var rec fnRecord
				if json.Unmarshal([]byte(line[i:]), &rec) == nil && rec.Message == "record" && want[rec.MessageID] {
					got[rec.MessageID] = rec
				}
			}
		}
		if len(got) < len(want) {
			time.Sleep(20 * time.Millisecond)
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.offsets[emu] = len(emu.Log())
	queue := "standard"
	if ln.pair.Source.FIFO {
		queue = "fifo"
	}
	for _, r := range inv.Records {
		rec, ok := got[r.MessageID]
		what := "no answer from the function: " + inv.Failure
		if ok {
			what = describe(rec, r.Deleted)
		}
		key := rec.Key
		if key == "" {
			key = d.sent[r.MessageID]
		}
		fmt.Fprintf(d.w, "%6.1fs  %-9s %-10s %-26s %-4d %s\n", time.Since(d.start).Seconds(), queue, short(r.MessageID), key, r.ReceiveCount, what)
	}
}

func describe(r fnRecord, deleted bool) string {
	ack := "deleted"
	if !deleted {
		ack = "NOT deleted"
	}
	switch r.Outcome {
	case "executed":
		return fmt.Sprintf("delivered to the webhook (attempt %d); %s", r.Attempts, ack)
	case "replayed":
		return "duplicate suppressed: replayed, the webhook not called; " + ack
	case "permanent":
		return "failed for good (" + r.Code + "), recorded; " + ack
	case "poison":
		return "poison (" + r.Code + "), noted; " + ack
	case "transient":
		return fmt.Sprintf("webhook down (%s): key released, back to the queue, visible again in %d s", r.Code, r.VisibilityS)
	case "in_progress":
		return fmt.Sprintf("in progress elsewhere: back to the queue for %d s", r.VisibilityS)
	case "skipped":
		return fmt.Sprintf("not started (%s): back to the queue for %d s", r.Code, r.VisibilityS)
	default:
		return r.Outcome + " " + r.Code
	}
}

// api invokes the function as API Gateway would: a request, the same
// again, and the same key with another body.
func (d *demo) api(ctx context.Context, emu *rie.Emulator, dir string) error {
	b, err := os.ReadFile(dir + "/api-request.json")
	if err != nil {
		return err
	}
	d.note("API Gateway: POST /events with Idempotency-Key (events/api-request.json), then again, then with another body")
	for _, payload := range [][]byte{b, b, []byte(strings.Replace(string(b), `"body": "{\"id\":\"release-42\"`, `"body": "{\"id\":\"release-99\"`, 1))} {
		resp, err := invokeHTTP(ctx, emu, payload)
		if err != nil {
			return err
		}
		what := fmt.Sprintf("HTTP %d", resp.StatusCode)
		if resp.Headers["Idempotent-Replayed"] == "true" {
			what += ", Idempotent-Replayed: true (the webhook not called)"
		}
		if resp.StatusCode == 422 {
			what += ": the same key with another body is refused (KEY_REUSED)"
		}
		d.mu.Lock()
		fmt.Fprintf(d.w, "%6.1fs  %-9s %-10s %-26s %-4s %s\n", time.Since(d.start).Seconds(), "api", "POST", "8e03978e-40d5-…", "", what)
		d.mu.Unlock()
	}
	return nil
}

// summary prints what the webhook saw per key, and fails unless every
// event was delivered exactly once.
func (d *demo) summary() error {
	counts := d.hook.Counts()
	accepted := map[string]int{}
	for _, a := range d.hook.Accepted() {
		accepted[a.Key]++
	}
	fmt.Fprintln(d.w, "\ndeliveries the webhook receiver accepted, per Idempotency-Key (attempts refused during the outage in brackets):")
	tw := tabwriter.NewWriter(d.w, 0, 0, 2, ' ', 0)
	keys := slices.Clone(d.keys)
	for k := range accepted {
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	bad := 0
	for _, k := range keys {
		refused := ""
		if n := counts[k] - accepted[k]; n > 0 {
			refused = fmt.Sprintf("(%d refused)", n)
		}
		fmt.Fprintf(tw, "  %s\t%d\t%s\n", k, accepted[k], refused)
		if accepted[k] != 1 {
			bad++
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if bad > 0 {
		return fmt.Errorf("%d events were not delivered exactly once", bad)
	}
	verified, err := d.verifySignatures()
	if err != nil {
		return err
	}
	fmt.Fprintf(d.w, "\nevery event delivered once (%d keys), all %d deliveries signed (Standard Webhooks) and verified with the secret;\nthe poison messages were noted and never delivered; took %.1f s\n",
		len(keys), verified, time.Since(d.start).Seconds())
	return nil
}

// newSecret creates the signing secret in moto's Secrets Manager.
func (d *demo) newSecret(ctx context.Context, endpoint string) (string, error) {
	value := webhooksender.Alphanumeric(32)
	key, err := webhooksig.DecodeSecret(value)
	if err != nil {
		return "", err
	}
	d.signingKey = key
	sm := secretsmanager.NewFromConfig(aws.Config{Region: sqslocal.Region, Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""), BaseEndpoint: &endpoint})
	out, err := sm.CreateSecret(ctx, &secretsmanager.CreateSecretInput{Name: aws.String(fmt.Sprintf("oncely-demo-%d", time.Now().UnixNano())), SecretString: &value})
	if err != nil {
		return "", fmt.Errorf("create the signing secret: %w", err)
	}
	return *out.ARN, nil
}

// verifySignatures checks every delivery's webhook-signature the way a
// receiver would, and that webhook-id is the event's key.
func (d *demo) verifySignatures() (int, error) {
	n := 0
	for _, del := range d.hook.Audit() {
		h := del.Headers
		want := "v1," + webhooksig.Sign(d.signingKey, h["webhook-id"], h["webhook-timestamp"], del.Body)
		if h["webhook-id"] != del.Key || !slices.Contains(strings.Split(h["webhook-signature"], " "), want) {
			return n, fmt.Errorf("delivery %d for %s is not signed with the secret (headers %v)", del.Seq, del.Key, h)
		}
		n++
	}
	return n, nil
}

func short(id string) string {
	if len(id) > 9 {
		return id[:8] + "…"
	}
	return id
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// newSources creates the inbound sources secret in moto's Secrets Manager:
// one sender of each scheme, each with a secret of its own.
func (d *demo) newSources(ctx context.Context, endpoint string) (string, error) {
	d.senders = map[string]string{
		"acme":   "whsec_" + base64.StdEncoding.EncodeToString([]byte(webhooksender.Alphanumeric(24))),
		"stripe": "whsec_" + webhooksender.Alphanumeric(32),
		"github": webhooksender.Alphanumeric(40),
	}
	doc := map[string]any{}
	for name, scheme := range map[string]string{"acme": "standard-webhooks", "stripe": "stripe", "github": "github"} {
		doc[name] = map[string]any{"scheme": scheme, "secrets": []string{d.senders[name]}}
	}
	value, _ := json.Marshal(doc)
	sm := secretsmanager.NewFromConfig(aws.Config{Region: sqslocal.Region, Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""), BaseEndpoint: &endpoint})
	out, err := sm.CreateSecret(ctx, &secretsmanager.CreateSecretInput{Name: aws.String(fmt.Sprintf("oncely-demo-sources-%d", time.Now().UnixNano())), SecretString: aws.String(string(value))})
	if err != nil {
		return "", fmt.Errorf("create the inbound sources secret: %w", err)
	}
	return *out.ARN, nil
}

// webhooks receives one delivery of each scheme as API Gateway passes it
// for POST /webhooks/{source}, signed the way its sender signs; then each
// sender's retry, signed anew; then a forged copy. The queue lane runs the
// accepted ones: each once.
func (d *demo) webhooks(ctx context.Context, emu *rie.Emulator) error {
	d.note("webhooks from other services: POST /webhooks/{source}, one of each scheme, then each sender's retry, then a forged copy")
	swKey, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(d.senders["acme"], "whsec_"))
	swBody := []byte(`{"type":"invoice.paid","data":{"invoice":"inv_77","amount":4200}}`)
	stripeBody := func(pending int) []byte {
		return []byte(fmt.Sprintf(`{"id":"evt_1Demo","object":"event","created":1780000000,"data":{"object":{"id":"pi_1","amount":4200}},"livemode":false,"pending_webhooks":%d,"type":"payment_intent.succeeded"}`, pending))
	}
	ghBody := []byte(`{"zen":"Keep it logically awesome.","hook_id":42}`)
	const ghDelivery = "72d3162e-cc78-11e3-81ab-4c9367dc0958"
	type delivery struct {
		label, source string
		headers       map[string]string
		body          []byte
	}
	sign := func(at time.Time, pending int) []delivery {
		return []delivery{
			{"standard webhooks", "acme", webhooksender.StandardWebhooks("msg_demo1", at, swBody, swKey), swBody},
			{"stripe", "stripe", map[string]string{"Stripe-Signature": webhooksender.Stripe(at, stripeBody(pending), d.senders["stripe"])}, stripeBody(pending)},
			{"github", "github", map[string]string{"X-Hub-Signature-256": webhooksender.GitHub(d.senders["github"], ghBody), "X-GitHub-Delivery": ghDelivery, "X-GitHub-Event": "ping"}, ghBody},
		}
	}
	first, retries := sign(time.Now(), 2), sign(time.Now().Add(time.Second), 1)
	forged := first[0]
	forged.label, forged.body = "forged (body changed)", []byte(strings.Replace(string(swBody), "4200", "1", 1))
	for i, del := range append(append(first, retries...), forged) {
		headers := map[string]string{"content-type": "application/json"}
		for k, v := range del.headers {
			headers[strings.ToLower(k)] = v
		}
		payload, _ := json.Marshal(events.APIGatewayV2HTTPRequest{Version: "2.0", RouteKey: "POST /webhooks/{source}", RawPath: "/webhooks/" + del.source,
			PathParameters: map[string]string{"source": del.source}, Headers: headers, Body: string(del.body),
			RequestContext: events.APIGatewayV2HTTPRequestContext{RouteKey: "POST /webhooks/{source}", RequestID: fmt.Sprintf("demo-hook-%d", i),
				HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "POST", Path: "/webhooks/" + del.source}}})
		resp, err := invokeHTTP(ctx, emu, payload)
		if err != nil {
			return err
		}
		var body struct{ Key, Code, Detail string }
		_ = json.Unmarshal([]byte(resp.Body), &body)
		what := fmt.Sprintf("HTTP %d", resp.StatusCode)
		switch {
		case resp.StatusCode == 202 && i < len(first):
			what += ": verified and queued"
			d.mu.Lock()
			if !slices.Contains(d.keys, body.Key) {
				d.keys = append(d.keys, body.Key)
			}
			d.mu.Unlock()
		case resp.StatusCode == 202:
			what += ": the sender's retry (signed anew), verified and queued again"
		default:
			what += " " + body.Code + ": " + body.Detail
		}
		if (resp.StatusCode == 202) != (del.label != "forged (body changed)") {
			return fmt.Errorf("webhook %s from %s: %s; want 202 for a signed delivery, 401 for a forged one", del.label, del.source, what)
		}
		d.mu.Lock()
		fmt.Fprintf(d.w, "%6.1fs  %-9s %-10s %-26s %-4s %s\n", time.Since(d.start).Seconds(), "webhook", del.source, short26(del.label), "", what)
		d.mu.Unlock()
	}
	return nil
}

// invokeHTTP invokes the function with an API Gateway request and returns
// its HTTP API response.
func invokeHTTP(ctx context.Context, emu *rie.Emulator, payload []byte) (events.APIGatewayV2HTTPResponse, error) {
	var resp events.APIGatewayV2HTTPResponse
	raw, err := emu.Invoke(ctx, payload)
	if err != nil {
		return resp, err
	}
	if err := json.Unmarshal(raw, &resp); err != nil || resp.StatusCode == 0 {
		return resp, fmt.Errorf("the function answered %s; want an HTTP API response", raw)
	}
	return resp, nil
}

func short26(s string) string {
	if len(s) > 26 {
		return s[:25] + "…"
	}
	return s
}
