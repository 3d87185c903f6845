#!/usr/bin/env python3
"""Relay idemproxy notifications to a Slack incoming webhook (Python 3 standard library only).

idemproxy POSTs its own JSON (docs/reference.md, section 8.4) to `[notify] webhook`; Slack's
incoming webhooks want `{"text": ...}`. This relay sits between them: it checks each
notification's `Idem-Signature`, formats a message and posts it to Slack.

    export IDEMPROXY_NOTIFY_SECRET=...        # the same secret idemproxy signs with
    export SLACK_WEBHOOK_URL=https://hooks.slack.com/services/...
    python3 examples/slack_relay.py --listen 127.0.0.1:9911

and in proxy.toml:

    [notify]
    webhook    = "http://127.0.0.1:9911/"
    secret_env = "IDEMPROXY_NOTIFY_SECRET"

Answers 204 once Slack took the message, 401 for a bad or stale signature (nothing is
posted), 502 when Slack could not be reached (idemproxy then tries again). `--dry-run`
prints the Slack message instead of posting it.
"""

import argparse
import hashlib
import hmac
import json
import os
import sys
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# A signature whose time is further than this from ours is refused (a replayed request).
TOLERANCE_SECONDS = 300

ICONS = {
    "awaiting_approval": ":raised_hand:",
    "needs_operator": ":warning:",
    "parameter_mismatch": ":no_entry:",
    "approved": ":white_check_mark:",
    "rejected": ":x:",
    "resolved": ":heavy_check_mark:",
    "succeeded": ":heavy_check_mark:",
    "summary": ":clipboard:",
}


def signed_correctly(secret: bytes, header: str, body: bytes, now: float) -> bool:
    """Checks `t=<unix>,v1=<hex HMAC-SHA256 of "t.body">` and that t is recent."""
    parts = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
    t, v1 = parts.get("t", ""), parts.get("v1", "")
    if not t.isdigit() or abs(now - int(t)) > TOLERANCE_SECONDS:
        return False
    expected = hmac.new(secret, t.encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, v1)


def slack_message(n: dict) -> dict:
    """The Slack payload for one notification."""
    icon = ICONS.get(n.get("event"), ":bell:")
    title = n.get("event", "notification").replace("_", " ")
    if n.get("operation_id"):
        head = f"{icon} *{title}*: `{n['operation_id']}` ({n.get('state')})"
    else:
        head = f"{icon} *{title}*"
    return {"text": f"{head}\n{n.get('detail', '')}\n_{n.get('at', '')}_"}


def make_handler(secret, slack_url, dry_run):
    class Relay(BaseHTTPRequestHandler):
        def do_POST(self):
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length)
            signature = self.headers.get("idem-signature", "")
            if secret and not signed_correctly(secret, signature, body, time.time()):
                return self.answer(401)
            try:
                message = slack_message(json.loads(body))
            except (ValueError, AttributeError):
                return self.answer(400)
            if dry_run:
                print(json.dumps(message), flush=True)
                return self.answer(204)
            request = urllib.request.Request(
                slack_url,
                data=json.dumps(message).encode(),
                headers={"content-type": "application/json"},
            )
            try:
                with urllib.request.urlopen(request, timeout=10):
                    pass
            except OSError as e:
                print(f"slack: {e}", file=sys.stderr)
                return self.answer(502)
            self.answer(204)

        def answer(self, status):
            self.send_response(status)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    return Relay


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--listen", default="127.0.0.1:9911", help="HOST:PORT")
    parser.add_argument("--dry-run", action="store_true", help="print instead of posting")
    args = parser.parse_args()
    secret = os.environ.get("IDEMPROXY_NOTIFY_SECRET", "").strip().encode()
    slack_url = os.environ.get("SLACK_WEBHOOK_URL", "")
    if not slack_url and not args.dry_run:
        sys.exit("set SLACK_WEBHOOK_URL (or use --dry-run)")
    if not secret:
        print("warning: IDEMPROXY_NOTIFY_SECRET is not set; signatures are not checked",
              file=sys.stderr)
    host, port = args.listen.rsplit(":", 1)
    server = ThreadingHTTPServer((host, int(port)), make_handler(secret, slack_url, args.dry_run))
    print(f"relaying http://{args.listen}/ to Slack", file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
