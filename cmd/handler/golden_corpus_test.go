package main

import (
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncely/oncely/internal/config"
	"github.com/oncely/oncely/internal/testing/webhooksender"
	"github.com/oncely/oncely/internal/webhooksig"
)

// TestGolden runs the corpus through the function as wire builds it and
// compares every step's record with its golden file (golden_test.go says
// what is recorded and how it is made repeatable). Steps run in order, on
// one table: later steps meet what earlier ones stored.
func TestGolden(t *testing.T) {
	g := newGolden(t)

	// An SQS standard batch: two events, a duplicate of the first within
	// the batch, a transient downstream failure (503 on every attempt of
	// this delivery), a permanent one (404), and three poison bodies.
	g.at(1 * time.Minute)
	g.invoke("sqs-standard-batch", sqsBatch(
		sqsMsg("m01", `{"id":"order-1001","action":"notify","amount":12}`, 1),
		sqsMsg("m02", `{"id":"order-1002","action":"notify","amount":7}`, 1),
		sqsMsg("m03", `{"id":"order-1001","action":"notify","amount":12}`, 1),
		sqsMsg("m04", `{"id":"order-1003","action":"notify","fail_first":3}`, 1),
		sqsMsg("m05", `{"id":"order-1004","action":"notify","reply":404}`, 1),
		sqsMsg("m06", `this is not JSON`, 1),
		sqsMsg("m07", `{"action":"notify","amount":1}`, 1),
		sqsMsg("m08", `{"id":"order-1005","action":"notify","pad":"`+strings.Repeat("x", 1<<20)+`"}`, 1),
	))
	// The next invocations: a duplicate across invocations (replayed), the
	// transient failure again (its fourth POST succeeds), the permanent
	// one again (replayed, acknowledged) and a poison body again.
	g.at(2 * time.Minute)
	g.invoke("sqs-redelivery", sqsBatch(
		sqsMsg("m09", `{"id":"order-1001","action":"notify","amount":12}`, 1),
		sqsMsg("m04", `{"id":"order-1003","action":"notify","fail_first":3}`, 2),
		sqsMsg("m05", `{"id":"order-1004","action":"notify","reply":404}`, 2),
		sqsMsg("m06", `this is not JSON`, 2),
	))
	// The same key with another body: KEY_REUSED.
	g.invoke("sqs-key-reused", sqsBatch(
		sqsMsg("m10", `{"id":"order-1002","action":"notify","amount":8}`, 1),
	))

	// A FIFO batch: group tenant-a stops at its first failure (a2, a
	// transient one) and reports it and every later record of the group;
	// group tenant-b goes on.
	g.at(3 * time.Minute)
	g.invoke("sqs-fifo-batch", sqsBatch(
		fifoMsg("f01", "tenant-a", `{"id":"fifo-a1","action":"notify"}`),
		fifoMsg("f02", "tenant-b", `{"id":"fifo-b1","action":"notify"}`),
		fifoMsg("f03", "tenant-a", `{"id":"fifo-a2","action":"notify","fail_first":3}`),
		fifoMsg("f04", "tenant-a", `{"id":"fifo-a3","action":"notify"}`),
		fifoMsg("f05", "tenant-b", `{"id":"fifo-b2","action":"notify"}`),
	))

	// The HTTP API, POST /events: every answer the adapter gives.
	g.at(4 * time.Minute)
	body := `{"id":"api-1","action":"notify"}`
	g.invoke("api-success", apiRequest("golden-key-0001", body))
	g.invoke("api-replay", apiRequest("golden-key-0001", body))
	g.invoke("api-key-reused", apiRequest("golden-key-0001", `{"id":"api-1","action":"notify","changed":true}`))
	g.invoke("api-quoted-key-anonymous", anonymous(apiRequest(`"golden-key-0002"`, `{"id":"api-2","action":"notify"}`)))
	g.invoke("api-missing-key", apiRequest("", body))
	g.invoke("api-invalid-key", apiRequest("short", body))
	g.invoke("api-not-json", apiRequest("golden-key-0003", `{"id":`))
	g.invoke("api-no-identity", noSubject(apiRequest("golden-key-0004", body)))
	g.invoke("api-unknown-route", defaultRoute(apiRequest("golden-key-0005", body), "POST", "/orders"))
	g.invoke("api-wrong-method", defaultRoute(apiRequest("golden-key-0005", body), "GET", "/events"))
	g.invoke("api-too-large", apiRequest("golden-key-0006", `{"id":"api-6","action":"notify","pad":"`+strings.Repeat("x", 1<<20)+`"}`))
	g.invoke("api-unsupported-media-type", withHeader(apiRequest("golden-key-0007", `<event id="api-7"/>`), "content-type", "application/xml"))
	permanent := `{"id":"api-8","action":"notify","reply":404}`
	g.invoke("api-permanent-failure", apiRequest("golden-key-0008", permanent))
	g.invoke("api-permanent-failure-replay", apiRequest("golden-key-0008", permanent))
	transient := `{"id":"api-9","action":"notify","fail_first":3}`
	g.invoke("api-transient-failure", apiRequest("golden-key-0009", transient))
	g.at(4*time.Minute + 2*time.Second)
	g.invoke("api-transient-failure-retried", apiRequest("golden-key-0009", transient))
	g.at(4*time.Minute + 10*time.Second)
	hangUp := `{"id":"api-10","action":"notify","hang_up":true}`
	g.invoke("api-request-may-have-arrived", apiRequest("golden-key-0010", hangUp))
	g.at(4*time.Minute + 11*time.Second)
	g.invoke("api-held-off", apiRequest("golden-key-0010", hangUp))
	g.at(4*time.Minute + 20*time.Second)
	g.invokeInFlight("api-in-flight", apiRequest("golden-key-0011", `{"id":"api-11","action":"notify","hold":true}`))

	// The receiving route, POST /webhooks/{source}: each scheme queued,
	// and every refusal.
	g.at(5 * time.Minute)
	now := g.clock.Now()
	acme := []byte(`{"type":"invoice.paid","data":{"id":"inv_1","total":4200}}`)
	g.invoke("webhook-standard-queued", standardWebhook("msg_golden_0001", now, acme))
	g.invoke("webhook-standard-resent", standardWebhook("msg_golden_0001", now, acme))
	g.invoke("webhook-standard-id-reused", standardWebhook("msg_golden_0001", now, []byte(`{"type":"invoice.paid","data":{"id":"inv_2"}}`)))
	stripeEvent := []byte(`{"id":"evt_golden_0001","object":"event","type":"charge.succeeded","created":4102444800,"pending_webhooks":1,"data":{"object":{"id":"ch_1"}}}`)
	g.invoke("webhook-stripe-queued", stripeWebhook(now, stripeEvent))
	github := []byte(`{"action":"opened","number":7,"repository":{"full_name":"oncely/oncely"}}`)
	g.invoke("webhook-github-queued", githubWebhook("0b7c4c70-8a4e-11f0-9d4b-golden000001", github))
	g.invoke("webhook-unknown-source", source(standardWebhook("msg_golden_0002", now, acme), "nobody"))
	g.invoke("webhook-signature-missing", withoutHeader(standardWebhook("msg_golden_0003", now, acme), "webhook-signature"))
	g.invoke("webhook-signature-mismatch", withHeader(standardWebhook("msg_golden_0004", now, acme), "webhook-signature", "v1,"+strings.Repeat("A", 43)+"="))
	g.invoke("webhook-timestamp-outside-tolerance", standardWebhook("msg_golden_0005", now.Add(-time.Hour), acme))
	g.invoke("webhook-not-json", standardWebhook("msg_golden_0006", now, []byte(`not json`)))
	g.invoke("webhook-wrong-method", method(standardWebhook("msg_golden_0007", now, acme), "GET"))

	// The queue function processes the envelopes the route queued: the
	// resent delivery is the same key (coalesced); the reused id with
	// another body, in the next batch (in one batch the two bodies would
	// race for the key), is KEY_REUSED.
	g.at(6 * time.Minute)
	var envelopes []events.SQSMessage
	for i, msg := range g.aws.takeSent() {
		envelopes = append(envelopes, sqsMsg(fmt.Sprintf("w%02d", i+1), msg, 1))
	}
	if len(envelopes) != 5 {
		t.Fatalf("%d envelopes queued; want 5", len(envelopes))
	}
	reused := envelopes[2]
	envelopes = slices.Delete(envelopes, 2, 3)
	g.invoke("sqs-inbound-envelopes", sqsBatch(envelopes...))
	g.at(7 * time.Minute)
	g.invoke("sqs-inbound-envelope-id-reused", sqsBatch(reused))
	// A sender's retry after the queue path stored it: replayed.
	g.invoke("sqs-inbound-envelope-again", sqsBatch(sqsMsg("w99", envelopes[0].Body, 1)))

	g.items("items.json", goldenTable)

	// The ledger action, in a function of its own (a cold start): its
	// success is 201, and its entry is written with the record.
	g.rewire("ledger-init", map[string]string{
		config.EnvAction: config.ActionLedger, config.EnvLedgerTable: ledgerTable, config.EnvNamespace: "golden-ledger",
		config.EnvDownstreamURLSecret: "", config.EnvWebhookSecret: "", config.EnvInboundWebhooks: "",
		config.EnvInboundSources: "", config.EnvInboundQueueURL: "", config.EnvInboundProofSecret: "",
	})
	g.at(8 * time.Minute)
	g.invoke("ledger-api-created", apiRequest("golden-key-0101", `{"id":"ledger-1","action":"record","amount":3}`))
	g.invoke("ledger-api-replay", apiRequest("golden-key-0101", `{"id":"ledger-1","action":"record","amount":3}`))
	g.invoke("ledger-sqs-batch", sqsBatch(
		sqsMsg("m21", `{"id":"ledger-2","action":"record"}`, 1),
		sqsMsg("m22", `{"id":"ledger-3","action":"record"}`, 1),
		sqsMsg("m23", `{"id":"ledger-2","action":"record"}`, 1),
	))
	g.items("ledger-idempotency-items.json", goldenTable)
	g.items("ledger-entries.json", ledgerTable)
	g.checkNoStale()
}

// invokeInFlight runs two invocations of one request at once: the first
// holds in the downstream while the second arrives (409: in flight), then
// completes.
func (g *golden) invokeInFlight(name string, req events.APIGatewayV2HTTPRequest) {
	g.t.Helper()
	ctxFirst, first := g.ctx(apiTimeout)
	ctxSecond, second := g.ctx(apiTimeout)
	payload := json.RawMessage(mustJSON(req))
	type answer struct {
		resp any
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		resp, err := g.router.Invoke(ctxFirst, payload)
		done <- answer{resp, err}
	}()
	<-g.down.held
	secondResp, secondErr := g.router.Invoke(ctxSecond, payload)
	g.down.release <- struct{}{}
	a := <-done
	g.record(name, map[string]any{"event": abbreviate(req), "responses": map[string]any{
		first: response(a.resp, a.err), second: response(secondResp, secondErr),
	}})
}

func sqsBatch(msgs ...events.SQSMessage) events.SQSEvent { return events.SQSEvent{Records: msgs} }

// sqsMsg is a message of the standard queue as Lambda delivers it.
func sqsMsg(id, body string, receiveCount int) events.SQSMessage {
	sum := md5.Sum([]byte(body))
	return events.SQSMessage{
		MessageId:     "00000000-0000-4000-9000-0000000000" + strings.TrimLeft(id, "mfw"),
		ReceiptHandle: "AQEB-golden-" + id + "-" + strconv.Itoa(receiveCount),
		Body:          body,
		Md5OfBody:     hex.EncodeToString(sum[:]),
		Attributes: map[string]string{
			"ApproximateReceiveCount":          strconv.Itoa(receiveCount),
			"SentTimestamp":                    "4102444800000",
			"SenderId":                         "AIDAIENQZJOLO23YVJ4VO",
			"ApproximateFirstReceiveTimestamp": "4102444800012",
		},
		MessageAttributes: map[string]events.SQSMessageAttribute{},
		EventSource:       "aws:sqs",
		EventSourceARN:    queueARN,
		AWSRegion:         "us-east-1",
	}
}

// fifoMsg is a message of the FIFO queue, in group.
func fifoMsg(id, group, body string) events.SQSMessage {
	m := sqsMsg(id, body, 1)
	m.EventSourceARN = fifoQueueARN
	m.Attributes["MessageGroupId"] = group
	m.Attributes["SequenceNumber"] = "1884949646046769612" + strings.TrimLeft(id, "f")
	m.Attributes["MessageDeduplicationId"] = "dedup-" + id
	return m
}

// apiRequest is POST /events from a caller with a JWT of the configured
// issuer; an empty key sends no Idempotency-Key.
func apiRequest(key, body string) events.APIGatewayV2HTTPRequest {
	headers := map[string]string{
		"content-type":   "application/json",
		"content-length": strconv.Itoa(len(body)),
		"host":           "a1b2c3d4e5.execute-api.us-east-1.amazonaws.com",
		"user-agent":     "curl/8.5.0",
	}
	if key != "" {
		headers["idempotency-key"] = key
	}
	return events.APIGatewayV2HTTPRequest{
		Version: "2.0", RouteKey: "POST /events", RawPath: "/events", Headers: headers, Body: body,
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			AccountID: "123456789012", APIID: "a1b2c3d4e5", RouteKey: "POST /events", Stage: "$default",
			RequestID: "golden-apigw-request", DomainName: "a1b2c3d4e5.execute-api.us-east-1.amazonaws.com",
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "POST", Path: "/events", Protocol: "HTTP/1.1", SourceIP: "203.0.113.7", UserAgent: "curl/8.5.0"},
			Authorizer: &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
				JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{
					Claims: map[string]string{"sub": "user-123", "iss": "https://auth.example.invalid/", "aud": "oncely"},
					Scopes: []string{"events:write"},
				},
			},
		},
	}
}

func anonymous(req events.APIGatewayV2HTTPRequest) events.APIGatewayV2HTTPRequest {
	req.RequestContext.Authorizer = nil
	return req
}

func noSubject(req events.APIGatewayV2HTTPRequest) events.APIGatewayV2HTTPRequest {
	req.RequestContext.Authorizer.JWT.Claims = map[string]string{"iss": "https://auth.example.invalid/", "aud": "oncely"}
	return req
}

// defaultRoute is req as the catch-all $default route passes it.
func defaultRoute(req events.APIGatewayV2HTTPRequest, method, path string) events.APIGatewayV2HTTPRequest {
	req.RouteKey, req.RequestContext.RouteKey = "$default", "$default"
	req.RawPath, req.RequestContext.HTTP.Path, req.RequestContext.HTTP.Method = path, path, method
	return req
}

func withHeader(req events.APIGatewayV2HTTPRequest, name, value string) events.APIGatewayV2HTTPRequest {
	h := make(map[string]string, len(req.Headers)+1)
	for k, v := range req.Headers {
		h[k] = v
	}
	h[name] = value
	req.Headers = h
	return req
}

func withoutHeader(req events.APIGatewayV2HTTPRequest, name string) events.APIGatewayV2HTTPRequest {
	h := make(map[string]string, len(req.Headers))
	for k, v := range req.Headers {
		if k != name {
			h[k] = v
		}
	}
	req.Headers = h
	return req
}

// webhook is a delivery to POST /webhooks/{source}, with no authorizer.
func webhook(src string, headers map[string]string, body []byte) events.APIGatewayV2HTTPRequest {
	h := map[string]string{
		"content-type":   "application/json",
		"content-length": strconv.Itoa(len(body)),
		"host":           "a1b2c3d4e5.execute-api.us-east-1.amazonaws.com",
		"user-agent":     "golden-sender/1.0",
	}
	for k, v := range headers {
		h[strings.ToLower(k)] = v
	}
	path := "/webhooks/" + src
	return events.APIGatewayV2HTTPRequest{
		Version: "2.0", RouteKey: "POST /webhooks/{source}", RawPath: path, Headers: h, Body: string(body),
		PathParameters: map[string]string{"source": src},
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			AccountID: "123456789012", APIID: "a1b2c3d4e5", RouteKey: "POST /webhooks/{source}", Stage: "$default",
			RequestID: "golden-apigw-request", DomainName: "a1b2c3d4e5.execute-api.us-east-1.amazonaws.com",
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "POST", Path: path, Protocol: "HTTP/1.1", SourceIP: "198.51.100.9", UserAgent: "golden-sender/1.0"},
		},
	}
}

func standardWebhook(id string, ts time.Time, body []byte) events.APIGatewayV2HTTPRequest {
	key, err := webhooksig.DecodeSecret(acmeKey)
	if err != nil {
		panic(err)
	}
	return webhook("acme", webhooksender.StandardWebhooks(id, ts, body, key), body)
}

func stripeWebhook(ts time.Time, body []byte) events.APIGatewayV2HTTPRequest {
	return webhook("stripe", map[string]string{"stripe-signature": webhooksender.Stripe(ts, body, stripeKey)}, body)
}

func githubWebhook(delivery string, body []byte) events.APIGatewayV2HTTPRequest {
	return webhook("github", map[string]string{
		"x-github-delivery": delivery, "x-github-event": "pull_request",
		"x-hub-signature-256": webhooksender.GitHub(githubKey, body),
	}, body)
}

// source is req sent to another source's path.
func source(req events.APIGatewayV2HTTPRequest, name string) events.APIGatewayV2HTTPRequest {
	req.PathParameters = map[string]string{"source": name}
	req.RawPath = "/webhooks/" + name
	req.RequestContext.HTTP.Path = req.RawPath
	return req
}

func method(req events.APIGatewayV2HTTPRequest, m string) events.APIGatewayV2HTTPRequest {
	req.RequestContext.HTTP.Method = m
	req.RouteKey, req.RequestContext.RouteKey, req.PathParameters = "$default", "$default", nil
	return req
}
