"""The senders' own libraries, for the end-to-end test of the receiving route
(POST /webhooks/{source}, internal/e2e/inbound_test.go).

Reads one JSON object per line on stdin and answers each with one line:

  {"op": "sign_standard", "secrets": ["whsec_..."], "id": ..., "timestamp": <unix s>, "body_b64": ...}
      -> {"headers": {"webhook-id": ..., "webhook-timestamp": ..., "webhook-signature": ...}}
     The Standard Webhooks reference library (PyPI standardwebhooks) signs
     the delivery, once per secret (a sender's rotation: space-separated).

  {"op": "check_stripe", "secret": "whsec_...", "header": "t=...,v1=...", "body_b64": ...}
      -> {"ok": true} or {"ok": false, "error": "..."}
     Stripe's library (PyPI stripe) checks a Stripe-Signature header made
     by our test signer: stripe.Webhook.construct_event, with its default
     300 s tolerance, as a Stripe receiver would.
"""
import base64
import json
import sys
from datetime import datetime, timezone

import standardwebhooks
import stripe


def sign_standard(d):
    body = base64.b64decode(d["body_b64"]).decode("utf-8")
    at = datetime.fromtimestamp(d["timestamp"], tz=timezone.utc)
    sigs = [standardwebhooks.Webhook(s).sign(d["id"], at, body) for s in d["secrets"]]
    return {"headers": {"webhook-id": d["id"], "webhook-timestamp": str(d["timestamp"]), "webhook-signature": " ".join(sigs)}}


def check_stripe(d):
    body = base64.b64decode(d["body_b64"])
    try:
        stripe.Webhook.construct_event(body, d["header"], d["secret"])
        return {"ok": True}
    except Exception as e:  # SignatureVerificationError, and ValueError for a body that is not an event
        return {"ok": False, "error": f"{type(e).__name__}: {e}"}


def main() -> None:
    ops = {"sign_standard": sign_standard, "check_stripe": check_stripe}
    for line in sys.stdin:
        if not line.strip():
            continue
        d = json.loads(line)
        print(json.dumps(ops[d["op"]](d)), flush=True)


if __name__ == "__main__":
    main()
