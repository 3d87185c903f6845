"""The official `gocardless-pro` SDK through idemproxy with the shipped
policies/gocardless.toml.

What the SDK does (gocardless_pro/services/base_service.py, `BaseService._perform_request`):
creates are tried up to 3 times, 0.5 s apart, but only on a `requests` Timeout or
ConnectionError or a body that is not JSON (`MalformedResponseError`); any JSON error answer
is raised at once (gocardless_pro/api_client.py, `ApiClient._handle_errors`, by the error's
`type`). A create answered 409 `idempotent_creation_conflict` is followed by a GET of the
conflicting resource (payments_service.py, `PaymentsService.create`). Every other status
below 400 is parsed as the resource, from the body's envelope or the body itself.

The SDK joins its paths to `base_url` with `urljoin` and an absolute path
(api_client.py, `ApiClient._url_for`), which drops any path in `base_url`: a mount such as
http://127.0.0.1:8080/gocardless cannot work. It reaches the proxy as a forward proxy
instead: `HTTP_PROXY` pointing at the proxy and `base_url` the provider's own host over
plain http (idemproxy then talks TLS to the real https upstream).
"""

import gocardless_pro
import pytest
from gocardless_pro import errors

from fake_gocardless import FakeGoCardless


@pytest.fixture
def fake():
    fake = FakeGoCardless()
    yield fake
    fake.close()


@pytest.fixture
def via(monkeypatch):
    """Points `requests` (the SDK's HTTP client) at the proxy, as HTTP_PROXY does."""

    def route(proxy):
        monkeypatch.setenv("HTTP_PROXY", proxy.url())
        monkeypatch.setenv("http_proxy", proxy.url())
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)

    return route


def client(fake, timeout=20):
    return gocardless_pro.Client(access_token="gc-token", base_url=fake.url, timeout=timeout)


def collect(sdk, workflow, amount=2500):
    return sdk.payments.create(
        params={
            "amount": amount,
            "currency": "GBP",
            "reference": "INV-9",
            "metadata": {"step": "3"},
            "links": {"mandate": "MD123"},
        },
        headers={"X-Workflow-Id": workflow},
    )


def test_sdk_retries_after_its_own_timeout_and_a_rerun_return_the_same_payment(guard, fake, via):
    proxy = guard("gocardless", fake)
    via(proxy)
    fake.misbehave("late")  # answers after the SDK's 0.5 s timeout, well within the proxy's

    first = collect(client(fake, timeout=0.5), "wf-late")
    again = collect(client(fake), "wf-late")

    assert first.id == again.id == fake.effects[0]["id"]
    assert len(fake.effects) == 1 and fake.history == ["late"]
    assert proxy.only_operation()["state"] == "succeeded"


def test_a_retried_create_answered_with_a_conflict_replays_the_conflicting_payment(guard, fake, via):
    proxy = guard("gocardless", fake)
    via(proxy)
    fake.misbehave("drop")

    with pytest.raises(errors.GoCardlessInternalError) as raised:
        collect(client(fake), "wf-conflict")  # 503 outcome-unknown, never retried by the SDK
    assert "cannot yet confirm" in str(raised.value)
    assert proxy.requests() == 1

    # The agent re-runs the step: the proxy re-sends with the same key, GoCardless answers 409
    # idempotent_creation_conflict, the policy's reconcile rule looks the payment up.
    again = collect(client(fake), "wf-conflict")

    assert again.id == fake.effects[0]["id"] and again.amount == 2500
    assert fake.history == ["dropped", "conflict"]
    assert ("GET", f"/payments/{again.id}", None) in fake.requests
    operation = proxy.only_operation()
    assert operation["state"] == "succeeded"
    # The SDK never saw the 409 (it would have fetched the payment itself, unguarded).
    assert proxy.requests(outcome="passthrough") == 0
    third = collect(client(fake), "wf-conflict")
    assert third.id == again.id and len(fake.effects) == 1


def test_a_parameter_change_is_an_api_error_raised_once_with_the_proxy_detail(guard, fake, via):
    proxy = guard("gocardless", fake)
    via(proxy)
    collect(client(fake), "wf-change", amount=2500)

    with pytest.raises(errors.InvalidApiUsageError) as raised:
        collect(client(fake), "wf-change", amount=9900)

    assert "amount" in str(raised.value) and "Nothing was sent" in str(raised.value)
    assert proxy.requests(outcome="conflict") == 1
    assert len(fake.effects) == 1 and len(fake.requests) == 1


def test_in_progress_at_gocardless_is_reconciled_on_the_rerun(guard, fake, via):
    proxy = guard("gocardless", fake, timeout="1s")
    via(proxy)
    fake.misbehave("hold")

    with pytest.raises(errors.GoCardlessProError):
        collect(client(fake), "wf-busy")
    again = collect(client(fake), "wf-busy")

    assert fake.history == ["held", "in_progress"]
    assert again.id == fake.effects[0]["id"] and len(fake.effects) == 1
    assert proxy.only_operation()["state"] == "succeeded"


def test_unknown_with_pending_status_202_is_taken_for_a_payment_without_an_id(guard, fake, via):
    proxy = guard("gocardless", fake, pending_status=202)
    via(proxy)
    fake.misbehave("drop")

    taken = collect(client(fake), "wf-202")

    assert taken.id is None and taken.amount is None
    assert taken.attributes["type"] == "urn:idemproxy:outcome-unknown"
    assert proxy.only_operation()["state"] == "unknown"


def test_an_unreachable_gocardless_is_raised_without_a_retry(guard, closed_port_url, via):
    proxy = guard("gocardless", closed_port_url)
    via(proxy)

    with pytest.raises(errors.GoCardlessProError):
        gocardless_pro.Client(access_token="gc-token", base_url=closed_port_url).payments.create(
            params={"amount": 1, "currency": "GBP", "reference": "INV-9",
                    "metadata": {"step": "3"}, "links": {"mandate": "MD123"}},
            headers={"X-Workflow-Id": "wf-down"},
        )
    assert proxy.requests(outcome="forwarded") == 1


def test_an_unwritable_ledger_is_raised_without_a_retry(guard, fake, via):
    proxy = guard("gocardless", fake, extra_env={"IDEMPROXY_FAIL": "ledger.commit"})
    via(proxy)

    with pytest.raises(errors.GoCardlessProError):
        collect(client(fake), "wf-ledger")
    assert proxy.requests(outcome="rejected") == 1
    assert fake.requests == []
