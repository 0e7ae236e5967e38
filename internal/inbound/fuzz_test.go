package inbound_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/inbound"
	"github.com/oncely/oncely/internal/testing/webhooksender"
)

// What strangers send to POST /webhooks/{source}: any headers, any body.
// Properties: no panic; a refusal is one of the documented codes and never
// quotes a secret; a verified delivery has a valid key and a JSON body, and
// stops verifying when one byte of its body changes.
func FuzzVerify(f *testing.F) {
	sw := webhooksender.StandardWebhooks("msg_1", now, swBody, swKey1)
	f.Add("acme", sw["webhook-id"], sw["webhook-timestamp"], sw["webhook-signature"], "", "", string(swBody))
	f.Add("stripe", "", "", "", webhooksender.Stripe(now, stripeBody, stripeSecret1), "", string(stripeBody))
	f.Add("github", "", "", "", "", webhooksender.GitHub(githubSecret1, githubBody), string(githubBody))
	f.Add("acme", "m", "0", "v1,,v1a, ,", "t=,v1=", "sha256=", `{"a":`)
	f.Add("stripe", "", "", "", "t=1780000000,v1=zz,v1", "", `{"id":{"x":1}}`)
	allowed := []idem.Code{idem.CodeSignatureMissing, idem.CodeSignatureMalformed, idem.CodeSignatureMismatch, idem.CodeTimestampOutsideTolerance,
		idem.CodeInvalidPayload, idem.CodeKeyMissing, idem.CodeInvalidKey}
	s, err := inbound.ParseSources(sourcesJSON)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, name, id, ts, sig, stripeSig, githubSig, body string) {
		src, ok := s.Lookup(name)
		if !ok {
			return
		}
		headers := map[string]string{"webhook-id": id, "webhook-timestamp": ts, "webhook-signature": sig,
			"stripe-signature": stripeSig, "x-hub-signature-256": githubSig, "x-github-delivery": id}
		d, err := src.Verify(headers, []byte(body), now, 0)
		if err != nil {
			var e *idem.Error
			if !errors.As(err, &e) || !slices.Contains(allowed, e.Code) {
				t.Fatalf("refusal %v is not one of %v", err, allowed)
			}
			for _, secret := range allSecretValues {
				if strings.Contains(err.Error(), secret) {
					t.Fatalf("refusal %q quotes a secret", err)
				}
			}
			return
		}
		if idem.ValidateKey(d.Key) != nil || !json.Valid(d.Body) {
			t.Fatalf("verified delivery with key %q body %q", d.Key, d.Body)
		}
		tampered := []byte(body)
		i := strings.Index(body, string(d.Body))
		tampered[i] ^= 0x01
		if _, err := src.Verify(headers, tampered, now, 0); err == nil {
			t.Fatalf("a body with one bit changed verified: %q", tampered)
		}
	})
}

// What may arrive on the events queue looking like an envelope.
// Properties: no panic; a refusal is an *idem.Error; a decoded envelope
// encodes and decodes to itself, and its request has a valid key.
func FuzzDecodeEnvelope(f *testing.F) {
	f.Add(string(inbound.Envelope{Source: "acme", Scheme: inbound.StandardWebhooks, DeliveryID: "m1", Body: swBody}.Encode()))
	f.Add(string(inbound.Envelope{Source: "stripe", Scheme: inbound.Stripe, DeliveryID: "evt_1NG8Du2eZvKYlo2CUI79vXWy", Body: stripeBody}.Encode()))
	f.Add(`{"oncely_inbound":1,"source":"a","scheme":"github","delivery_id":"x","body":[1,{"a":"\ufffe"}]}`)
	f.Add(`{"oncely_inbound":1,"source":"a","scheme":"stripe","delivery_id":"x","body":{"id":"x","id":"y"}}`)
	f.Add(`{"oncely_inbound":null}`)
	f.Fuzz(func(t *testing.T, body string) {
		e, err := inbound.DecodeEnvelope([]byte(body))
		if err != nil {
			var ie *idem.Error
			if !errors.As(err, &ie) {
				t.Fatalf("refusal %v is not an *idem.Error", err)
			}
			return
		}
		again, err := inbound.DecodeEnvelope(e.Encode())
		if err != nil {
			t.Fatalf("re-encoded envelope refused: %v\n%s", err, e.Encode())
		}
		if again.Source != e.Source || again.Scheme != e.Scheme || again.DeliveryID != e.DeliveryID {
			t.Fatalf("round trip changed the envelope: %+v, want %+v", again, e)
		}
		req, err := e.Request()
		if err != nil {
			var ie *idem.Error
			if !errors.As(err, &ie) {
				t.Fatalf("request error %v is not an *idem.Error", err)
			}
			return
		}
		if idem.ValidateKey(req.Key) != nil || !strings.HasPrefix(req.Key, "wh:"+e.Source+":") || req.Fingerprint == "" {
			t.Fatalf("request %+v for %+v", req, e)
		}
	})
}
