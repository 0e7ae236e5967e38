package e2e

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/oncely/oncely/internal/ddbstore"
	"github.com/oncely/oncely/internal/inbound"
	"github.com/oncely/oncely/internal/receiving"
	"github.com/oncely/oncely/internal/testing/ddblocal"
	"github.com/oncely/oncely/internal/testing/esm"
	"github.com/oncely/oncely/internal/testing/rie"
	"github.com/oncely/oncely/internal/testing/sqslocal"
	"github.com/oncely/oncely/internal/testing/webhooksender"
)

// senders runs tools/webhook_senders.py: PyPI's standardwebhooks signs
// Standard Webhooks deliveries, PyPI's stripe checks our Stripe signer.
type senders struct {
	t   *testing.T
	in  io.WriteCloser
	out *bufio.Scanner
}

func startSenders(t *testing.T) *senders {
	t.Helper()
	cmd := exec.Command(verifierPython(t), "../../tools/webhook_senders.py")
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); _ = cmd.Wait() })
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	return &senders{t: t, in: in, out: sc}
}

func (s *senders) call(req map[string]any, resp any) {
	s.t.Helper()
	line, _ := json.Marshal(req)
	if _, err := s.in.Write(append(line, '\n')); err != nil {
		s.t.Fatal(err)
	}
	if !s.out.Scan() {
		s.t.Fatalf("webhook_senders.py gave no answer to %s: %v", req["op"], s.out.Err())
	}
	if err := json.Unmarshal(s.out.Bytes(), resp); err != nil {
		s.t.Fatalf("webhook_senders.py answered %q", s.out.Text())
	}
}

// standard signs a delivery with the Standard Webhooks reference library,
// with each secret (a sender's own rotation).
func (s *senders) standard(id string, at time.Time, body []byte, secrets ...string) map[string]string {
	s.t.Helper()
	var resp struct{ Headers map[string]string }
	s.call(map[string]any{"op": "sign_standard", "secrets": secrets, "id": id, "timestamp": at.Unix(), "body_b64": base64.StdEncoding.EncodeToString(body)}, &resp)
	return resp.Headers
}

// stripe signs a delivery with our test signer, and has Stripe's library
// check the header first: a signer Stripe's own receivers would refuse
// proves nothing.
func (s *senders) stripe(at time.Time, body []byte, secret string, wantStripeOK bool) map[string]string {
	s.t.Helper()
	header := webhooksender.Stripe(at, body, secret)
	var resp struct {
		OK    bool
		Error string
	}
	s.call(map[string]any{"op": "check_stripe", "secret": secret, "header": header, "body_b64": base64.StdEncoding.EncodeToString(body)}, &resp)
	if resp.OK != wantStripeOK {
		s.t.Fatalf("stripe.Webhook.construct_event on our header: ok %v (%s); want %v", resp.OK, resp.Error, wantStripeOK)
	}
	return map[string]string{"Stripe-Signature": header}
}

// receiver is the API function with the receiving route on, the queue
// function (the same bootstrap, without the route's settings, as deployed),
// the queue between them, and what each case got.
type receiver struct {
	t       *testing.T
	f       *fn
	queueFn *rie.Emulator
	q       *sqslocal.Scratch
	sm      *secretsmanager.Client
	arn     string
	// proofARN is the envelope proof's secret, proofSince the queue
	// function's cutover.
	proofARN, proofSince string
	send                 *senders
	rows                 []row
	started              time.Time
}

// row is one case's outcome, for the report.
type row struct {
	name, key string
	status    int
	code      string
	queued    int
}

func (r *receiver) sources(std, stripe, github []string) string {
	list := func(s []string) string { b, _ := json.Marshal(s); return string(b) }
	return `{"acme":{"scheme":"standard-webhooks","secrets":` + list(std) + `},` +
		`"stripe":{"scheme":"stripe","secrets":` + list(stripe) + `},` +
		`"github":{"scheme":"github","secrets":` + list(github) + `}}`
}

// refresh is the function's INBOUND_SOURCES_REFRESH in this test.
const refresh = 200 * time.Millisecond

// rotate puts a new value of the sources secret and waits out the
// function's refresh interval: the next request re-reads it, before it is
// verified.
func (r *receiver) rotate(value string) {
	r.t.Helper()
	if _, err := r.sm.PutSecretValue(context.Background(), &secretsmanager.PutSecretValueInput{SecretId: &r.arn, SecretString: &value}); err != nil {
		r.t.Fatal(err)
	}
	time.Sleep(refresh + 50*time.Millisecond)
}

func (r *receiver) depth() int {
	r.t.Helper()
	d, err := sqslocal.Count(context.Background(), r.q.Client, r.q.URL)
	if err != nil {
		r.t.Fatal(err)
	}
	return d.Total()
}

// post sends one delivery to the function as API Gateway would for POST
// /webhooks/{source}, and checks its answer and what it queued.
func (r *receiver) post(name, source string, headers map[string]string, body []byte, wantStatus int, wantCode, key string) {
	r.t.Helper()
	h := map[string]string{"content-type": "application/json", "user-agent": "e2e-sender"}
	for k, v := range headers {
		h[strings.ToLower(k)] = v // HTTP API payload 2.0 lower-cases header names
	}
	req := events.APIGatewayV2HTTPRequest{Version: "2.0", RouteKey: receiving.WebhookRouteKey, RawPath: "/webhooks/" + source,
		PathParameters: map[string]string{"source": source}, Headers: h, Body: string(body),
		RequestContext: events.APIGatewayV2HTTPRequestContext{Stage: "$default", RouteKey: receiving.WebhookRouteKey, RequestID: "req-" + name,
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "POST", Path: "/webhooks/" + source}}}
	payload, _ := json.Marshal(req)
	before := r.depth()
	raw, err := r.f.emu.Invoke(context.Background(), payload)
	if err != nil {
		r.t.Fatal(err)
	}
	var resp events.APIGatewayV2HTTPResponse
	if err := json.Unmarshal(raw, &resp); err != nil || resp.StatusCode == 0 {
		r.t.Fatalf("%s: the function answered %.300q; want an HTTP API response", name, raw)
	}
	var p struct{ Code string }
	_ = json.Unmarshal([]byte(resp.Body), &p)
	queued := r.depth() - before
	r.rows = append(r.rows, row{name: name, key: key, status: resp.StatusCode, code: p.Code, queued: queued})
	if resp.StatusCode != wantStatus || p.Code != wantCode {
		r.t.Errorf("%s: %d %s (%.200s); want %d %s", name, resp.StatusCode, p.Code, resp.Body, wantStatus, wantCode)
	}
	if want := map[bool]int{true: 1, false: 0}[wantStatus == 202]; queued != want {
		r.t.Errorf("%s: %d messages queued; want %d", name, queued, want)
	}
}

// startQueueFunction starts the queue function: the same bootstrap, table,
// namespace, downstream and signing secret as f, and none of the INBOUND_*
// variables (the template sets them on the API function only): it must
// recognise the envelopes by itself.
func (r *receiver) startQueueFunction() {
	r.t.Helper()
	emu, err := rie.Start(rie.Options{RIE: os.Getenv(envRIE), Bootstrap: bootstrap, Env: rie.Local{
		DynamoDB: os.Getenv(ddblocal.EnvMoto), SQS: sqslocal.EndpointFromEnv(), Table: r.f.table, DownstreamURL: r.f.hookURL + "/webhook",
		Name: "oncely-e2e", TimeoutSeconds: 10, WebhookSecret: r.f.secretARN,
		Extra: []string{"AWS_LAMBDA_LOG_FORMAT=JSON", "NOTIFY_TIMEOUT=1s", "IDEMPOTENCY_BACKOFF_BASE=10ms", "IDEMPOTENCY_BACKOFF_MAX=50ms",
			"INBOUND_PROOF_SECRET=" + r.proofARN, "INBOUND_PROOF_SINCE=" + r.proofSince},
	}.Env()})
	if err != nil {
		r.t.Fatal(err)
	}
	r.queueFn = emu
	r.t.Cleanup(func() {
		emu.Stop()
		if r.t.Failed() {
			r.t.Logf("queue function output:\n%s", emu.Log())
		}
	})
}

// logs is both functions' output.
func (r *receiver) logs() string { return r.f.emu.Log() + "\n" + r.queueFn.Log() }

// drain runs the event source mapping stand-in on the queue, invoking the
// queue function, until every message is acknowledged.
func (r *receiver) drain() {
	r.t.Helper()
	runner, err := esm.New(r.q.Client, esm.Config{QueueURL: r.q.URL, QueueARN: r.q.ARN, Region: sqslocal.Region, BatchSize: 10,
		ReportBatchItemFailures: true, PollInterval: 50 * time.Millisecond}, []esm.Invoker{r.queueFn})
	if err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = runner.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(60 * time.Second)
	for quiet := 0; quiet < 3; time.Sleep(100 * time.Millisecond) {
		if r.depth() == 0 && !runner.Busy() {
			quiet++
		} else {
			quiet = 0
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("the queue still holds %d messages after 60 s (a message the function did not acknowledge?)", r.depth())
		}
	}
}

func (r *receiver) tableItems() int {
	r.t.Helper()
	out, err := r.f.client.Scan(context.Background(), &dynamodb.ScanInput{TableName: &r.f.table, Select: "COUNT", ConsistentRead: aws.Bool(true)})
	if err != nil {
		r.t.Fatal(err)
	}
	return int(out.Count)
}

// TestE2EInboundWebhooks sends deliveries of each scheme, signed by the
// senders' own libraries, to the function under the emulator; each is
// queued on the local queue, run by the event source mapping stand-in and
// delivered once downstream. Retries signed anew collapse into replays;
// tampered bodies, wrong secrets, stale timestamps, an unknown source and
// oversized bodies get their answer and store and queue nothing; a
// rotation accepts old and new secrets during the overlap; a delivery id
// reused with another body becomes a KEY_REUSED note, but for GitHub,
// whose id is the event's, it is another hook's delivery and runs; a
// GitHub delivery replayed under another id is a replay. The test logs the
// outcome of every case (status, queued, stored, delivered).
func TestE2EInboundWebhooks(t *testing.T) {
	// GitHub's signer is trusted only once it reproduces GitHub's published
	// example.
	if v := webhooksender.GitHubTestVector; webhooksender.GitHub(v.Secret, []byte(v.Payload)) != v.Signature {
		t.Fatal("our GitHub signer does not reproduce GitHub's published test vector")
	}
	send := startSenders(t)
	moto := os.Getenv(ddblocal.EnvMoto)
	if moto == "" {
		start(t, 10) // skips, or fails under IDEM_REQUIRE_E2E
	}
	r := &receiver{t: t, send: send, sm: secretsmanager.NewFromConfig(ddblocal.Config(moto, nil)), started: time.Now()}
	r.q = sqslocal.NewScratch(t, sqslocal.Client(sqslocal.Endpoint(t)), false, map[string]string{"VisibilityTimeout": "30"})
	swOld, swNew := "whsec_"+base64.StdEncoding.EncodeToString([]byte(webhooksender.Alphanumeric(32))), "whsec_"+base64.StdEncoding.EncodeToString([]byte(webhooksender.Alphanumeric(32)))
	stripeOld, stripeNew := "whsec_"+webhooksender.Alphanumeric(32), "whsec_"+webhooksender.Alphanumeric(32)
	ghOld, ghNew := webhooksender.Alphanumeric(40), webhooksender.Alphanumeric(40)
	initial := r.sources([]string{swOld}, []string{stripeOld}, []string{ghOld})
	out, err := r.sm.CreateSecret(context.Background(), &secretsmanager.CreateSecretInput{Name: aws.String("oncely-e2e-sources-" + webhooksender.Alphanumeric(8)), SecretString: &initial})
	if err != nil {
		t.Fatal(err)
	}
	r.arn = *out.ARN
	// The envelope proof's secret, read by both functions; the queue
	// function's cutover is now: every envelope must be proved.
	proof, err := r.sm.CreateSecret(context.Background(), &secretsmanager.CreateSecretInput{Name: aws.String("oncely-e2e-proof-" + webhooksender.Alphanumeric(8)),
		SecretString: aws.String(webhooksender.Alphanumeric(32))})
	if err != nil {
		t.Fatal(err)
	}
	r.proofARN, r.proofSince = *proof.ARN, time.Now().Add(-time.Second).UTC().Format(time.RFC3339)
	r.f = start(t, 10, "INBOUND_WEBHOOKS=on", "INBOUND_SOURCES_SECRET="+r.arn, "INBOUND_QUEUE_URL="+r.q.URL, "INBOUND_SOURCES_REFRESH="+refresh.String(),
		"INBOUND_PROOF_SECRET="+r.proofARN)
	r.startQueueFunction()

	now := time.Now
	swBody := func(n int) []byte {
		return []byte(fmt.Sprintf(`{"type":"invoice.paid","timestamp":"2026-12-01T10:00:00Z","data":{"invoice":"inv_%d","amount":4200}}`, n))
	}
	stripeBody := func(id string, pending int) []byte {
		return []byte(`{"id":"` + id + `","object":"event","api_version":"2026-11-17","created":1780000000,` +
			`"data":{"object":{"id":"pi_3Q","object":"payment_intent","amount":4200,"currency":"eur","status":"succeeded"}},` +
			`"livemode":false,"pending_webhooks":` + strconv.Itoa(pending) + `,"request":{"id":"req_1","idempotency_key":"k-1"},"type":"payment_intent.succeeded"}`)
	}
	ghBody := []byte(`{"zen":"Design for failure.","hook_id":109948940,"hook":{"type":"Repository","id":109948940,"active":true,"events":["push"]}}`)
	ghHook := func(id int) []byte { // another hook's ping: another body
		return []byte(fmt.Sprintf(`{"zen":"Design for failure.","hook_id":%d,"hook":{"type":"Repository","id":%d,"active":true,"events":["push"]}}`, id, id))
	}
	const ghDelivery, ghDelivery2 = "72d3162e-cc78-11e3-81ab-4c9367dc0958", "9f2c7e10-cd31-11e3-8a4c-1f0b0c9e1a77"
	gh := func(delivery string, body []byte, secret string) map[string]string {
		return map[string]string{"X-Hub-Signature-256": webhooksender.GitHub(secret, body), "X-GitHub-Delivery": delivery, "X-GitHub-Event": "ping"}
	}
	// A GitHub delivery is keyed by its body (its delivery id is not signed).
	ghKey := func(body []byte) string {
		key, _, err := inbound.BodyKey("github", body)
		if err != nil {
			t.Fatal(err)
		}
		return key
	}

	// 1. Refusals, before anything valid: each its answer, nothing queued
	// or stored.
	r.post("standard: tampered body", "acme", send.standard("msg_tampered", now(), swBody(1), swOld), swBody(2), 401, "SIGNATURE_MISMATCH", "wh:acme:msg_tampered")
	r.post("standard: wrong secret", "acme", send.standard("msg_wrongsecret", now(), swBody(1), swNew), swBody(1), 401, "SIGNATURE_MISMATCH", "wh:acme:msg_wrongsecret")
	r.post("standard: stale timestamp (10 min)", "acme", send.standard("msg_stale", now().Add(-10*time.Minute), swBody(1), swOld), swBody(1), 401, "TIMESTAMP_OUTSIDE_TOLERANCE", "wh:acme:msg_stale")
	r.post("standard: no signature", "acme", map[string]string{"webhook-id": "msg_unsigned", "webhook-timestamp": strconv.FormatInt(now().Unix(), 10)}, swBody(1), 401, "SIGNATURE_MISSING", "wh:acme:msg_unsigned")
	r.post("stripe: tampered body", "stripe", send.stripe(now(), stripeBody("evt_tampered", 1), stripeOld, true), stripeBody("evt_tampered", 2), 401, "SIGNATURE_MISMATCH", "wh:stripe:evt_tampered")
	r.post("stripe: wrong secret", "stripe", send.stripe(now(), stripeBody("evt_wrongsecret", 1), stripeNew, true), stripeBody("evt_wrongsecret", 1), 401, "SIGNATURE_MISMATCH", "wh:stripe:evt_wrongsecret")
	r.post("stripe: stale timestamp (10 min)", "stripe", send.stripe(now().Add(-10*time.Minute), stripeBody("evt_stale", 1), stripeOld, false), stripeBody("evt_stale", 1), 401, "TIMESTAMP_OUTSIDE_TOLERANCE", "wh:stripe:evt_stale")
	ghTampered := []byte(strings.Replace(string(ghBody), "push", "delete", 1))
	r.post("github: tampered body", "github", gh("00000000-0000-0000-0000-00000000000a", ghBody, ghOld), ghTampered, 401, "SIGNATURE_MISMATCH", ghKey(ghTampered))
	r.post("github: wrong secret", "github", gh("00000000-0000-0000-0000-00000000000b", ghHook(3), ghNew), ghHook(3), 401, "SIGNATURE_MISMATCH", ghKey(ghHook(3)))
	r.post("unknown source", "shopify", send.standard("msg_unknown", now(), swBody(1), swOld), swBody(1), 404, "UNKNOWN_SOURCE", "")
	huge := []byte(`{"pad":"` + strings.Repeat("x", 1<<20) + `"}`)
	r.post("oversized body (1 MiB + 10 B)", "acme", send.standard("msg_huge", now(), huge, swOld), huge, 413, "TOO_LARGE", "wh:acme:msg_huge")
	near := []byte(`{"pad":"` + strings.Repeat("y", 1<<20-40) + `"}`)
	r.post("oversized once enveloped (1 MiB - 30 B)", "acme", send.standard("msg_near", now(), near, swOld), near, 413, "TOO_LARGE", "wh:acme:msg_near")
	if n := r.tableItems(); n != 0 {
		t.Errorf("after the refusals the table holds %d items; want none", n)
	}
	if !strings.Contains(r.logs(), `"delivery_id":"msg_tampered"`) || !strings.Contains(r.logs(), `"source":"acme"`) {
		t.Errorf("the refusal of msg_tampered is not logged with its source and delivery id")
	}

	// 2. One delivery of each scheme: 202, queued, run once.
	r.post("standard: signed by standardwebhooks", "acme", send.standard("msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", now(), swBody(1), swOld), swBody(1), 202, "", "wh:acme:msg_2KWPBgLlAfxdpx2AI54pPJ85f4W")
	r.post("stripe: accepted by stripe.Webhook.construct_event", "stripe", send.stripe(now(), stripeBody("evt_1QxY2Z", 2), stripeOld, true), stripeBody("evt_1QxY2Z", 2), 202, "", "wh:stripe:evt_1QxY2Z")
	r.post("github: signed per GitHub's docs", "github", gh(ghDelivery, ghBody, ghOld), ghBody, 202, "", ghKey(ghBody))
	r.drain()

	// 3. Retries, signed anew with new timestamps (Stripe's with one
	// endpoint fewer pending), and GitHub's manual redelivery: all queued,
	// all replays.
	later := now().Add(time.Second) // another second: another timestamp, another signature
	r.post("standard: the sender's retry", "acme", send.standard("msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", later, swBody(1), swOld), swBody(1), 202, "", "wh:acme:msg_2KWPBgLlAfxdpx2AI54pPJ85f4W")
	r.post("stripe: Stripe's retry", "stripe", send.stripe(later, stripeBody("evt_1QxY2Z", 1), stripeOld, true), stripeBody("evt_1QxY2Z", 1), 202, "", "wh:stripe:evt_1QxY2Z")
	r.post("github: redelivered by hand", "github", gh(ghDelivery, ghBody, ghOld), ghBody, 202, "", ghKey(ghBody))
	// A captured delivery sent again under a fresh X-GitHub-Delivery: it
	// verifies (GitHub signs the body only), and is a replay.
	r.post("github: a capture replayed under another id", "github", gh("00000000-0000-0000-0000-00000000000d", ghBody, ghOld), ghBody, 202, "", ghKey(ghBody))
	r.drain()

	// 4. A rotation: both secrets listed, both accepted; then the old one
	// removed, and refused.
	r.rotate(r.sources([]string{swOld, swNew}, []string{stripeOld, stripeNew}, []string{ghOld, ghNew}))
	r.post("standard: rotation, new secret", "acme", send.standard("msg_rot_new", now(), swBody(3), swNew), swBody(3), 202, "", "wh:acme:msg_rot_new")
	r.post("standard: rotation, old secret", "acme", send.standard("msg_rot_old", now(), swBody(4), swOld), swBody(4), 202, "", "wh:acme:msg_rot_old")
	r.post("standard: the sender's own rotation, both signatures", "acme", send.standard("msg_rot_both", now(), swBody(5), swOld, swNew), swBody(5), 202, "", "wh:acme:msg_rot_both")
	r.post("stripe: rotation, new secret", "stripe", send.stripe(now(), stripeBody("evt_rot_new", 1), stripeNew, true), stripeBody("evt_rot_new", 1), 202, "", "wh:stripe:evt_rot_new")
	r.post("stripe: rotation, old secret", "stripe", send.stripe(now(), stripeBody("evt_rot_old", 1), stripeOld, true), stripeBody("evt_rot_old", 1), 202, "", "wh:stripe:evt_rot_old")
	r.post("github: rotation, new secret", "github", gh(ghDelivery2, ghHook(2), ghNew), ghHook(2), 202, "", ghKey(ghHook(2)))
	r.rotate(r.sources([]string{swNew}, []string{stripeNew}, []string{ghNew}))
	r.post("standard: after the rotation, old secret", "acme", send.standard("msg_after", now(), swBody(6), swOld), swBody(6), 401, "SIGNATURE_MISMATCH", "wh:acme:msg_after")
	r.post("stripe: after the rotation, old secret", "stripe", send.stripe(now(), stripeBody("evt_after", 1), stripeOld, true), stripeBody("evt_after", 1), 401, "SIGNATURE_MISMATCH", "wh:stripe:evt_after")
	r.post("github: after the rotation, old secret", "github", gh("00000000-0000-0000-0000-00000000000c", ghHook(4), ghOld), ghHook(4), 401, "SIGNATURE_MISMATCH", ghKey(ghHook(4)))

	// 5. A delivery id reused with another body: accepted by the route
	// (it cannot know), refused on the queue path with a KEY_REUSED note.
	r.post("standard: id reused, another body", "acme", send.standard("msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", now(), swBody(9), swNew), swBody(9), 202, "", "wh:acme:msg_2KWPBgLlAfxdpx2AI54pPJ85f4W")
	// GitHub's id is the event's: another hook receiving the same event
	// gets the same id with its own body, and it runs under its own key.
	r.post("github: the event's id, another hook's body", "github", gh(ghDelivery, ghHook(5), ghNew), ghHook(5), 202, "", ghKey(ghHook(5)))
	r.drain()

	// 6. A queue producer's envelope (no proof, after the cutover): an
	// ENVELOPE_UNPROVED note, never run.
	forged := r.q.Send(t, `{"oncely_inbound":1,"source":"stripe","scheme":"stripe","delivery_id":"evt_forged","body":{"id":"evt_forged","type":"invoice.paid"}}`, "")
	r.drain()

	// What the queue path did with each queued delivery: the route's log
	// line names the message it queued, the record's line its outcome.
	store, err := ddbstore.New(r.f.client, r.f.table, "oncely-e2e")
	if err != nil {
		t.Fatal(err)
	}
	if note, ok, err := store.GetPoison(context.Background(), forged, time.Now()); !ok || err != nil || note.Reason != "ENVELOPE_UNPROVED" {
		t.Errorf("a producer's envelope: note %+v, %v, %v; want ENVELOPE_UNPROVED", note, ok, err)
	}
	if n := r.f.down.Count("wh:stripe:evt_forged"); n != 0 {
		t.Errorf("a producer's envelope was delivered %d times; want never", n)
	}
	queuedAs, outcome := map[string]string{}, map[string]string{} // API request id -> message id -> outcome
	for _, line := range strings.Split(r.logs(), "\n") {
		var l map[string]any
		if i := strings.IndexByte(line, '{'); i < 0 || json.Unmarshal([]byte(line[i:]), &l) != nil {
			continue
		}
		switch l["message"] {
		case "webhook":
			if id, _ := l["queued_message_id"].(string); id != "" {
				queuedAs[l["apiRequestId"].(string)] = id
			}
		case "record":
			id := l["messageId"].(string)
			outcome[id] = strings.TrimSpace(fmt.Sprint(l["outcome"], " ", l["code"]))
			if l["code"] == "KEY_REUSED" {
				if _, ok, err := store.GetPoison(context.Background(), id, time.Now()); !ok || err != nil {
					t.Errorf("no KEY_REUSED poison note for message %s (%v)", id, err)
				}
			}
		}
	}
	want := map[string]string{
		"standard: the sender's retry": "replayed", "stripe: Stripe's retry": "replayed", "github: redelivered by hand": "replayed",
		"github: a capture replayed under another id": "replayed",
		"standard: id reused, another body":           "poison KEY_REUSED",
	}
	var report strings.Builder
	tw := tabwriter.NewWriter(&report, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "case\tstatus\tqueued\tqueue path\tstored\tdelivered")
	for _, row := range r.rows {
		stored, delivered := "-", 0
		if row.key != "" {
			if rec := r.f.record(row.key); rec != nil {
				stored = s(rec, "status")
			}
			delivered = r.f.down.Count(row.key)
		}
		path := "-"
		if row.status == 202 {
			path = outcome[queuedAs["req-"+row.name]]
			w, ok := want[row.name]
			if !ok {
				w = "executed"
			}
			if path != w {
				t.Errorf("%s: the queue path's outcome %q; want %q", row.name, path, w)
			}
		}
		fmt.Fprintf(tw, "%s\t%d %s\t%d\t%s\t%s\t%d\n", row.name, row.status, row.code, row.queued, path, stored, delivered)
		// Every refused case has a key of its own, so nothing may be under it.
		if row.status != 202 && (stored != "-" || delivered != 0) {
			t.Errorf("%s: refused, yet stored %s and delivered %d; want nothing", row.name, stored, delivered)
		}
		if row.status == 202 && (!strings.HasPrefix(stored, "SUCCEEDED") || delivered != 1) {
			t.Errorf("%s: stored %s, delivered %d; want SUCCEEDED, delivered once", row.name, stored, delivered)
		}
	}
	_ = tw.Flush()
	t.Logf("outcome per case (stored: the record under the case's key; delivered: downstream deliveries with that key), %.1f s:\n%s", time.Since(r.started).Seconds(), report.String())
	// The downstream got the senders' bodies, under the inbound keys.
	for _, d := range r.f.down.Audit() {
		if !strings.HasPrefix(d.Key, "wh:") || d.Headers["webhook-id"] != d.Key {
			t.Errorf("a downstream delivery with key %q, webhook-id %q; want wh:… on both", d.Key, d.Headers["webhook-id"])
		}
		if d.Key == ghKey(ghBody) && string(d.Body) != string(ghBody) {
			t.Errorf("downstream body %s; want the sender's %s", d.Body, ghBody)
		}
	}
	// No secret of any sender appears in the function's output or the table.
	for _, secret := range []string{swOld, swNew, stripeOld, stripeNew, ghOld, ghNew} {
		if strings.Contains(r.logs(), secret) {
			t.Errorf("a sender's secret appears in the function's output")
		}
	}
}
