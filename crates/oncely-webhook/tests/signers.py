"""Third-party signers and verifiers for tests/third_party.rs.

Uses the providers' own Python libraries: `standardwebhooks` (the spec's official package)
and `stripe` (`WebhookSignature`). The body is read from stdin; headers are printed as JSON.

  signers.py check                                  exit 0 when both libraries import
  signers.py standard-sign SECRET MSG_ID UNIX_TS    -> {"webhook-id", "webhook-timestamp", "webhook-signature"}
  signers.py standard-verify SECRET HEADERS_JSON    verifies, exit 1 with the error when it fails
  signers.py stripe-sign SECRET UNIX_TS             -> {"stripe-signature"}
  signers.py stripe-verify SECRET HEADER            verifies (tolerance 300 s)
"""

import json
import sys
from datetime import datetime, timezone


def main(argv):
    import standardwebhooks
    import stripe

    cmd = argv[1]
    if cmd == "check":
        return 0
    body = sys.stdin.buffer.read().decode("utf-8")
    if cmd == "standard-sign":
        secret, msg_id, ts = argv[2:5]
        at = datetime.fromtimestamp(int(ts), tz=timezone.utc)
        sig = standardwebhooks.Webhook(secret).sign(msg_id, at, body)
        print(json.dumps({"webhook-id": msg_id, "webhook-timestamp": ts, "webhook-signature": sig}))
    elif cmd == "standard-verify":
        secret, headers = argv[2:4]
        standardwebhooks.Webhook(secret).verify(body, json.loads(headers), json_parse=False)
        print("verified")
    elif cmd == "stripe-sign":
        secret, ts = argv[2:4]
        header = stripe.WebhookSignature.generate_signature_header(body, secret, int(ts))
        print(json.dumps({"stripe-signature": header}))
    elif cmd == "stripe-verify":
        secret, header = argv[2:4]
        stripe.WebhookSignature.verify_header(body, header, secret, tolerance=300)
        print("verified")
    else:
        print(f"unknown command {cmd}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except Exception as e:  # the test reads the message
        print(f"{type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
