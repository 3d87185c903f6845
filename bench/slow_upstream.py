"""A provider for bench/soak.sh that makes unknown outcomes: it holds the first request of
each idempotency key for HOLD seconds (longer than the soak policy's `timeout`, so the proxy
answers `202 outcome-unknown`) and answers every later request with that key at once, as a
deduplicating provider answers a re-send. It counts effects (first requests) and re-sends and
writes them to STATS on exit (SIGTERM).

    python3 bench/slow_upstream.py PORT HOLD STATS
"""

import asyncio
import json
import signal
import sys

seen: set[str] = set()
counts = {"effects": 0, "resends": 0, "requests": 0}


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    hold = float(sys.argv[2])
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            headers = {}
            for line in head.decode("latin-1").split("\r\n")[1:]:
                if ":" in line:
                    name, value = line.split(":", 1)
                    headers[name.strip().lower()] = value.strip()
            length = int(headers.get("content-length", "0"))
            if length:
                await reader.readexactly(length)
            counts["requests"] += 1
            key = headers.get("idempotency-key", "")
            if key in seen:
                counts["resends"] += 1
            else:
                seen.add(key)
                counts["effects"] += 1
                await asyncio.sleep(hold)
            body = b'{"id":"ch_1","object":"charge"}'
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
                + str(len(body)).encode()
                + b"\r\n\r\n"
                + body
            )
            await writer.drain()
    except (
        asyncio.IncompleteReadError,
        asyncio.LimitOverrunError,
        asyncio.CancelledError,
        ConnectionError,
    ):
        pass
    finally:
        writer.close()


async def main() -> None:
    server = await asyncio.start_server(handle, "127.0.0.1", int(sys.argv[1]))
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with server:
        await stop.wait()
    with open(sys.argv[3], "w") as out:
        json.dump(counts, out)


asyncio.run(main())
