"""The agent examples of examples/agents/: the plain httpx tool runs against the proxy and a
fake Stripe; the agno and OpenAI Agents SDK ones (frameworks not installed here) must compile.
"""

import importlib.util

import pytest

from fake_stripe import FakeStripe
from harness import REPO

EXAMPLES = REPO / "examples" / "agents"


def load(name):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def fake():
    fake = FakeStripe()
    yield fake
    fake.close()


def test_the_httpx_tool_refunds_once_per_step_and_reports_a_mismatch(guard, fake, monkeypatch):
    proxy = guard("stripe", fake)
    tool = load("httpx_tool")
    monkeypatch.setattr(tool, "PROXY", proxy.url())
    step = tool.Step(workflow_id="wf-81", step="2")

    first = tool.refund_charge(step, "ch_1", 500, api_key="sk_test_x")
    rerun = tool.refund_charge(step, "ch_1", 500, api_key="sk_test_x")
    changed = tool.refund_charge(step, "ch_1", 900, api_key="sk_test_x")

    assert first["id"] == rerun["id"] and first["amount"] == 500
    assert changed["differing_fields"] == ["amount"] and "Nothing was sent" in changed["error"]
    assert len(fake.effects) == 1
    next_step = tool.refund_charge(tool.Step("wf-81", "3"), "ch_1", 900, api_key="sk_test_x")
    assert next_step["id"] != first["id"] and len(fake.effects) == 2


def test_the_httpx_tool_acts_on_next(guard, fake, monkeypatch):
    """retry_same: a lost answer from Stripe, which deduplicates, is retried unchanged and
    answered once; wait: without deduplication the same loss is handed to the model, not
    retried; new_operation: other parameters under the step's ID."""
    tool = load("httpx_tool")
    paused = []
    monkeypatch.setattr(tool, "pause", paused.append)

    monkeypatch.setattr(tool, "PROXY", guard("stripe", fake).url())
    fake.misbehave("drop")
    refund = tool.refund_charge(tool.Step("wf-1", "2"), "ch_1", 500, api_key="sk_test_x")
    assert refund["amount"] == 500 and len(paused) == 1, (refund, paused)
    assert len(fake.effects) == 1
    changed = tool.refund_charge(tool.Step("wf-1", "2"), "ch_1", 900, api_key="sk_test_x")
    assert changed["next"] == "new_operation" and changed["differing_fields"] == ["amount"]

    held = FakeStripe()
    try:
        monkeypatch.setattr(tool, "PROXY", guard("stripe", held, dedupe="none").url())
        held.misbehave("drop")
        answer = tool.refund_charge(tool.Step("wf-2", "2"), "ch_1", 500, api_key="sk_test_x")
        assert answer["next"] == "wait" and "held until it is resolved" in answer["error"], answer
        assert len(paused) == 1, "a held operation is not retried"
        assert len(held.effects) == 1
    finally:
        held.close()


@pytest.mark.parametrize("name", ["agno_tool", "openai_agents_tool", "httpx_tool"])
def test_every_example_compiles(name):
    source = (EXAMPLES / f"{name}.py").read_text()
    compile(source, f"{name}.py", "exec")
