"""The official `stripe` SDK through idemproxy with the shipped policies/stripe.toml.

What the SDK does (stripe/_http_client.py, `HTTPClient._should_retry` and
`_request_with_retries_internal`): it retries connection errors, 409 and every 5xx, unless the
answer says `Stripe-Should-Retry: false` (or forces a retry with `true`), up to
`max_network_retries` times, 0.5 s doubling; every 2xx is parsed as the object asked for
(stripe/_api_requestor.py, `_interpret_response`).
"""

import pytest
import stripe

from fake_stripe import FakeStripe

WORKFLOW = "X-Workflow-Id"


@pytest.fixture
def fake():
    fake = FakeStripe()
    yield fake
    fake.close()


def client(proxy, retries=2):
    return stripe.StripeClient(
        "sk_test_idemproxy",
        base_addresses={"api": proxy.url("/stripe")},
        max_network_retries=retries,
    )


def refund(sdk, workflow, amount=500, step="2"):
    return sdk.v1.refunds.create(
        {"charge": "ch_1", "amount": amount, "metadata": {"step": step}},
        options={"headers": {WORKFLOW: workflow}},
    )



def test_a_lost_answer_is_retried_by_the_sdk_and_a_rerun_replays_the_same_refund(guard, fake):
    proxy = guard("stripe", fake)
    fake.misbehave("drop")

    first = refund(client(proxy), "wf-lost")
    assert fake.history == ["dropped", "replayed"]  # the SDK's retry, re-sent with the same key
    again = refund(client(proxy), "wf-lost")

    assert first.id.startswith("re_") and again.id == first.id
    assert len(fake.effects) == 1, fake.effects
    assert len(fake.requests) == 2 and len(set(fake.keys_seen())) == 1  # the re-run: from the ledger
    assert proxy.only_operation()["state"] == "succeeded"


def test_a_parameter_change_is_a_stripe_error_raised_once_with_the_proxy_detail(guard, fake):
    proxy = guard("stripe", fake)
    refund(client(proxy), "wf-change", amount=500)

    with pytest.raises(stripe.APIError) as raised:
        refund(client(proxy), "wf-change", amount=700)

    error = raised.value
    assert error.http_status == 409
    assert error.json_body["type"] == "urn:idemproxy:parameter-mismatch"
    assert error.json_body["differing_fields"] == ["amount"]
    assert error.user_message == error.json_body["detail"], error.json_body
    # Not retried by the SDK: the proxy saw the changed request once, the provider never.
    assert proxy.requests(outcome="conflict") == 1
    assert len(fake.effects) == 1 and len(fake.requests) == 1


def test_in_progress_at_the_provider_is_waited_out_by_the_sdk(guard, fake):
    proxy = guard("stripe", fake, timeout="1s")
    fake.misbehave("hold")

    first = refund(client(proxy, retries=3), "wf-busy")

    # 1: held past the proxy's timeout; 2: Stripe's 409 idempotency_key_in_use (pending);
    # 3: the replay of the first request's refund.
    assert [status for status in fake_statuses(fake)] == ["held", "in_progress", "replayed"]
    assert first.id == fake.effects[0]["id"]
    assert len(fake.effects) == 1
    assert proxy.only_operation()["state"] == "succeeded"


def test_unknown_with_503_and_no_sdk_retries_is_a_clear_error_then_a_rerun_succeeds(guard, fake):
    proxy = guard("stripe", fake)
    fake.misbehave("drop")

    with pytest.raises(stripe.APIError) as raised:
        refund(client(proxy, retries=0), "wf-503")
    assert raised.value.http_status == 503
    assert raised.value.json_body["type"] == "urn:idemproxy:outcome-unknown"
    assert raised.value.user_message == raised.value.json_body["detail"]

    again = refund(client(proxy, retries=0), "wf-503")
    assert again.id == fake.effects[0]["id"] and len(fake.effects) == 1


def test_unknown_with_pending_status_202_and_no_retry_left_is_taken_for_the_refund(guard, fake):
    # Why the shipped policy answers 503: a 202 the SDK does not retry is taken for the refund.
    proxy = guard("stripe", fake, pending_status=202)
    fake.misbehave("drop")

    taken = refund(client(proxy, retries=0), "wf-202")

    assert "id" not in taken
    assert taken["type"] == "urn:idemproxy:outcome-unknown"
    assert taken.last_response.code == 202
    assert proxy.only_operation()["state"] == "unknown"
    assert len(fake.effects) == 1


def test_unknown_with_pending_status_202_is_still_retried_for_stripe_should_retry(guard, fake):
    # The SDK reads Stripe-Should-Retry before the status: `true` retries even a 2xx.
    proxy = guard("stripe", fake, pending_status=202)
    fake.misbehave("drop")

    refunded = refund(client(proxy), "wf-202-retry")

    assert refunded.id == fake.effects[0]["id"] and fake.history == ["dropped", "replayed"]
    assert proxy.only_operation()["state"] == "succeeded"


def test_an_unreachable_stripe_is_retried_by_the_sdk_then_raised(guard, closed_port_url):
    proxy = guard("stripe", closed_port_url)

    with pytest.raises(stripe.APIError) as raised:
        refund(client(proxy, retries=1), "wf-down")

    assert raised.value.http_status == 502
    assert raised.value.json_body["type"] == "urn:idemproxy:upstream-unreachable"
    assert proxy.requests(outcome="forwarded") == 2  # the SDK retried once: safe, nothing was sent


def test_an_unwritable_ledger_is_retried_by_the_sdk_then_raised(guard, fake):
    proxy = guard("stripe", fake, extra_env={"IDEMPROXY_FAIL": "ledger.commit"})

    with pytest.raises(stripe.APIError) as raised:
        refund(client(proxy, retries=1), "wf-ledger")

    assert raised.value.http_status == 503
    assert raised.value.json_body["type"] == "urn:idemproxy:ledger-unavailable"
    assert proxy.requests(outcome="rejected") == 2
    assert fake.requests == []


def fake_statuses(fake):
    return fake.history
