"""The official `squareup` SDK (Fern-generated) through idemproxy with the shipped
policies/square.toml.

What the SDK does (square/core/http_client.py, `HttpClient.request`, `_should_retry` and
`_retry_timeout`): it retries every answer with status 408, 409, 429 or >= 500, `max_retries`
times (2 by default), waiting `Retry-After` seconds when given (its `retry-after-ms` parsing
compares a string with a number and is always skipped), else 1 s doubling; it never retries a
connection error; every 2xx is parsed as the response type (payment may be None).
"""

import pytest
from square import Square
from square.core.api_error import ApiError

from fake_square import KEY_LIMIT, FakeSquare


@pytest.fixture
def fake():
    fake = FakeSquare()
    yield fake
    fake.close()


def client(proxy):
    return Square(token="sq-token", base_url=proxy.url("/square"), timeout=20)


def pay(sdk, workflow, amount=1200, retries=2, note="first try"):
    return sdk.payments.create(
        source_id="cnon:card-nonce-ok",
        idempotency_key="the agent's own key, replaced by the proxy",
        amount_money={"amount": amount, "currency": "USD"},
        reference_id="order-77",
        note=note,
        request_options={"additional_headers": {"X-Workflow-Id": workflow}, "max_retries": retries},
    )



def test_the_key_fits_square_and_a_rerun_replays_the_same_payment(guard, fake):
    proxy = guard("square", fake)

    first = pay(client(proxy), "wf-fit")
    again = pay(client(proxy), "wf-fit", note="reworded by the model")

    assert first.payment.id == again.payment.id
    assert len(fake.effects) == 1
    (key,) = set(fake.keys_seen())
    assert len(key) <= KEY_LIMIT, key
    assert len(fake.requests) == 1  # the re-run was answered from the ledger


def test_a_lost_answer_is_retried_by_the_sdk_into_the_same_payment(guard, fake):
    proxy = guard("square", fake)
    fake.misbehave("drop")

    first = pay(client(proxy), "wf-lost")
    again = pay(client(proxy), "wf-lost")

    assert first.payment.id == again.payment.id == fake.effects[0]["id"]
    assert len(fake.effects) == 1
    assert fake.history == ["dropped", "replayed"]
    assert proxy.only_operation()["state"] == "succeeded"


def test_a_parameter_change_is_an_api_error_with_the_proxy_detail(guard, fake):
    proxy = guard("square", fake)
    pay(client(proxy), "wf-change", amount=1200)

    with pytest.raises(ApiError) as raised:
        pay(client(proxy), "wf-change", amount=9900, retries=0)

    error = raised.value
    assert error.status_code == 409
    assert error.body["type"] == "urn:idemproxy:parameter-mismatch"
    assert error.errors[0].detail == error.body["detail"], error.body
    assert proxy.requests(outcome="conflict") == 1
    assert len(fake.effects) == 1 and len(fake.requests) == 1


def test_the_sdk_retries_a_parameter_mismatch_as_it_retries_every_409(guard, fake):
    # Documented, not wished for: Square's SDK retries any 409, so with its default of two
    # retries the proxy answers the mismatch three times; nothing reaches Square.
    proxy = guard("square", fake)
    pay(client(proxy), "wf-409")

    with pytest.raises(ApiError) as raised:
        pay(client(proxy), "wf-409", amount=9900)

    assert raised.value.status_code == 409
    assert proxy.requests(outcome="conflict") == 3
    assert len(fake.effects) == 1 and len(fake.requests) == 1


def test_in_progress_at_square_is_waited_out_by_the_sdk(guard, fake):
    proxy = guard("square", fake, timeout="1s")
    fake.misbehave("hold")

    paid = pay(client(proxy), "wf-busy")

    assert fake.history == ["held", "in_progress", "replayed"]
    assert paid.payment.id == fake.effects[0]["id"] and len(fake.effects) == 1
    assert proxy.only_operation()["state"] == "succeeded"


def test_unknown_without_sdk_retries_is_an_api_error_then_a_rerun_succeeds(guard, fake):
    proxy = guard("square", fake)
    fake.misbehave("drop")

    with pytest.raises(ApiError) as raised:
        pay(client(proxy), "wf-503", retries=0)
    assert raised.value.status_code == 503
    assert raised.value.body["type"] == "urn:idemproxy:outcome-unknown"

    again = pay(client(proxy), "wf-503")
    assert again.payment.id == fake.effects[0]["id"] and len(fake.effects) == 1


def test_unknown_with_pending_status_202_is_a_response_without_a_payment(guard, fake):
    proxy = guard("square", fake, pending_status=202)
    fake.misbehave("drop")

    taken = pay(client(proxy), "wf-202")

    # No exception: a response whose payment is None, and the policy's shaped `errors` entry.
    assert taken.payment is None
    assert taken.errors[0].code == "SERVICE_UNAVAILABLE" and "cannot yet confirm" in taken.errors[0].detail
    assert proxy.only_operation()["state"] == "unknown"
    assert len(fake.effects) == 1


def test_an_unreachable_square_is_retried_by_the_sdk_then_raised(guard, closed_port_url):
    proxy = guard("square", closed_port_url)

    with pytest.raises(ApiError) as raised:
        pay(client(proxy), "wf-down", retries=1)

    assert raised.value.status_code == 502
    assert raised.value.body["type"] == "urn:idemproxy:upstream-unreachable"
    assert proxy.requests(outcome="forwarded") == 2


def test_an_unwritable_ledger_is_retried_by_the_sdk_then_raised(guard, fake):
    proxy = guard("square", fake, extra_env={"IDEMPROXY_FAIL": "ledger.commit"})

    with pytest.raises(ApiError) as raised:
        pay(client(proxy), "wf-ledger", retries=1)

    assert raised.value.status_code == 503
    assert raised.value.body["type"] == "urn:idemproxy:ledger-unavailable"
    assert proxy.requests(outcome="rejected") == 2
    assert fake.requests == []
