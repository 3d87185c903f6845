"""The official `resend` SDK through idemproxy with the shipped policies/resend.toml.

What the SDK does (resend/request.py, `Request.perform` and `Request.make_request`): it never
retries. An answer whose Content-Type does not contain `application/json` is raised as an
error at once (status >= 400 as that code, else 500, type `application_error`); a JSON answer
with status >= 400 (or a `statusCode` in the body) is raised by `raise_for_code_and_type`
(resend/exceptions.py) from the body's `name` and `message`; anything else is the result.
HTTP headers of its own cannot be added but through its HTTP client (`resend.default_http_client`),
which is how the workflow ID travels here. The shipped policy sends the proxy's problems as
`application/json` in Resend's envelope, so the SDK raises them with the proxy's detail.
"""

import pytest
import resend
from resend.exceptions import ResendError
from resend.http_client_requests import RequestsClient

from fake_resend import FakeResend


class WorkflowClient(RequestsClient):
    """The SDK's default HTTP client plus the workflow's ID header."""

    def __init__(self, workflow):
        super().__init__(timeout=20)
        self.workflow = workflow

    def request(self, method, url, headers, json=None, files=None, data=None):
        headers = {**headers, "X-Workflow-Id": self.workflow}
        return super().request(method, url, headers, json=json, files=files, data=data)


@pytest.fixture
def fake():
    fake = FakeResend()
    yield fake
    fake.close()


@pytest.fixture
def sdk(monkeypatch):
    """Points the (module-level) SDK at a proxy; restored after the test."""

    def point(proxy):
        monkeypatch.setattr(resend, "api_key", "re_test_key")
        monkeypatch.setattr(resend, "api_url", proxy.url("/resend"))
        return proxy

    return point


def send(workflow, html="<p>Invoice 1042 is attached.</p>"):
    # The shipped policy names an email by workflow and subject: the subject stays, so a new
    # body is a changed parameter of the same email.
    resend.default_http_client = WorkflowClient(workflow)
    return resend.Emails.send({
        "from": "billing@example.com",
        "to": ["ada@example.com"],
        "subject": "Your invoice",
        "html": html,
    })


@pytest.fixture(autouse=True)
def default_client():
    saved = resend.default_http_client
    yield
    resend.default_http_client = saved


def test_a_lost_answer_is_a_clear_error_and_the_rerun_gets_the_same_email(guard, fake, sdk):
    proxy = sdk(guard("resend", fake))
    fake.misbehave("drop")

    with pytest.raises(ResendError) as raised:
        send("wf-lost")
    assert int(raised.value.code) == 503
    assert raised.value.error_type == "idemproxy_outcome-unknown"
    assert "cannot yet confirm" in raised.value.message, raised.value.message
    assert proxy.requests() == 1  # the SDK never retries

    first = send("wf-lost")
    again = send("wf-lost")

    assert first["id"] == again["id"] == fake.effects[0]["id"]
    assert len(fake.effects) == 1 and fake.history == ["dropped", "replayed"]
    assert proxy.only_operation()["state"] == "succeeded"


def test_the_sdks_own_idempotency_key_alone_names_the_email(guard, fake, sdk):
    """Issue 31, item 7: no workflow header, only the SDK's `idempotency_key` option (sent as
    `Idempotency-Key` only when its caller chose one): the policy's last template takes it as
    the operation ID, so a lost answer's re-run with the same key gets the same email."""
    proxy = sdk(guard("resend", fake))
    resend.default_http_client = RequestsClient(timeout=20)
    params = {"from": "billing@example.com", "to": ["ada@example.com"],
              "subject": "Your invoice", "html": "<p>Invoice 1042 is attached.</p>"}
    options = {"idempotency_key": "invoice-1042-email"}
    fake.misbehave("drop")

    with pytest.raises(ResendError) as raised:
        resend.Emails.send(params, options)
    assert int(raised.value.code) == 503, raised.value.message
    first = resend.Emails.send(params, options)
    again = resend.Emails.send(params, options)

    assert first["id"] == again["id"] == fake.effects[0]["id"]
    assert len(fake.effects) == 1
    operation = proxy.only_operation()
    assert operation["operation_id"] == "resend/send_email/invoice-1042-email", operation
    assert operation["state"] == "succeeded"
    # The key Resend saw is the proxy's own, derived from the operation ID, not the caller's.
    assert "invoice-1042-email" not in fake.keys_seen()


def change(proxy):
    send("wf-change")
    with pytest.raises(ResendError) as raised:
        send("wf-change", html="<p>Invoice 1042, corrected, is attached.</p>")
    return raised.value


def test_a_parameter_change_is_a_resend_error_raised_once(guard, fake, sdk):
    proxy = sdk(guard("resend", fake))

    error = change(proxy)

    assert int(error.code) == 409
    assert proxy.requests(outcome="conflict") == 1
    assert len(fake.effects) == 1 and len(fake.requests) == 1


def test_a_parameter_change_carries_the_proxy_detail(guard, fake, sdk):
    error = change(sdk(guard("resend", fake)))

    assert "Nothing was sent" in error.message, error.message
    assert "other parameters" in error.message, error.message
    assert error.error_type == "invalid_idempotent_request"


def test_in_progress_at_resend_is_an_error_until_the_first_request_ends(guard, fake, sdk):
    proxy = sdk(guard("resend", fake, timeout="1s"))
    fake.misbehave("hold")

    with pytest.raises(ResendError):
        send("wf-busy")  # held past the proxy's timeout
    with pytest.raises(ResendError):
        send("wf-busy")  # Resend: concurrent_idempotent_requests
    done = send("wf-busy")

    assert fake.history == ["held", "in_progress", "replayed"]
    assert done["id"] == fake.effects[0]["id"] and len(fake.effects) == 1
    assert proxy.only_operation()["state"] == "succeeded"


def test_unknown_with_pending_status_202_is_still_an_error(guard, fake, sdk):
    proxy = sdk(guard("resend", fake, pending_status=202))
    fake.misbehave("drop")

    with pytest.raises(ResendError) as raised:
        send("wf-202")

    # Request.perform raises for the body's statusCode (202, not 200), with the proxy's detail.
    assert int(raised.value.code) == 202
    assert raised.value.error_type == "idemproxy_outcome-unknown"
    assert "cannot yet confirm" in raised.value.message, raised.value.message
    assert proxy.only_operation()["state"] == "unknown"
    assert len(fake.effects) == 1


def test_an_unreachable_resend_is_raised(guard, closed_port_url, sdk):
    proxy = sdk(guard("resend", closed_port_url))

    with pytest.raises(ResendError) as raised:
        send("wf-down")

    assert int(raised.value.code) == 502
    assert raised.value.error_type == "idemproxy_upstream-unreachable"
    assert proxy.requests(outcome="forwarded") == 1


def test_an_unwritable_ledger_is_raised(guard, fake, sdk):
    proxy = sdk(guard("resend", fake, extra_env={"IDEMPROXY_FAIL": "ledger.commit"}))

    with pytest.raises(ResendError) as raised:
        send("wf-ledger")

    assert int(raised.value.code) == 503
    assert raised.value.error_type == "idemproxy_ledger-unavailable"
    assert fake.requests == []
