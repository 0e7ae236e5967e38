package inbound_test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/inbound"
	"github.com/oncely/oncely/internal/testing/webhooksender"
)

// Secrets as the senders show them. The second of each pair is a rotation's
// new secret.
var (
	swKey1, swKey2   = []byte("0123456789abcdef01234567"), []byte("76543210fedcba9876543210XYZ")
	swSecret1        = "whsec_" + base64.StdEncoding.EncodeToString(swKey1)
	swSecret2        = "whsec_" + base64.RawStdEncoding.EncodeToString(swKey2) // unpadded, as some senders write it
	stripeSecret1    = "whsec_stripeSecretNumberOne1234567890"
	stripeSecret2    = "whsec_stripeSecretNumberTwo0987654321"
	githubSecret1    = webhooksender.GitHubTestVector.Secret
	githubSecret2    = "another-github-secret-0123456789"
	now              = time.Unix(1_780_000_000, 0)
	swBody           = []byte(`{"type":"invoice.paid","data":{"id":"inv_1","amount":4200}}`)
	stripeBody       = []byte(`{"id":"evt_1NG8Du2eZvKYlo2CUI79vXWy","object":"event","api_version":"2024-06-20","created":1780000000,"data":{"object":{"id":"pi_1","amount":4200}},"livemode":false,"pending_webhooks":1,"request":{"id":null,"idempotency_key":null},"type":"payment_intent.succeeded"}`)
	githubBody       = []byte(`{"zen":"Keep it logically awesome.","hook_id":12345678}`)
	githubDeliveryID = "72d3162e-cc78-11e3-81ab-4c9367dc0958"
	// githubKey is githubBody's key from the source "github": the hex
	// SHA-256 of its canonical JSON (the scheme vector's, see scheme_test.go).
	githubKey   = "wh:github:sha256:b18f9f660d2146556d9afc144cd66f75a7a682d29b3e9613925e94d096019759"
	sourcesJSON = `{"acme":{"scheme":"standard-webhooks","secrets":["` + swSecret1 + `","` + swSecret2 + `"]},` +
		`"stripe":{"scheme":"stripe","secrets":["` + stripeSecret1 + `","` + stripeSecret2 + `"]},` +
		`"github":{"scheme":"github","secrets":["` + githubSecret1 + `","` + githubSecret2 + `"]}}`
	allSecretValues = []string{swSecret1, swSecret2, stripeSecret1, stripeSecret2, githubSecret1, githubSecret2,
		base64.StdEncoding.EncodeToString(swKey1), base64.RawStdEncoding.EncodeToString(swKey2)}
)

func sources(t *testing.T) *inbound.Sources {
	t.Helper()
	s, err := inbound.ParseSources(sourcesJSON)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func source(t *testing.T, name string) *inbound.Source {
	t.Helper()
	src, ok := sources(t).Lookup(name)
	if !ok {
		t.Fatalf("no source %s", name)
	}
	return src
}

func TestParseSources(t *testing.T) {
	s := sources(t)
	if diff := cmp.Diff([]string{"acme", "github", "stripe"}, s.Names()); diff != "" {
		t.Errorf("Names (-want +got):\n%s", diff)
	}
	for name, want := range map[string]inbound.Scheme{"acme": inbound.StandardWebhooks, "stripe": inbound.Stripe, "github": inbound.GitHub} {
		src, _ := s.Lookup(name)
		if src.Scheme != want || src.Keys() != 2 {
			t.Errorf("%s: scheme %s with %d keys, want %s with 2", name, src.Scheme, src.Keys(), want)
		}
	}
	if _, ok := s.Lookup("unknown"); ok {
		t.Error("Lookup(unknown) found a source")
	}
	empty, err := inbound.ParseSources(`{}`)
	if err != nil || len(empty.Names()) != 0 {
		t.Errorf("ParseSources({}) got %v, %v; want no sources, no error", empty.Names(), err)
	}
	var none *inbound.Sources
	if _, ok := none.Lookup("acme"); ok || none.Names() != nil {
		t.Error("a nil *Sources has sources")
	}
}

func TestParseSourcesRefusesWithoutQuotingSecrets(t *testing.T) {
	short := "whsec_" + base64.StdEncoding.EncodeToString([]byte("only-16-bytes!!!"))
	for _, c := range []struct{ name, text, want string }{
		{"not JSON", `{"acme": whsec_oops}`, "not valid JSON (syntax error at byte"},
		{"null", `null`, "got null"},
		{"an array", `["acme"]`, "want map"},
		{"trailing data", `{} {}`, "data after the JSON object"},
		{"name with a colon", `{"ac:me":{"scheme":"github","secrets":["` + githubSecret2 + `"]}}`, `the name "ac:me" is not 1 to 32 characters`},
		{"upper-case name", `{"Acme":{"scheme":"github","secrets":["` + githubSecret2 + `"]}}`, `the name "Acme"`},
		{"long name", `{"` + strings.Repeat("a", 33) + `":{"scheme":"github","secrets":["` + githubSecret2 + `"]}}`, "is not 1 to 32 characters"},
		{"empty name", `{"":{"scheme":"github","secrets":["` + githubSecret2 + `"]}}`, `the name ""`},
		{"named twice", `{"acme":{"scheme":"github","secrets":["` + githubSecret2 + `"]},"acme":{"scheme":"stripe","secrets":["` + stripeSecret1 + `"]}}`, `"acme" is named twice`},
		{"unknown scheme", `{"acme":{"scheme":"svix","secrets":["` + swSecret1 + `"]}}`, `acme: scheme "svix" is not one of`},
		{"typo in a member", `{"acme":{"scheme":"github","secret":["` + githubSecret2 + `"]}}`, `unknown field "secret"`},
		{"no secrets", `{"acme":{"scheme":"github","secrets":[]}}`, "acme: secrets is empty"},
		{"a secret that is a number", `{"acme":{"scheme":"github","secrets":[12]}}`, "is a JSON number; want string"},
		{"standard secret not base64", `{"acme":{"scheme":"standard-webhooks","secrets":["whsec_` + githubSecret2 + `!"]}}`, "acme: secrets[0]: a Standard Webhooks secret is whsec_ followed by base64"},
		{"standard key too short", `{"acme":{"scheme":"standard-webhooks","secrets":["` + swSecret1 + `","` + short + `"]}}`, "acme: secrets[1]: a Standard Webhooks key must be at least 24 bytes; this one is 16"},
		{"stripe API key instead", `{"pay":{"scheme":"stripe","secrets":["sk_live_0123456789abcdef"]}}`, "pay: secrets[0]: a Stripe signing secret starts with whsec_"},
		{"github secret too short", `{"gh":{"scheme":"github","secrets":["hunter2-hunter2"]}}`, "gh: secrets[0]: a GitHub webhook secret must be at least 16 characters; this one is 15"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := inbound.ParseSources(c.text)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
			for _, secret := range append(allSecretValues, "sk_live_0123456789abcdef", "hunter2-hunter2", "whsec_oops", short) {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("the error %q quotes a secret", err)
				}
			}
		})
	}
}

// request is one delivery as the route gets it.
type request struct {
	headers map[string]string
	body    []byte
}

func swRequest(id string, at time.Time, body []byte, keys ...[]byte) request {
	return request{headers: webhooksender.StandardWebhooks(id, at, body, keys...), body: body}
}

func stripeRequest(at time.Time, body []byte, secrets ...string) request {
	return request{headers: map[string]string{"stripe-signature": webhooksender.Stripe(at, body, secrets...)}, body: body}
}

func githubRequest(id string, body []byte, secret string) request {
	return request{headers: map[string]string{"x-hub-signature-256": webhooksender.GitHub(secret, body), "x-github-delivery": id, "x-github-event": "ping"}, body: body}
}

func with(r request, name, value string) request {
	h := map[string]string{}
	for k, v := range r.headers {
		h[k] = v
	}
	if value == "" {
		delete(h, name)
	} else {
		h[name] = value
	}
	return request{headers: h, body: r.body}
}

func TestVerify(t *testing.T) {
	const swID = "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W"
	stripeID := "evt_1NG8Du2eZvKYlo2CUI79vXWy"
	wrongKey := []byte("this-is-not-the-right-key-at-all")
	good := map[string]request{
		"acme":   swRequest(swID, now, swBody, swKey1),
		"stripe": stripeRequest(now, stripeBody, stripeSecret1),
		"github": githubRequest(githubDeliveryID, githubBody, githubSecret1),
	}
	for _, c := range []struct {
		name, source string
		req          request
		wantCode     idem.Code // "" for verified
		wantKey      string
		wantIn       string // in the error message
	}{
		// Standard Webhooks.
		{"standard: signed with the first secret", "acme", good["acme"], "", "wh:acme:" + swID, ""},
		{"standard: signed with the rotation's new secret", "acme", swRequest(swID, now, swBody, swKey2), "", "wh:acme:" + swID, ""},
		{"standard: the sender's rotation, two signatures, one ours", "acme", swRequest(swID, now, swBody, wrongKey, swKey1), "", "wh:acme:" + swID, ""},
		{"standard: a v1a signature beside the v1", "acme", with(good["acme"], "webhook-signature", "v1a,AAAA "+good["acme"].headers["webhook-signature"]), "", "wh:acme:" + swID, ""},
		{"standard: header names in another case", "acme", request{headers: map[string]string{"Webhook-Id": swID, "WEBHOOK-TIMESTAMP": good["acme"].headers["webhook-timestamp"], "Webhook-Signature": good["acme"].headers["webhook-signature"]}, body: swBody}, "", "wh:acme:" + swID, ""},
		{"standard: whitespace around the body", "acme", swRequest(swID, now, []byte(" \n"+string(swBody)+"\n"), swKey1), "", "wh:acme:" + swID, ""},
		{"standard: 4 minutes old", "acme", swRequest(swID, now.Add(-4*time.Minute), swBody, swKey1), "", "wh:acme:" + swID, ""},
		{"standard: no signature header", "acme", with(good["acme"], "webhook-signature", ""), idem.CodeSignatureMissing, "", "missing header webhook-signature"},
		{"standard: no id or timestamp", "acme", with(with(good["acme"], "webhook-id", ""), "webhook-timestamp", ""), idem.CodeSignatureMissing, "", "missing header webhook-id, webhook-timestamp"},
		{"standard: timestamp in milliseconds", "acme", with(good["acme"], "webhook-timestamp", strconv.FormatInt(now.UnixMilli(), 10)+"0"), idem.CodeSignatureMalformed, "", "not a whole number of Unix seconds"},
		{"standard: timestamp with a fraction", "acme", with(good["acme"], "webhook-timestamp", "1780000000.5"), idem.CodeSignatureMalformed, "", "not a whole number"},
		{"standard: signature without a version", "acme", with(good["acme"], "webhook-signature", "c2lnbmF0dXJl"), idem.CodeSignatureMalformed, "", "without a version"},
		{"standard: only v1a", "acme", with(good["acme"], "webhook-signature", "v1a,c2lnbmF0dXJl"), idem.CodeSignatureMalformed, "", "no v1 signature"},
		{"standard: v1 not base64", "acme", with(good["acme"], "webhook-signature", "v1,###"), idem.CodeSignatureMalformed, "", "not base64"},
		{"standard: wrong secret", "acme", swRequest(swID, now, swBody, wrongKey), idem.CodeSignatureMismatch, "", "no signature in webhook-signature matches"},
		{"standard: tampered body", "acme", request{headers: good["acme"].headers, body: []byte(strings.Replace(string(swBody), "4200", "4201", 1))}, idem.CodeSignatureMismatch, "", ""},
		{"standard: another id under the same signature", "acme", with(good["acme"], "webhook-id", "msg_other"), idem.CodeSignatureMismatch, "", ""},
		{"standard: another timestamp under the same signature", "acme", with(good["acme"], "webhook-timestamp", strconv.FormatInt(now.Unix()+1, 10)), idem.CodeSignatureMismatch, "", ""},
		{"standard: stale", "acme", swRequest(swID, now.Add(-6*time.Minute), swBody, swKey1), idem.CodeTimestampOutsideTolerance, "", "360 s before now; the tolerance is 300 s"},
		{"standard: from the future", "acme", swRequest(swID, now.Add(10*time.Minute), swBody, swKey1), idem.CodeTimestampOutsideTolerance, "", "600 s after now"},
		{"standard: authentic, body not JSON", "acme", swRequest(swID, now, []byte("payload=1"), swKey1), idem.CodeInvalidPayload, "", "not a JSON document"},
		{"standard: authentic, body with a duplicate name", "acme", swRequest(swID, now, []byte(`{"a":1,"a":2}`), swKey1), idem.CodeInvalidPayload, "", "duplicate"},
		{"standard: authentic, id not fit for a key", "acme", swRequest("msg 1/2", now, swBody, swKey1), idem.CodeInvalidKey, "", "the delivery id cannot be part of a key"},
		{"standard: authentic, id too long for a key", "acme", swRequest(strings.Repeat("m", 121), now, swBody, swKey1), idem.CodeInvalidKey, "", "128"},
		// Stripe.
		{"stripe: signed", "stripe", good["stripe"], "", "wh:stripe:" + stripeID, ""},
		{"stripe: signed with the rotation's new secret", "stripe", stripeRequest(now, stripeBody, stripeSecret2), "", "wh:stripe:" + stripeID, ""},
		{"stripe: two v1 signatures during Stripe's rotation", "stripe", stripeRequest(now, stripeBody, "whsec_expired_secret_000000", stripeSecret1), "", "wh:stripe:" + stripeID, ""},
		{"stripe: a v0 item is ignored", "stripe", with(good["stripe"], "stripe-signature", good["stripe"].headers["stripe-signature"]+",v0=6ffbb59b2300aae63f272406069a9788598b792a944a07aba816edb039989a39"), "", "wh:stripe:" + stripeID, ""},
		{"stripe: no header", "stripe", request{headers: map[string]string{}, body: stripeBody}, idem.CodeSignatureMissing, "", "missing header Stripe-Signature"},
		{"stripe: no timestamp", "stripe", with(good["stripe"], "stripe-signature", strings.SplitN(good["stripe"].headers["stripe-signature"], ",", 2)[1]), idem.CodeSignatureMalformed, "", "no t= timestamp"},
		{"stripe: no v1", "stripe", with(good["stripe"], "stripe-signature", "t="+strconv.FormatInt(now.Unix(), 10)), idem.CodeSignatureMalformed, "", "no v1 signature"},
		{"stripe: two timestamps", "stripe", with(good["stripe"], "stripe-signature", "t=1,"+good["stripe"].headers["stripe-signature"]), idem.CodeSignatureMalformed, "", "two timestamps"},
		{"stripe: not key=value", "stripe", with(good["stripe"], "stripe-signature", "garbage"), idem.CodeSignatureMalformed, "", "not key=value"},
		{"stripe: wrong secret", "stripe", stripeRequest(now, stripeBody, "whsec_not_the_endpoint_secret"), idem.CodeSignatureMismatch, "", ""},
		{"stripe: tampered body", "stripe", request{headers: good["stripe"].headers, body: []byte(strings.Replace(string(stripeBody), "4200", "1", 1))}, idem.CodeSignatureMismatch, "", ""},
		{"stripe: stale", "stripe", stripeRequest(now.Add(-301*time.Second), stripeBody, stripeSecret1), idem.CodeTimestampOutsideTolerance, "", "301 s before now"},
		{"stripe: authentic, no id", "stripe", stripeRequest(now, []byte(`{"object":"event"}`), stripeSecret1), idem.CodeKeyMissing, "", "the Stripe event has no id"},
		{"stripe: authentic, not an object", "stripe", stripeRequest(now, []byte(`["evt_1"]`), stripeSecret1), idem.CodeInvalidPayload, "", "JSON object"},
		// GitHub.
		{"github: signed", "github", good["github"], "", githubKey, ""},
		{"github: signed with the rotation's new secret", "github", githubRequest(githubDeliveryID, githubBody, githubSecret2), "", githubKey, ""},
		{"github: only the SHA-1 header", "github", with(with(good["github"], "x-hub-signature-256", ""), "x-hub-signature", "sha1=abc"), idem.CodeSignatureMissing, "", "only the SHA-1 X-Hub-Signature is present"},
		{"github: not sha256=", "github", with(good["github"], "x-hub-signature-256", strings.Replace(good["github"].headers["x-hub-signature-256"], "sha256=", "sha1=", 1)), idem.CodeSignatureMalformed, "", "sha256=<64 hex digits>"},
		{"github: short hex", "github", with(good["github"], "x-hub-signature-256", "sha256=abcd"), idem.CodeSignatureMalformed, "", ""},
		{"github: wrong secret", "github", githubRequest(githubDeliveryID, githubBody, "not-the-right-secret-at-all"), idem.CodeSignatureMismatch, "", ""},
		{"github: tampered body", "github", request{headers: good["github"].headers, body: []byte(`{"zen":"Keep it logically awesome!","hook_id":12345678}`)}, idem.CodeSignatureMismatch, "", ""},
		{"github: authentic, no delivery header", "github", with(good["github"], "x-github-delivery", ""), idem.CodeKeyMissing, "", "X-GitHub-Delivery is missing"},
		// GitHub signs the body only: a captured delivery verifies under any
		// delivery id, at any time, and is keyed by its body, so it is the
		// same key under any id (see docs/inbound-webhooks.md).
		{"github: a captured delivery with another delivery id", "github", with(good["github"], "x-github-delivery", "00000000-0000-0000-0000-000000000000"), "", githubKey, ""},
		{"github: authentic, an id unfit for a key", "github", with(good["github"], "x-github-delivery", "a b"), idem.CodeInvalidKey, "", "the delivery id cannot be part of a key"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, err := source(t, c.source).Verify(c.req.headers, c.req.body, now, 0)
			if c.wantCode == "" {
				if err != nil {
					t.Fatalf("got %v, want verified", err)
				}
				if d.Key != c.wantKey || d.Source != c.source {
					t.Errorf("key %q source %q, want %q %q", d.Key, d.Source, c.wantKey, c.source)
				}
				if want := strings.Trim(string(c.req.body), " \n"); string(d.Body) != want {
					t.Errorf("body %q, want the body as signed, trimmed: %q", d.Body, want)
				}
				return
			}
			var e *idem.Error
			if !errors.As(err, &e) || e.Code != c.wantCode || !strings.Contains(e.Message, c.wantIn) {
				t.Fatalf("got %v, want %s containing %q", err, c.wantCode, c.wantIn)
			}
			for _, secret := range allSecretValues {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("the error quotes a secret: %v", err)
				}
			}
		})
	}
}

// The delivery id a refused request claims is reported for the log, not
// verified.
func TestVerifyReportsTheClaimedID(t *testing.T) {
	r := stripeRequest(now, stripeBody, "whsec_not_the_endpoint_secret")
	d, err := source(t, "stripe").Verify(r.headers, r.body, now, 0)
	if err == nil || d.ID != "evt_1NG8Du2eZvKYlo2CUI79vXWy" || d.Key != "" {
		t.Errorf("got id %q key %q err %v, want the claimed id, no key, an error", d.ID, d.Key, err)
	}
}

func TestVerifyTolerance(t *testing.T) {
	r := swRequest("msg_1", now.Add(-50*time.Second), swBody, swKey1)
	if _, err := source(t, "acme").Verify(r.headers, r.body, now, 30*time.Second); err == nil {
		t.Error("a 50 s old delivery passed a 30 s tolerance")
	}
	if _, err := source(t, "acme").Verify(r.headers, r.body, now, time.Minute); err != nil {
		t.Errorf("a 50 s old delivery failed a 1 min tolerance: %v", err)
	}
}

// The GitHub scheme accepts the delivery of GitHub's published test vector
// (its body is not JSON, so it stops after the signature).
func TestVerifyGitHubTestVector(t *testing.T) {
	v := webhooksender.GitHubTestVector
	s, err := inbound.ParseSources(`{"gh":{"scheme":"github","secrets":["` + v.Secret + `"]}}`)
	if err != nil {
		t.Fatal(err)
	}
	src, _ := s.Lookup("gh")
	_, err = src.Verify(map[string]string{"x-hub-signature-256": v.Signature, "x-github-delivery": "d-1"}, []byte(v.Payload), now, 0)
	var e *idem.Error
	if !errors.As(err, &e) || e.Code != idem.CodeInvalidPayload {
		t.Fatalf("got %v, want the signature accepted and the body refused as not JSON", err)
	}
}

func TestKey(t *testing.T) {
	for _, c := range []struct{ source, id, want string }{
		{"acme", "msg_1", "wh:acme:msg_1"},
		{"gh", "a:b", "wh:gh:a:b"}, // the source has no ':', so the id may
		{"ac:me", "x", ""},
		{"acme", "", ""},
		{"acme", "a b", ""},
	} {
		got, err := inbound.Key(c.source, c.id)
		if got != c.want || (err == nil) != (c.want != "") {
			t.Errorf("Key(%q, %q) got %q, %v; want %q", c.source, c.id, got, err, c.want)
		}
	}
}

// A GitHub delivery is keyed by its body, whatever its id: the route, the
// envelope and BodyKey agree; another id is the same key; the same id over
// another body (a second hook or App receiving the event) is another key;
// the body pretty-printed (as GitHub's Recent Deliveries shows it) is the
// same key. Keys stay valid with the longest source name.
func TestGitHubKeyedByBody(t *testing.T) {
	key, digest, err := inbound.BodyKey("github", githubBody)
	if err != nil || key != githubKey || !strings.HasSuffix(key, ":sha256:"+digest) {
		t.Fatalf("BodyKey got %q, %q, %v; want %q", key, digest, err, githubKey)
	}
	request := func(source, id, body string) idem.Request {
		t.Helper()
		req, err := inbound.Envelope{Source: source, Scheme: inbound.GitHub, DeliveryID: id, Body: []byte(body)}.Request()
		if err != nil {
			t.Fatal(err)
		}
		return req
	}
	hookA := `{"action":"opened","number":7,"installation":{"id":1}}`
	hookB := `{"action":"opened","number":7,"installation":{"id":2}}`
	keys := map[string]string{
		"the vector":                  request("github", githubDeliveryID, string(githubBody)).Key,
		"the vector under another id": request("github", "00000000-0000-0000-0000-000000000000", string(githubBody)).Key,
		"the vector pretty-printed":   request("github", githubDeliveryID, "{\n  \"zen\": \"Keep it logically awesome.\",\n  \"hook_id\": 12345678\n}").Key,
		"hook A":                      request("github", "d-1", hookA).Key,
		"hook B, the same id":         request("github", "d-1", hookB).Key,
	}
	for _, same := range []string{"the vector", "the vector under another id", "the vector pretty-printed"} {
		if keys[same] != githubKey {
			t.Errorf("%s: key %q, want %q", same, keys[same], githubKey)
		}
	}
	if keys["hook A"] == keys["hook B, the same id"] {
		t.Errorf("two bodies under one X-GitHub-Delivery got one key %q; want two", keys["hook A"])
	}
	long := strings.Repeat("s", inbound.MaxSourceName)
	if k := request(long, githubDeliveryID, hookA).Key; idem.ValidateKey(k) != nil || len(k) != 107 {
		t.Errorf("the longest source's key %q (%d characters) is not a valid 107-character key", k, len(k))
	}
	if !inbound.KeyedByBody(inbound.GitHub) || inbound.KeyedByBody(inbound.Stripe) || inbound.KeyedByBody(inbound.StandardWebhooks) {
		t.Error("KeyedByBody: want GitHub only")
	}
}

func TestEnvelopeRoundTrip(t *testing.T) {
	body := []byte("{\n  \"id\": \"evt_1\",\n  \"note\": \"<b>&amp;</b> \u00e9\"\n}")
	e := inbound.Envelope{Source: "stripe", Scheme: inbound.Stripe, DeliveryID: "evt_1", Body: body}
	enc := e.Encode()
	if !json.Valid(enc) {
		t.Fatalf("envelope %s is not JSON", enc)
	}
	if !strings.HasPrefix(string(enc), `{"oncely_inbound":1,"source":"stripe","scheme":"stripe","delivery_id":"evt_1","body":{`) {
		t.Errorf("envelope %s does not begin with the marker and fields", enc)
	}
	if !inbound.IsEnvelope(enc) || !inbound.IsEnvelope(append([]byte("\n "), enc...)) {
		t.Error("IsEnvelope(envelope) is false")
	}
	got, err := inbound.DecodeEnvelope(enc)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(e, got); diff != "" {
		t.Errorf("decoded envelope (-want +got):\n%s", diff)
	}
	if string(got.Body) != string(body) {
		t.Errorf("body %q, want the sender's bytes %q", got.Body, body)
	}
}

func TestIsEnvelopeLeavesEventsAlone(t *testing.T) {
	for _, body := range []string{
		`{"id":"release-42","action":"notify"}`,
		`{"id":"x","oncely_inbound":1}`, // the marker must come first
		`{ "oncely_inbound":1}`,         // as Encode writes it, byte for byte
		`"oncely_inbound"`,
		``,
	} {
		if inbound.IsEnvelope([]byte(body)) {
			t.Errorf("IsEnvelope(%s) is true", body)
		}
	}
}

// Two characters JSON allows and SQS does not are escaped: the envelope can
// always be sent, and the body keeps its meaning and fingerprint.
func TestEnvelopeEscapesWhatSQSRefuses(t *testing.T) {
	body := []byte("{\"s\":\"a\uffffb\ufffec\ufffd\"}")
	enc := inbound.Envelope{Source: "acme", Scheme: inbound.StandardWebhooks, DeliveryID: "m1", Body: body}.Encode()
	for _, r := range string(enc) {
		if r == 0xFFFE || r == 0xFFFF {
			t.Fatalf("envelope %q holds U+%04X", enc, r)
		}
	}
	if !strings.Contains(string(enc), `"a\uffffb\ufffec`+"\ufffd") {
		t.Errorf("envelope %q: want \\uffff and \\ufffe escaped, U+FFFD kept", enc)
	}
	got, err := inbound.DecodeEnvelope(enc)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := inbound.Fingerprint(inbound.StandardWebhooks, body)
	if fp, _ := inbound.Fingerprint(inbound.StandardWebhooks, got.Body); fp != want {
		t.Errorf("the escaped body's fingerprint differs from the original's")
	}
}

func TestDecodeEnvelopeRefusesMalformed(t *testing.T) {
	ok := `{"oncely_inbound":1,"source":"acme","scheme":"standard-webhooks","delivery_id":"m1","body":{}}`
	for _, c := range []struct{ name, body, want string }{
		{"not JSON", `{"oncely_inbound":1,`, "malformed"},
		{"unknown member", strings.Replace(ok, `"body"`, `"extra":1,"body"`, 1), "exactly"},
		{"another version", strings.Replace(ok, `:1,`, `:2,`, 1), "is not 1"},
		{"bad source", strings.Replace(ok, `"acme"`, `"AC:ME"`, 1), "source"},
		{"unknown scheme", strings.Replace(ok, `standard-webhooks`, `svix`, 1), "scheme"},
		{"no id", strings.Replace(ok, `"m1"`, `""`, 1), "delivery_id is empty"},
		{"no body", strings.Replace(ok, `,"body":{}`, ``, 1), "no body"},
		{"null body", strings.Replace(ok, `{}}`, `null}`, 1), "no body"},
		{"two documents", ok + ` {}`, "malformed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := inbound.DecodeEnvelope([]byte(c.body))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}

func TestEnvelopeRequest(t *testing.T) {
	req, err := inbound.Envelope{Source: "stripe", Scheme: inbound.Stripe, DeliveryID: "evt_1NG8Du2eZvKYlo2CUI79vXWy", Body: stripeBody}.Request()
	if err != nil {
		t.Fatal(err)
	}
	if req.Key != "wh:stripe:evt_1NG8Du2eZvKYlo2CUI79vXWy" {
		t.Errorf("key %q", req.Key)
	}
	_, err = inbound.Envelope{Source: "stripe", Scheme: inbound.Stripe, DeliveryID: "evt_other", Body: stripeBody}.Request()
	if err == nil || !strings.Contains(err.Error(), "not the Stripe event's id") {
		t.Errorf("a Stripe envelope whose delivery_id is not the event's id: got %v", err)
	}
	_, err = inbound.Envelope{Source: "acme", Scheme: inbound.StandardWebhooks, DeliveryID: "msg 1", Body: swBody}.Request()
	var e *idem.Error
	if !errors.As(err, &e) || e.Code != idem.CodeInvalidKey {
		t.Errorf("an id unfit for a key: got %v, want INVALID_KEY", err)
	}
}

// A Stripe retry carries the same event with another pending_webhooks: the
// same fingerprint. Any other change is another fingerprint, for every
// scheme.
func TestFingerprintCoversWhatSendersKeep(t *testing.T) {
	fp := func(s inbound.Scheme, body string) string {
		t.Helper()
		f, err := inbound.Fingerprint(s, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	base := string(stripeBody)
	retried := strings.Replace(base, `"pending_webhooks":1`, `"pending_webhooks":3`, 1)
	reordered := `{"type":"payment_intent.succeeded","request":{"idempotency_key":null,"id":null},"pending_webhooks":2,"livemode":false,` +
		`"data":{"object":{"amount":4200,"id":"pi_1"}},"created":1780000000,"api_version":"2024-06-20","object":"event","id":"evt_1NG8Du2eZvKYlo2CUI79vXWy"}`
	if fp(inbound.Stripe, base) != fp(inbound.Stripe, retried) || fp(inbound.Stripe, base) != fp(inbound.Stripe, reordered) {
		t.Error("a Stripe retry (pending_webhooks changed, members reordered) has another fingerprint")
	}
	for _, changed := range []string{
		strings.Replace(base, `"amount":4200`, `"amount":4201`, 1),
		strings.Replace(base, `"livemode":false`, `"livemode":true`, 1),
		strings.Replace(base, `"created":1780000000`, `"created":1780000001`, 1),
		strings.Replace(base, `"data":{"object":{"id":"pi_1","amount":4200}}`, `"data":{"object":{"id":"pi_1","amount":4200,"pending_webhooks":1}}`, 1), // only the top level's is volatile
	} {
		if fp(inbound.Stripe, base) == fp(inbound.Stripe, changed) {
			t.Errorf("a changed Stripe event has the same fingerprint: %s", changed)
		}
	}
	// Standard Webhooks and GitHub: the whole body, pending_webhooks too.
	if fp(inbound.GitHub, `{"a":1,"pending_webhooks":1}`) == fp(inbound.GitHub, `{"a":1,"pending_webhooks":2}`) {
		t.Error("GitHub bodies differing in pending_webhooks share a fingerprint")
	}
	if fp(inbound.StandardWebhooks, `{"a":1,"b":2}`) != fp(inbound.StandardWebhooks, `{"b":2, "a":1}`) {
		t.Error("the same JSON with another member order has another fingerprint")
	}
	if _, err := inbound.Fingerprint(inbound.Stripe, []byte(`{"a":1,"a":2}`)); err == nil {
		t.Error("a Stripe body with a duplicate name was fingerprinted")
	}
}

// A capture replayed past the tolerance is refused for its timestamp before
// its signature is computed: with a wrong signature it is refused the same
// way, so the refusal never tells an attacker that a captured signature is
// right. The claimed id is still reported for the log.
func TestAStaleCaptureIsRefusedBeforeItsSignature(t *testing.T) {
	stale := now.Add(-10 * time.Minute)
	for name, r := range map[string]struct {
		source string
		req    request
		id     string
	}{
		"standard webhooks, right secret": {"acme", swRequest("msg_1", stale, swBody, swKey1), "msg_1"},
		"standard webhooks, wrong secret": {"acme", swRequest("msg_1", stale, swBody, []byte("not-the-key-not-the-key-!")), "msg_1"},
		"stripe, right secret":            {"stripe", stripeRequest(stale, stripeBody, stripeSecret1), "evt_1NG8Du2eZvKYlo2CUI79vXWy"},
		"stripe, wrong secret":            {"stripe", stripeRequest(stale, stripeBody, "whsec_not_the_endpoint_secret"), "evt_1NG8Du2eZvKYlo2CUI79vXWy"},
	} {
		t.Run(name, func(t *testing.T) {
			d, err := source(t, r.source).Verify(r.req.headers, r.req.body, now, 0)
			var e *idem.Error
			if !errors.As(err, &e) || e.Code != idem.CodeTimestampOutsideTolerance || d.ID != r.id {
				t.Errorf("got %v (id %q); want TIMESTAMP_OUTSIDE_TOLERANCE, whatever the signature, and the claimed id %q", err, d.ID, r.id)
			}
		})
	}
}
