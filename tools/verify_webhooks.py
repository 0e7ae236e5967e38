"""Verify webhook deliveries with the Standard Webhooks reference library.

Reads one JSON object per line on stdin:
    {"name": ..., "secret": "whsec_...", "headers": {...}, "body_b64": ...,
     "received_after_s": 0}
and prints one JSON object per line: {"name": ..., "ok": bool, "error": str}.

received_after_s pretends the delivery is verified that many seconds after
it was sent (a replayed, stale delivery), by moving the library's clock.
The end-to-end test (internal/e2e) runs this: the signatures the function
makes must verify with a library written by someone else.
"""
import base64
import json
import sys
from datetime import datetime, timedelta, timezone

import standardwebhooks.webhooks as sw


class _Clock(datetime):
    offset = timedelta(0)

    @classmethod
    def now(cls, tz=None):
        return datetime.now(tz=tz) + cls.offset


def main() -> None:
    sw.datetime = _Clock  # the library reads datetime.now() for the tolerance check
    for line in sys.stdin:
        if not line.strip():
            continue
        d = json.loads(line)
        _Clock.offset = timedelta(seconds=d.get("received_after_s", 0))
        body = base64.b64decode(d["body_b64"])
        try:
            sw.Webhook(d["secret"]).verify(body, d["headers"])
            out = {"name": d["name"], "ok": True, "error": ""}
        except Exception as e:  # WebhookVerificationError and the library's ValueErrors alike
            out = {"name": d["name"], "ok": False, "error": f"{type(e).__name__}: {e}"}
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
