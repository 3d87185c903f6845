"""Agents that only honour HTTPS_PROXY: real Python clients through idemproxy's `[intercept]`.

The clients talk to `https://api.stripe.com` as always; their only extra configuration is
`HTTPS_PROXY` and trust in the proxy's CA (made by `idemproxy ca init`): `REQUESTS_CA_BUNDLE`
for requests, `SSL_CERT_FILE` for httpx, and for the stripe SDK its own trust setting
`stripe.ca_bundle_path` (the SDK passes its bundled roots to requests explicitly, so it reads
neither variable). The proxy keeps the provider's real name (`upstream =
"https://api.stripe.com"`) and reaches a local TLS fake of Stripe through `connect_to`,
verifying the fake's certificate for `api.stripe.com` against the fake's own test CA
(`ca_file`). The shipped policies/stripe.toml: the operation ID from `X-Operation-Id` or the
workflow, charge and step; Stripe deduplicates on `Idempotency-Key`.
"""

import ssl
import subprocess

import httpx
import pytest
import requests
import stripe

from fake_stripe import FakeStripe

API = "https://api.stripe.com"


def make_pki(folder):
    """A test CA and a leaf for api.stripe.com signed by it (OpenSSL's command line)."""
    run = lambda *args: subprocess.run(["openssl", *args], check=True, capture_output=True)
    ca_key, ca_pem = folder / "fake-ca.key", folder / "fake-ca.pem"
    key, csr, pem, ext = (folder / n for n in ("leaf.key", "leaf.csr", "leaf.pem", "leaf.ext"))
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    run("req", "-x509", *ec, "-keyout", ca_key, "-out", ca_pem, "-days", "2",
        "-subj", "/CN=fake Stripe test CA",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign")
    run("req", *ec, "-keyout", key, "-out", csr, "-subj", "/CN=api.stripe.com")
    ext.write_text(
        "subjectAltName=DNS:api.stripe.com\nbasicConstraints=CA:FALSE\n"
        "keyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n"
    )
    run("x509", "-req", "-in", csr, "-CA", ca_pem, "-CAkey", ca_key, "-CAcreateserial",
        "-out", pem, "-days", "2", "-extfile", ext)
    return ca_pem, pem, key


@pytest.fixture
def fake(tmp_path):
    """A fake of Stripe serving TLS as api.stripe.com; `fake.ca_file` is its test CA."""
    fake = FakeStripe()
    ca_pem, pem, key = make_pki(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pem, key)
    fake.server.socket = context.wrap_socket(fake.server.socket, server_side=True)
    fake.ca_file = str(ca_pem)
    fake.port = fake.server.server_address[1]
    yield fake
    fake.close()


@pytest.fixture
def proxied(guard, fake, monkeypatch):
    """The proxy with `[intercept]` in front of the fake, and this process's environment
    pointed at it as an agent's would be: HTTPS_PROXY and the CA, nothing else."""
    proxy = guard(
        "stripe", API, intercept=True,
        connect_to=f"127.0.0.1:{fake.port}", ca_file=fake.ca_file,
    )
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", proxy.url())
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", proxy.ca_pem)
    monkeypatch.setenv("SSL_CERT_FILE", proxy.ca_pem)
    monkeypatch.setattr(stripe, "ca_bundle_path", proxy.ca_pem)
    return proxy


def post_requests(op, amount):
    return requests.post(
        f"{API}/v1/refunds",
        data={"charge": "ch_1", "amount": amount},
        headers={"X-Operation-Id": op},
        timeout=20,
    )


def httpx_poster(http2):
    def post(op, amount):
        with httpx.Client(http2=http2, timeout=20) as client:
            resp = client.post(
                f"{API}/v1/refunds",
                data={"charge": "ch_1", "amount": amount},
                headers={"X-Operation-Id": op},
            )
        assert resp.http_version == ("HTTP/2" if http2 else "HTTP/1.1")
        return resp
    return post


CLIENTS = {
    "requests": post_requests,
    "httpx-h1": httpx_poster(False),
    "httpx-h2": httpx_poster(True),
}


@pytest.mark.parametrize("name", CLIENTS)
def test_a_retry_is_a_ledger_replay_and_a_change_is_409(proxied, fake, name):
    post = CLIENTS[name]
    first = post(f"op-{name}", 500)
    assert first.status_code == 200, first.text
    assert first.headers["idem-state"] == "succeeded"
    again = post(f"op-{name}", 500)
    assert again.status_code == 200
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json()["id"] == first.json()["id"]
    changed = post(f"op-{name}", 700)
    assert changed.status_code == 409
    assert changed.json()["type"] == "urn:idemproxy:parameter-mismatch"
    assert changed.json()["differing_fields"] == ["amount"]
    assert len(fake.effects) == 1 and len(fake.requests) == 1


@pytest.mark.parametrize("name", CLIENTS)
def test_a_lost_answer_is_unknown_then_recovered_with_one_effect(proxied, fake, name):
    post = CLIENTS[name]
    fake.misbehave("drop")
    lost = post(f"lost-{name}", 500)
    # The shipped policy's pending_status: 503, which Stripe's clients retry.
    assert lost.status_code == 503, lost.text
    assert lost.json()["type"] == "urn:idemproxy:outcome-unknown"
    assert lost.json()["next"] == "retry_same"
    recovered = post(f"lost-{name}", 500)
    assert recovered.status_code == 200, recovered.text
    assert fake.history == ["dropped", "replayed"]  # re-sent with the same key
    assert len(fake.effects) == 1
    assert proxied.only_operation()["state"] == "succeeded"


def stripe_client():
    # No base address: the SDK talks to https://api.stripe.com as always.
    return stripe.StripeClient("sk_test_idemproxy", max_network_retries=2)


def refund(sdk, workflow, amount=500):
    return sdk.v1.refunds.create(
        {"charge": "ch_1", "amount": amount, "metadata": {"step": "2"}},
        options={"headers": {"X-Workflow-Id": workflow}},
    )


def test_the_stripe_sdk_retries_a_lost_answer_and_a_rerun_replays_it(proxied, fake):
    fake.misbehave("drop")
    first = refund(stripe_client(), "wf-lost")
    assert fake.history == ["dropped", "replayed"]  # the SDK's retry, with the same key
    again = refund(stripe_client(), "wf-lost")
    assert first.id.startswith("re_") and again.id == first.id
    assert len(fake.effects) == 1
    assert len(fake.requests) == 2 and len(set(fake.keys_seen())) == 1  # the re-run: the ledger
    assert proxied.only_operation()["state"] == "succeeded"


def test_the_stripe_sdk_gets_a_changed_retry_as_a_409_error(proxied, fake):
    refund(stripe_client(), "wf-change", amount=500)
    with pytest.raises(stripe.APIError) as raised:
        refund(stripe_client(), "wf-change", amount=700)
    assert raised.value.http_status == 409
    assert raised.value.json_body["type"] == "urn:idemproxy:parameter-mismatch"
    assert len(fake.effects) == 1 and len(fake.requests) == 1
