"""An OpenAI Agents SDK function tool: send an email with Resend through idemproxy.

The Agents SDK passes the run's context object to a tool whose first parameter is a
`RunContextWrapper`, and leaves that parameter out of the tool's JSON schema
(https://openai.github.io/openai-agents-python/context/). The workflow's identity is that
context, given to `Runner.run` by the code that runs the step: the model never sees it. The
shipped policies/resend.toml names an email by `{header:x-workflow-id}:email:{json:/subject}`.
"""

import asyncio
import os
import time
from dataclasses import dataclass

import httpx
from agents import Agent, RunContextWrapper, Runner, function_tool

PROXY = os.environ.get("IDEMPROXY_URL", "http://127.0.0.1:8080")


@dataclass
class WorkflowStep:
    """The run and step this agent executes in, from the workflow runtime."""

    workflow_id: str
    step: str


@function_tool
def send_email(ctx: RunContextWrapper[WorkflowStep], to: str, subject: str, html: str) -> str:
    """Send one email to `to` with this subject and HTML body."""
    headers = {
        "Authorization": f"Bearer {os.environ.get('RESEND_API_KEY', '')}",
        "X-Workflow-Id": f"{ctx.context.workflow_id}:{ctx.context.step}",
    }
    body = {"from": "billing@example.com", "to": [to], "subject": subject, "html": html}
    for _ in range(4):
        resp = httpx.post(f"{PROXY}/resend/emails", json=body, headers=headers, timeout=60)
        problem = resp.json() if resp.headers.get("content-type", "").startswith("application/problem+json") else {}
        if problem.get("next") != "retry_same":
            break
        # The proxy says the same request may be sent again: it decides what is re-sent.
        time.sleep(float(resp.headers.get("retry-after", "1")))
    else:
        return "Not confirmed yet: do not send it again, it will be resolved."
    if problem:
        # wait: held for a person; new_operation, fix_request, stop: not sent as asked.
        return f"Not sent ({problem['next']}): {problem['detail']}"
    if resp.status_code >= 400:
        return f"Not sent: {resp.json().get('message', resp.text)}"
    return f"Sent: {resp.json()['id']}"


agent = Agent[WorkflowStep](
    name="Billing assistant",
    instructions="Email the customer their invoice when asked. Send each email once.",
    tools=[send_email],
)


async def main():
    step = WorkflowStep(workflow_id=os.environ.get("WORKFLOW_ID", "wf-81"), step="notify")
    result = await Runner.run(agent, "Email ada@example.com that invoice 1042 is ready.", context=step)
    print(result.final_output)


if __name__ == "__main__":
    asyncio.run(main())
