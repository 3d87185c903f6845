"""The official MCP SDK's client for the behaviour tests of tests/mcp: one session (one process)
that calls tools through the proxy and prints each result as one JSON line.

    python client.py URL MODE WORKFLOW CALL...

MODE is `legacy` (the initialize handshake and a session) or `auto` (the SDK's default: the
2026-07-28 single exchange where the server offers it). WORKFLOW goes in `x-workflow-id`. Each
CALL is `list`, or `TOOL` followed by `key=value` arguments up to the next `--` (values that
read as integers are sent as integers). A printed result: {"isError", "text", "meta", "progress"} (`meta`:
the result's `_meta.idemproxy`; `progress`: how many progress notifications came before it), or
for `list` the tool names.
"""

import asyncio
import json
import sys

import httpx2
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client


def calls(words):
    call = []
    for word in words + ["--"]:
        if word == "--":
            if call:
                yield call[0], dict(arg(w) for w in call[1:])
            call = []
        else:
            call.append(word)


def arg(word):
    key, value = word.split("=", 1)
    try:
        return key, int(value)
    except ValueError:
        return key, value


async def main(url, mode, workflow, words):
    async with httpx2.AsyncClient(headers={"x-workflow-id": workflow}, timeout=60) as http:
        async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
            for tool, arguments in calls(words):
                if tool == "list":
                    listed = await client.list_tools()
                    print(json.dumps(sorted(t.name for t in listed.tools)), flush=True)
                    continue
                progress = []

                async def heard(done, total, message):
                    progress.append(done)

                result = await client.call_tool(tool, arguments, progress_callback=heard)
                text = " ".join(c.text for c in result.content if c.type == "text")
                meta = (result.meta or {}).get("idemproxy")
                line = {"isError": result.is_error, "text": text, "meta": meta, "progress": len(progress)}
                print(json.dumps(line), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]))
