"""A plain httpx tool: refund part of a Stripe charge through idemproxy.

Framework-free: the workflow runtime (Temporal, a job queue, an agent framework) builds a
`Step` for the run and step it is executing and hands it to the tool; the model only supplies
`charge` and `amount`. The shipped policies/stripe.toml names a refund by
`{header:x-workflow-id}:{form:charge}:refund:{form:metadata[step]}`, so the same step of the
same run refunds a charge at most once, however often the tool runs.
"""

import os
import time
from dataclasses import dataclass

import httpx

PROXY = os.environ.get("IDEMPROXY_URL", "http://127.0.0.1:8080")
PENDING = {"urn:idemproxy:outcome-unknown", "urn:idemproxy:in-flight"}


@dataclass(frozen=True)
class Step:
    """Where the tool runs, from the workflow runtime (never from the model)."""

    workflow_id: str  # e.g. the run's ID: stable across retries and restarts of the run
    step: str  # e.g. the step's name or index within the run


def refund_charge(step: Step, charge: str, amount: int, *, tries: int = 4, api_key: str = "") -> dict:
    """The tool. Returns the refund, or {"error": ...} the model can read."""
    headers = {
        "Authorization": f"Bearer {api_key or os.environ.get('STRIPE_API_KEY', '')}",
        "X-Workflow-Id": step.workflow_id,
    }
    form = {"charge": charge, "amount": str(amount), "metadata[step]": step.step}
    with httpx.Client(base_url=f"{PROXY}/stripe", timeout=60) as client:
        for _ in range(tries):
            resp = client.post("/v1/refunds", data=form, headers=headers)
            problem = problem_type(resp)
            if problem not in PENDING:
                return result(resp, problem)
            # The outcome is not known yet: asking again is safe, the proxy decides whether
            # anything is re-sent (it re-sends the first request with the same key, or not).
            time.sleep(float(resp.headers.get("retry-after", "5")))
    return {"error": "The refund is not confirmed yet. Do not refund again; it will be resolved."}


def problem_type(resp: httpx.Response):
    """The proxy's problem type (`urn:idemproxy:...`) when the answer is one of its own."""
    if not resp.headers.get("content-type", "").startswith("application/problem+json"):
        return None
    return resp.json().get("type")


def result(resp: httpx.Response, problem) -> dict:
    if problem == "urn:idemproxy:parameter-mismatch":
        body = resp.json()
        return {"error": body["detail"], "differing_fields": body.get("differing_fields", [])}
    if problem is not None:
        return {"error": resp.json()["detail"]}
    body = resp.json()
    if resp.status_code >= 400:
        return {"error": body.get("error", {}).get("message", resp.text)}
    return body


if __name__ == "__main__":
    step = Step(workflow_id=os.environ.get("WORKFLOW_ID", "wf-81"), step="2")
    print(refund_charge(step, charge="ch_1", amount=500))
    print(refund_charge(step, charge="ch_1", amount=500))  # a re-run: the same refund, replayed
