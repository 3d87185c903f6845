"""The cost of interception, roughly: sequential replays of one guarded Stripe refund, answered
from the ledger, on the mount (plain HTTP), through one intercepted tunnel (HTTPS_PROXY, TLS,
keep-alive) and through a new tunnel per request (CONNECT and a TLS handshake each).

    target/python-env/bin/python bench/intercept.py [N]     # default 400; IDEMPROXY_BIN=PATH

Uses the SDK tests' harness (tests/sdk/) and the Python environment of `bash .ci/python-env`;
needs `openssl` for the fake's certificate. One client, one request at a time, loopback only:
latency per request, not throughput. Compare the three figures of one run with each other.
"""

import os
import ssl
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "sdk"))
os.environ.setdefault("IDEMPROXY_BIN", str(ROOT / "target" / "release" / "idemproxy"))

import httpx  # noqa: E402

import test_intercept  # noqa: E402
from fake_stripe import FakeStripe  # noqa: E402
from harness import Proxy, shipped_policy  # noqa: E402

API = "https://api.stripe.com/v1/refunds"
FORM = {"charge": "ch_1", "amount": 500}
HEADERS = {"X-Operation-Id": "bench"}


def per_request(n, send):
    started = time.perf_counter()
    for _ in range(n):
        assert send().status_code == 200
    return (time.perf_counter() - started) / n * 1000


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    fake = FakeStripe()
    ca_pem, pem, key = test_intercept.make_pki(Path(tempfile.mkdtemp()))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pem, key)
    fake.server.socket = context.wrap_socket(fake.server.socket, server_side=True)
    policy = shipped_policy(
        "stripe", "https://api.stripe.com",
        connect_to=f"127.0.0.1:{fake.server.server_address[1]}", ca_file=str(ca_pem),
    )
    proxy = Proxy("stripe", policy, {"IDEMPROXY_LOG": "warn"}, intercept=True)
    try:
        with httpx.Client(trust_env=False) as plain:
            mount = proxy.url("/stripe/v1/refunds")
            plain.post(mount, data=FORM, headers=HEADERS)
            on_mount = per_request(n, lambda: plain.post(mount, data=FORM, headers=HEADERS))
        tunnel = dict(proxy=proxy.url(), verify=proxy.ca_pem, trust_env=False)
        with httpx.Client(**tunnel) as kept:
            one_tunnel = per_request(n, lambda: kept.post(API, data=FORM, headers=HEADERS))

        def fresh():
            with httpx.Client(**tunnel) as client:
                return client.post(API, data=FORM, headers=HEADERS)

        new_tunnels = per_request(max(n // 4, 1), fresh)
    finally:
        proxy.stop()
        fake.close()
    print(f"replay on the mount (plain HTTP, keep-alive): {on_mount:.2f} ms")
    print(f"replay through one intercepted tunnel (TLS, keep-alive): {one_tunnel:.2f} ms")
    print(f"replay through a new tunnel each (CONNECT + TLS handshake): {new_tunnels:.2f} ms")


if __name__ == "__main__":
    main()
