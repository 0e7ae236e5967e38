package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/oncely/oncely/internal/receiving"
	"github.com/oncely/oncely/internal/testing/ddblocal"
	"github.com/oncely/oncely/internal/testing/faults"
	"github.com/oncely/oncely/internal/testing/webhooksender"
)

// secretsBrownout is a fault proxy in front of moto's Secrets Manager that
// answers 503 to every request while down.
func secretsBrownout(t *testing.T) (url string, down *atomic.Bool) {
	t.Helper()
	requireE2E(t)
	down = new(atomic.Bool)
	p := &faults.Proxy{Target: os.Getenv(ddblocal.EnvMoto), Replies: ddblocal.Replies, Decide: func(string, string) faults.Decision {
		if down.Load() {
			return faults.Decision{Kind: faults.Unavailable}
		}
		return faults.Decision{}
	}}
	url, err := p.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return url, down
}

// Secrets Manager is down at the cold start (every call answered 503) and
// back a few seconds later. The function starts all the same (an outage is
// not a misconfiguration), and until its secrets are read nothing is
// acknowledged: every record of the queue's batches goes back, no event
// is delivered or stored as done, an API request gets 503 with Retry-After,
// and so does the receiving route. Once Secrets Manager answers, every
// event is delivered, once.
func TestE2ESecretsManagerDownAtColdStart(t *testing.T) {
	proxy, down := secretsBrownout(t)
	sources := "oncely-e2e-sources-" + webhooksender.Alphanumeric(8)
	urlSecret := "oncely-e2e-url-" + webhooksender.Alphanumeric(8)
	proof := "oncely-e2e-proof-" + webhooksender.Alphanumeric(8)
	f := startWith(t, fnOptions{timeout: 10, secrets: proxy, env: []string{"DOWNSTREAM_URL=", "DOWNSTREAM_URL_SECRET=" + urlSecret,
		"INBOUND_WEBHOOKS=on", "INBOUND_SOURCES_SECRET=" + sources, "INBOUND_QUEUE_URL=http://127.0.0.1:9/000000000000/unused", "INBOUND_PROOF_SECRET=" + proof}})
	ctx := context.Background()
	for name, value := range map[string]string{urlSecret: f.downURL, sources: `{"acme":{"scheme":"standard-webhooks","secrets":["whsec_` + webhooksender.Alphanumeric(32) + `"]}}`,
		proof: webhooksender.Alphanumeric(32)} {
		if _, err := f.sm.CreateSecret(ctx, &secretsmanager.CreateSecretInput{Name: aws.String(name), SecretString: aws.String(value)}); err != nil {
			t.Fatal(err)
		}
	}
	down.Store(true) // before the first invoke: the function's init is then

	var batch [][2]string
	for i := range 3 {
		id := fmt.Sprintf("brownout-%d", i)
		batch = append(batch, [2]string{"m-" + id, `{"id":"` + id + `","action":"notify"}`})
	}
	api := func(key string) events.APIGatewayV2HTTPResponse {
		t.Helper()
		raw, err := f.emu.Invoke(ctx, apiPayload(t, key, `{"id":"brownout-api","action":"notify"}`))
		if err != nil {
			t.Fatal(err)
		}
		var resp events.APIGatewayV2HTTPResponse
		if err := json.Unmarshal(raw, &resp); err != nil || resp.StatusCode == 0 {
			t.Fatalf("invoke answered %.300q; want an HTTP API response", raw)
		}
		return resp
	}
	webhook := func() events.APIGatewayV2HTTPResponse {
		t.Helper()
		req := events.APIGatewayV2HTTPRequest{Version: "2.0", RouteKey: receiving.WebhookRouteKey, RawPath: "/webhooks/acme",
			PathParameters: map[string]string{"source": "acme"}, Headers: map[string]string{"content-type": "application/json"}, Body: `{}`,
			RequestContext: events.APIGatewayV2HTTPRequestContext{Stage: "$default", RouteKey: receiving.WebhookRouteKey, RequestID: "req-webhook",
				HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "POST", Path: "/webhooks/acme"}}}
		payload, _ := json.Marshal(req)
		raw, err := f.emu.Invoke(ctx, payload)
		if err != nil {
			t.Fatal(err)
		}
		var resp events.APIGatewayV2HTTPResponse
		if err := json.Unmarshal(raw, &resp); err != nil || resp.StatusCode == 0 {
			t.Fatalf("invoke answered %.300q; want an HTTP API response", raw)
		}
		return resp
	}

	// Down: the cold start succeeds (f.sqs fails the test on a function
	// error), and every record goes back.
	for round := range 2 {
		if ids := f.sqs(sqsBatch(t, batch...)); len(ids) != len(batch) {
			t.Fatalf("round %d while Secrets Manager is down: failures %v; want every record back", round, ids)
		}
	}
	if resp := api("brownout-api-1"); resp.StatusCode != 503 || resp.Headers["Retry-After"] == "" {
		t.Errorf("an API request while Secrets Manager is down: %d %v %s; want 503 with Retry-After", resp.StatusCode, resp.Headers, resp.Body)
	}
	if resp := webhook(); resp.StatusCode != 503 || resp.Headers["Retry-After"] == "" {
		t.Errorf("the receiving route while Secrets Manager is down: %d %v %s; want 503 with Retry-After", resp.StatusCode, resp.Headers, resp.Body)
	}
	waitLog(t, f, "a secret could not be read at init; starting anyway")
	if f.down.Total() != 0 {
		t.Fatalf("%d deliveries while the URL and the keys were unread; want none", f.down.Total())
	}
	for _, m := range batch {
		key := "evt:" + strings.TrimPrefix(m[0], "m-") + ":notify"
		if rec := f.record(key); s(rec, "status") == "SUCCEEDED" || (s(rec, "status") == "FAILED" && s(rec, "retryable") != "true") {
			t.Fatalf("%s while Secrets Manager is down: %v; want nothing stored as done", key, rec)
		}
	}

	// Back: the next deliveries read the secrets (after the reads' backoff,
	// at most 8 s) and go through.
	down.Store(false)
	left := batch
	for deadline := time.Now().Add(60 * time.Second); len(left) > 0; time.Sleep(500 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("60 s after Secrets Manager came back, %d records still go back", len(left))
		}
		failed := f.sqs(sqsBatch(t, left...))
		var next [][2]string
		for _, m := range left {
			for _, id := range failed {
				if id == m[0] {
					next = append(next, m)
				}
			}
		}
		left = next
	}
	for _, m := range batch {
		key := "evt:" + strings.TrimPrefix(m[0], "m-") + ":notify"
		if n := f.down.Count(key); n != 1 {
			t.Errorf("%s: %d deliveries; want 1", key, n)
		}
		if rec := f.record(key); s(rec, "status") != "SUCCEEDED" {
			t.Errorf("%s: %v; want SUCCEEDED", key, rec)
		}
	}
	if resp := api("brownout-api-2"); resp.StatusCode != 200 {
		t.Errorf("an API request once Secrets Manager is back: %d %s; want 200", resp.StatusCode, resp.Body)
	}
	// A delivery signed with the keys read late verifies.
	got := verify(t, f.secret, map[string]verifyCase{"late": {headers: f.down.Audit()[0].Headers, body: f.down.Audit()[0].Body}})
	if !got["late"].OK {
		t.Errorf("a delivery after the brownout does not verify with the signing secret: %s", got["late"].Error)
	}
}

// A secret that is missing (a permanent error, not an outage) still fails
// the init with one line naming the variable and the secret, while the
// other secrets are read at the same time.
func TestE2EMissingSecretStillFailsInitWithOneLine(t *testing.T) {
	missing := "oncely-e2e-missing-" + webhooksender.Alphanumeric(8)
	f := start(t, 10, "INBOUND_WEBHOOKS=on", "INBOUND_SOURCES_SECRET="+missing, "INBOUND_QUEUE_URL=http://127.0.0.1:9/000000000000/unused",
		"INBOUND_PROOF_SECRET="+missing+"-proof")
	body, err := f.emu.Invoke(context.Background(), sqsBatch(t, [2]string{"m1", body42}))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(body), "batchItemFailures") || !strings.Contains(string(body), "errorType") {
		t.Fatalf("a function with a missing secret answered %q; want a function error, never a batch response", body)
	}
	waitLog(t, f, "config: INBOUND_SOURCES_SECRET: secret "+missing+" has no AWSCURRENT version (or does not exist)")
	if strings.Contains(f.emu.Log(), "starting anyway") {
		t.Errorf("a missing secret was taken for an outage")
	}
	if f.down.Total() != 0 {
		t.Errorf("a misconfigured function delivered")
	}
}

// A re-read of the signing keys that fails (Secrets Manager answering 503
// during one delivery) right after a rotation: that delivery
// goes out with the keys read before, as documented, but the next read is
// tried within seconds, not after 30 s, so a delivery 3 s later carries
// the new key.
func TestE2EAFailedKeyRefreshIsRetriedWithinSeconds(t *testing.T) {
	requireE2E(t)
	var fail atomic.Bool // every GetSecretValue fails while set
	p := &faults.Proxy{Target: os.Getenv(ddblocal.EnvMoto), Replies: ddblocal.Replies,
		Describe: func(req *http.Request, _ []byte) (string, string) { return req.Header.Get("X-Amz-Target"), "" },
		Decide: func(op, _ string) faults.Decision {
			if op == "secretsmanager.GetSecretValue" && fail.Load() {
				return faults.Decision{Kind: faults.Unavailable}
			}
			return faults.Decision{}
		}}
	proxy, err := p.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	f := startWith(t, fnOptions{timeout: 10, secrets: proxy, env: []string{"WEBHOOK_SECRET_REFRESH=1ms"}})
	ctx := context.Background()
	cases := map[string]verifyCase{}
	n := 0
	deliver := func(step string) {
		t.Helper()
		n++
		id := fmt.Sprintf("refresh-%d", n)
		if ids := f.sqs(sqsBatch(t, [2]string{"m-" + id, `{"id":"` + id + `","action":"notify"}`})); len(ids) != 0 {
			t.Fatalf("%s: failures %v; want the delivery made", step, ids)
		}
		audit := f.down.Audit()
		cases[step] = verifyCase{headers: audit[len(audit)-1].Headers, body: audit[len(audit)-1].Body}
	}
	deliver("before")
	newValue := webhooksender.Alphanumeric(32)
	if _, err := f.sm.PutSecretValue(ctx, &secretsmanager.PutSecretValueInput{SecretId: &f.secretARN, SecretString: &newValue}); err != nil {
		t.Fatal(err)
	}
	fail.Store(true) // the delivery's re-read fails (every attempt the SDK makes)
	deliver("refresh failed")
	fail.Store(false)
	time.Sleep(3 * time.Second) // past the failed read's 1 s backoff
	deliver("3 s later")
	got := verify(t, "whsec_"+newValue, cases)
	if got["before"].OK {
		t.Errorf("the delivery before the rotation verifies with the new secret")
	}
	if !got["3 s later"].OK {
		t.Errorf("a delivery 3 s after a failed re-read is not signed with the rotated key (%s): the failed re-read pinned the old keys", got["3 s later"].Error)
	}
	waitLog(t, f, "signing secret not re-read")
}
