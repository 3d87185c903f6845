"""The official `increase` SDK (Stainless-generated) through idemproxy with the shipped
policies/increase.toml.

What the SDK does (increase/_base_client.py, `SyncAPIClient.request`, `_should_retry` and
`_calculate_retry_timeout`): it retries timeouts and connection errors, and answers that say
`x-should-retry: true`, or (without that header) 408, 429 and >= 500 (not 409), `max_retries`
times (2 by default), waiting `retry-after-ms` or `Retry-After` when between 0 and 60 s,
else 0.5 s doubling; `x-should-retry: false` stops it. Errors are classed by the body's `type`
and then the status (increase/_client.py, `Increase._make_status_error`); every 2xx is
parsed as the object asked for, without validation.
"""

import increase
import pytest

from fake_increase import FakeIncrease


@pytest.fixture
def fake():
    fake = FakeIncrease()
    yield fake
    fake.close()


def client(proxy, retries=2):
    return increase.Increase(api_key="inc-key", base_url=proxy.url("/increase"), max_retries=retries)


def transfer(sdk, workflow, amount=10000):
    return sdk.account_transfers.create(
        account_id="account_in71c4amph0vgo2qllky",
        destination_account_id="account_uf16sut2ct5bevmq3eh",
        amount=amount,
        description="Invoice 1042",
        extra_headers={"X-Workflow-Id": workflow},
    )


def test_a_lost_answer_is_retried_by_the_sdk_and_a_rerun_replays_the_same_transfer(guard, fake):
    proxy = guard("increase", fake)
    fake.misbehave("drop")

    first = transfer(client(proxy), "wf-lost")
    assert fake.history == ["dropped", "replayed"]  # the SDK's retry, re-sent with the same key
    again = transfer(client(proxy), "wf-lost")

    assert first.id == again.id == fake.effects[0]["id"]
    assert len(fake.effects) == 1
    assert len(fake.requests) == 2 and len(set(fake.keys_seen())) == 1  # the re-run: from the ledger
    assert proxy.only_operation()["state"] == "succeeded"


def test_a_parameter_change_is_a_conflict_error_raised_once_with_the_proxy_detail(guard, fake):
    proxy = guard("increase", fake)
    transfer(client(proxy), "wf-change", amount=10000)

    with pytest.raises(increase.ConflictError) as raised:
        transfer(client(proxy), "wf-change", amount=99999)

    error = raised.value
    assert error.status_code == 409
    assert error.body["type"] == "urn:idemproxy:parameter-mismatch"
    assert error.body["detail"] in str(error)
    assert proxy.requests(outcome="conflict") == 1
    assert len(fake.effects) == 1 and len(fake.requests) == 1


def test_in_progress_at_increase_is_waited_out_by_the_sdk(guard, fake):
    proxy = guard("increase", fake, timeout="1s")
    fake.misbehave("hold")

    done = transfer(client(proxy, retries=3), "wf-busy")

    # Increase's 409 idempotency_key_already_used_error: the policy reconciles with the list
    # filter by key, which finds the transfer the first request made.
    assert fake.history == ["held", "in_progress"]
    assert ("GET", "/account_transfers", None) in fake.requests
    assert done.id == fake.effects[0]["id"] and len(fake.effects) == 1
    assert proxy.only_operation()["state"] == "succeeded"


def test_unknown_without_sdk_retries_is_a_clear_error_then_a_rerun_succeeds(guard, fake):
    proxy = guard("increase", fake)
    fake.misbehave("drop")

    with pytest.raises(increase.InternalServerError) as raised:
        transfer(client(proxy, retries=0), "wf-503")
    assert raised.value.status_code == 503
    assert "urn:idemproxy:outcome-unknown" in str(raised.value)
    assert "cannot yet confirm" in str(raised.value)

    again = transfer(client(proxy, retries=0), "wf-503")
    assert again.id == fake.effects[0]["id"] and len(fake.effects) == 1


def test_unknown_with_pending_status_202_is_taken_for_a_transfer_without_an_id(guard, fake):
    proxy = guard("increase", fake, pending_status=202)
    fake.misbehave("drop")

    taken = transfer(client(proxy), "wf-202")

    assert getattr(taken, "id", None) is None
    assert taken.type == "urn:idemproxy:outcome-unknown"
    assert proxy.only_operation()["state"] == "unknown"


def test_an_unreachable_increase_is_retried_by_the_sdk_then_raised(guard, closed_port_url):
    proxy = guard("increase", closed_port_url)

    with pytest.raises(increase.InternalServerError) as raised:
        transfer(client(proxy, retries=1), "wf-down")

    assert raised.value.status_code == 502
    assert proxy.requests(outcome="forwarded") == 2


def test_an_unwritable_ledger_is_retried_by_the_sdk_then_raised(guard, fake):
    proxy = guard("increase", fake, extra_env={"IDEMPROXY_FAIL": "ledger.commit"})

    with pytest.raises(increase.InternalServerError) as raised:
        transfer(client(proxy, retries=1), "wf-ledger")

    assert raised.value.status_code == 503
    assert proxy.requests(outcome="rejected") == 2
    assert fake.requests == []
