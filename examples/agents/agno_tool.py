"""An agno tool: refund part of a Stripe charge through idemproxy with the official SDK.

agno injects a tool parameter named `run_context` (agno.run.RunContext) and leaves it out of
the schema the model sees (https://docs.agno.com/reference/run/run_context). The workflow's
identity travels in the run's `dependencies`, set by the code that starts the run, so the
model cannot choose or change it; the tool turns it into the `X-Workflow-Id` header.
"""

import os

import stripe
from agno.agent import Agent
from agno.models.openai import OpenAIChat
from agno.run import RunContext
from agno.tools import tool

PROXY = os.environ.get("IDEMPROXY_URL", "http://127.0.0.1:8080")

# Stripe's SDK, pointed at the proxy's mount. Its own retries are safe there: the shipped
# policy answers an unknown outcome 503 with Stripe-Should-Retry: true, and a parameter
# mismatch 409 with Stripe-Should-Retry: false.
STRIPE = stripe.StripeClient(
    os.environ.get("STRIPE_API_KEY", "sk_test_..."),
    base_addresses={"api": f"{PROXY}/stripe"},
    max_network_retries=3,
)


@tool
def refund_charge(run_context: RunContext, charge: str, amount: int) -> str:
    """Refund `amount` (in cents) of the Stripe charge `charge`."""
    workflow = run_context.dependencies["workflow_id"]  # from the run, not from the model
    step = run_context.dependencies["step"]
    try:
        refund = STRIPE.v1.refunds.create(
            {"charge": charge, "amount": amount, "metadata": {"step": step}},
            options={"headers": {"X-Workflow-Id": workflow}},
        )
    except stripe.StripeError as error:
        # A parameter mismatch, or an outcome still unknown after the SDK's retries: the
        # message is the proxy's own explanation, written for a person (and a model), and
        # `next` says what to do (retry_same, wait, new_operation, fix_request, stop).
        next_step = (error.json_body or {}).get("next", "stop")
        return f"Refund not made or not confirmed (next: {next_step}): {error.user_message}"
    return f"Refund {refund.id}: {refund.amount} cents, {refund.status}"


agent = Agent(
    model=OpenAIChat(id="gpt-4o"),
    tools=[refund_charge],
    instructions="You handle refunds. Use refund_charge once per refund the customer is owed.",
)

if __name__ == "__main__":
    # The workflow runtime starts the step; a re-run of the same step passes the same values.
    agent.print_response(
        "Refund 5 dollars of charge ch_1.",
        dependencies={"workflow_id": os.environ.get("WORKFLOW_ID", "wf-81"), "step": "2"},
    )
