package inbound_test

import (
	"errors"
	"testing"
	"time"

	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/inbound"
)

// schemeVector is one signed delivery of a scheme, as literal bytes: the
// secret as the sender shows it, the headers and body it sent, and when.
type schemeVector struct {
	origin  string // where the vector comes from
	secret  string
	at      time.Time
	headers map[string]string
	body    string
	id      string // the delivery id it verifies with
	// signsTime: a copy of it older than the tolerance is refused (the
	// scheme's replay rule); otherwise it verifies at any time.
	signsTime bool
	// key is the key its delivery gets from the source "vec": "" means
	// wh:vec:<id>; a scheme keyed by its body (GitHub) sets it.
	key string
}

// vectors holds one vector per scheme in the table: a new scheme's file
// comes with its entry here, or TestEverySchemeHasAVector fails.
var vectors = map[inbound.Scheme]schemeVector{
	inbound.StandardWebhooks: {
		origin: "the Standard Webhooks specification's example (also internal/webhooksig's)",
		secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
		at:     time.Unix(1614265330, 0),
		headers: map[string]string{
			"webhook-id":        "msg_p5jXN8AQM9LWM0D4loKWxJek",
			"webhook-timestamp": "1614265330",
			"webhook-signature": "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
		},
		body:      `{"test": 2432232314}`,
		id:        "msg_p5jXN8AQM9LWM0D4loKWxJek",
		signsTime: true,
	},
	inbound.Stripe: {
		origin: "this package's Stripe test event signed as Stripe does (webhooksender.Stripe, which PyPI's stripe accepts in internal/e2e)",
		secret: "whsec_stripeSecretNumberOne1234567890",
		at:     time.Unix(1780000000, 0),
		headers: map[string]string{
			"stripe-signature": "t=1780000000,v1=5d18d20865625723e8191aea9334bd67a20395ad3d445fcc097b37411f9bb717",
		},
		body:      `{"id":"evt_1NG8Du2eZvKYlo2CUI79vXWy","object":"event","api_version":"2024-06-20","created":1780000000,"data":{"object":{"id":"pi_1","amount":4200}},"livemode":false,"pending_webhooks":1,"request":{"id":null,"idempotency_key":null},"type":"payment_intent.succeeded"}`,
		id:        "evt_1NG8Du2eZvKYlo2CUI79vXWy",
		signsTime: true,
	},
	inbound.GitHub: {
		origin: "GitHub's published test vector's secret and its documented delivery id, over a JSON ping body (the published payload is not JSON)",
		secret: "It's a Secret to Everybody",
		at:     time.Unix(1780000000, 0),
		headers: map[string]string{
			"x-hub-signature-256": "sha256=4a4e363ea574e50ab0fc49e82cbd000ea4bb308c621ea54216cd4974caf699bc",
			"x-github-delivery":   "72d3162e-cc78-11e3-81ab-4c9367dc0958",
			"x-github-event":      "ping",
		},
		body:      `{"zen":"Keep it logically awesome.","hook_id":12345678}`,
		id:        "72d3162e-cc78-11e3-81ab-4c9367dc0958",
		signsTime: false,
		// Keyed by the body: the hex SHA-256 of its canonical JSON,
		// {"hook_id":12345678,"zen":"Keep it logically awesome."}
		// (printf '%s' … | sha256sum), not by the unsigned id.
		key: "wh:vec:sha256:b18f9f660d2146556d9afc144cd66f75a7a682d29b3e9613925e94d096019759",
	},
}

// Every scheme in the table verifies its vector, queues it in an envelope
// the queue path turns into the same key, refuses it with one bit of its
// body changed, and keeps its replay rule. A scheme without a vector fails.
func TestEverySchemeHasAVector(t *testing.T) {
	for _, scheme := range inbound.Schemes {
		t.Run(string(scheme), func(t *testing.T) {
			v, ok := vectors[scheme]
			if !ok {
				t.Fatalf("the scheme %q has no test vector: add a signed delivery to vectors", scheme)
			}
			s, err := inbound.ParseSources(`{"vec":{"scheme":"` + string(scheme) + `","secrets":["` + v.secret + `"]}}`)
			if err != nil {
				t.Fatalf("the vector's secret (%s): %v", v.origin, err)
			}
			src, _ := s.Lookup("vec")

			d, err := src.Verify(v.headers, []byte(v.body), v.at, 0)
			if err != nil {
				t.Fatalf("the vector (%s) got %v, want verified", v.origin, err)
			}
			want := "wh:vec:" + v.id
			if v.key != "" {
				want = v.key
			}
			if d.Key != want || d.ID != v.id || d.Scheme != scheme {
				t.Errorf("verified with key %q id %q scheme %q, want %q %q %q", d.Key, d.ID, d.Scheme, want, v.id, scheme)
			}

			env, err := inbound.DecodeEnvelope(inbound.EnvelopeOf(d).Encode())
			if err != nil {
				t.Fatalf("its envelope got %v, want decoded", err)
			}
			req, err := env.Request()
			wantFP, fpErr := inbound.Fingerprint(scheme, d.Body)
			if err != nil || fpErr != nil || req.Key != d.Key || req.Fingerprint != wantFP {
				t.Errorf("its envelope's request got %+v, %v; want key %q, fingerprint %q (%v)", req, err, d.Key, wantFP, fpErr)
			}

			tampered := []byte(v.body)
			tampered[len(tampered)/2] ^= 0x01
			if _, err := src.Verify(v.headers, tampered, v.at, 0); !hasCode(err, idem.CodeSignatureMismatch) {
				t.Errorf("the vector with one bit of its body changed got %v, want %s", err, idem.CodeSignatureMismatch)
			}

			late := v.at.Add(inbound.DefaultTolerance + time.Second)
			_, err = src.Verify(v.headers, []byte(v.body), late, 0)
			switch {
			case v.signsTime && !hasCode(err, idem.CodeTimestampOutsideTolerance):
				t.Errorf("the vector replayed past the tolerance got %v, want %s", err, idem.CodeTimestampOutsideTolerance)
			case !v.signsTime && err != nil:
				t.Errorf("the vector replayed later got %v, want verified (the scheme signs no time)", err)
			}
		})
	}
	for scheme := range vectors {
		found := false
		for _, s := range inbound.Schemes {
			found = found || s == scheme
		}
		if !found {
			t.Errorf("vectors has a vector for %q, which is not in the table", scheme)
		}
	}
}

func hasCode(err error, code idem.Code) bool {
	var e *idem.Error
	return errors.As(err, &e) && e.Code == code
}
