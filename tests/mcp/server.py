"""An MCP server for the behaviour tests of tests/mcp: the official SDK's `MCPServer` over
streamable HTTP, with a `refund(invoice, amount)` tool that counts its effects.

Each run of `refund` appends one line to the effects file *before* anything else (the effect
happens at once), then sleeps as long as the slow file says (seconds; absent = 0), then answers.
An `amount` below zero makes the tool raise after its line: the SDK answers `isError: true`.
`lookup(invoice)` is a read that nothing guards. `report(invoice)` sends two progress
notifications before its answer (they travel on the event stream in SSE mode).

    python server.py STATE_DIR json|sse

It binds 127.0.0.1 on a free port, prints the port on one line, and serves `/mcp` until killed.
"""

import json
import socket
import sys
import time
from pathlib import Path

import anyio
import uvicorn
from mcp.server.mcpserver import Context, MCPServer

state = Path(sys.argv[1])
mode = sys.argv[2]
effects = state / "effects"
slow = state / "slow"

server = MCPServer("billing")


@server.tool()
async def refund(invoice: str, amount: int) -> str:
    """Refunds `amount` cents of `invoice`: a side effect that must happen once."""
    with effects.open("a") as f:
        f.write(json.dumps({"invoice": invoice, "amount": amount}) + "\n")
    if slow.exists():
        await anyio.sleep(float(slow.read_text()))
    if amount < 0:
        raise ValueError(f"cannot refund a negative amount ({amount})")
    count = len(effects.read_text().splitlines())
    return f"refunded {amount} of {invoice} (effect {count})"


@server.tool()
async def lookup(invoice: str) -> str:
    """A read: the refunds of `invoice` so far."""
    lines = effects.read_text().splitlines() if effects.exists() else []
    return f"{sum(1 for l in lines if json.loads(l)['invoice'] == invoice)} refunds of {invoice}"


@server.tool()
async def report(invoice: str, ctx: Context) -> str:
    """Reports progress twice before it answers."""
    await ctx.report_progress(1, 2)
    await ctx.report_progress(2, 2)
    return f"report of {invoice}"


def main() -> None:
    app = server.streamable_http_app(json_response=(mode == "json"))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    print(sock.getsockname()[1], flush=True)
    config = uvicorn.Config(app, log_level="warning")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
