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
pause = time.sleep  # between retries of the same request (a test replaces it)


@dataclass(frozen=True)
class Step:
    """Where the tool runs, from the workflow runtime (never from the model)."""

    workflow_id: str  # e.g. the run's ID: stable across retries and restarts of the run
    step: str  # e.g. the step's name or index within the run


def refund_charge(step: Step, charge: str, amount: int, *, tries: int = 4, api_key: str = "") -> dict:
    """The tool. Returns the refund, or {"error": ..., "next": ...} the model can read."""
    headers = {
        "Authorization": f"Bearer {api_key or os.environ.get('STRIPE_API_KEY', '')}",
        "X-Workflow-Id": step.workflow_id,
    }
    form = {"charge": charge, "amount": str(amount), "metadata[step]": step.step}
    with httpx.Client(base_url=f"{PROXY}/stripe", timeout=60) as client:
        for _ in range(tries):
            resp = client.post("/v1/refunds", data=form, headers=headers)
            problem = proxy_problem(resp)
            if problem is None:
                return result(resp)
            if problem.get("next") != "retry_same":
                return refused(problem)
            # The proxy says the same request may be sent again (the outcome is not known
            # yet and will be re-sent with the same key, or it is still in flight, or
            # nothing was sent): it decides whether anything reaches Stripe.
            pause(float(resp.headers.get("retry-after", "1")))
    return {"error": "The refund is not confirmed yet. Do not refund again; it will be resolved.",
            "next": "retry_same"}


def proxy_problem(resp: httpx.Response):
    """The proxy's own problem document (its `type` is `urn:idemproxy:...`), or None."""
    if not resp.headers.get("content-type", "").startswith(("application/problem+json", "application/json")):
        return None
    body = resp.json()
    is_problem = isinstance(body, dict) and str(body.get("type", "")).startswith("urn:idemproxy:")
    return body if is_problem else None


def refused(problem: dict) -> dict:
    """What the model reads when the proxy says not to send the same request again now.

    `next` tells the program, `detail` tells the model: `wait` (held for a person: do not
    refund again), `new_operation` (this step already asked for something else), `fix_request`
    (the request is wrong), `stop` (refused for good)."""
    answer = {"error": problem["detail"], "next": problem.get("next")}
    if "differing_fields" in problem:
        answer["differing_fields"] = problem["differing_fields"]
    return answer


def result(resp: httpx.Response) -> dict:
    body = resp.json()
    if resp.status_code >= 400:
        return {"error": body.get("error", {}).get("message", resp.text)}
    return body


if __name__ == "__main__":
    step = Step(workflow_id=os.environ.get("WORKFLOW_ID", "wf-81"), step="2")
    print(refund_charge(step, charge="ch_1", amount=500))
    print(refund_charge(step, charge="ch_1", amount=500))  # a re-run: the same refund, replayed
