#!/usr/bin/env python3
"""Writes fuzz/corpus/<target>/ from the repository's own inputs: fixtures/config, policies/,
and the bodies, paths and admin calls the tests send. Run from anywhere; it replaces the seeds
(files named seed-*) and leaves what the fuzzer found."""
import hashlib
import json
import re
import struct
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "fuzz" / "corpus"
seeds = {}


def add(target, data):
    if isinstance(data, str):
        data = data.encode()
    seeds.setdefault(target, []).append(data)


# config: proxy.toml, NUL, one policy file; every fixture folder with one proxy.toml.
for proxy in sorted((ROOT / "fixtures" / "config").rglob("proxy.toml")):
    policies = sorted((proxy.parent / "policies").glob("*.toml"))[:1]
    add("config", proxy.read_bytes() + b"\0" + (policies[0].read_bytes() if policies else b""))
for name in ["stripe", "square", "adyen", "gocardless", "twilio"]:
    add("config", (ROOT / "proxy.toml").read_bytes() + b"\0" + (ROOT / "policies" / f"{name}.toml").read_bytes())

# The tests' bodies.
bodies = [
    b'{"amount":1000,"currency":"usd","metadata":{"trace_id":"t-1","order":"o-7"}}',
    b'{"amount": 1e400, "nested": [1, {"b": 2, "a": [true, null]}], "idempotency_key": "k"}',
    b'{"a":1,"a":2}',
    b'{"\\u0062":1,"b":2}',
    b"amount=1000&currency=usd&metadata[trace_id]=t-1&note=hello+there",
    b"a=%FF&b=%zz&=&&c",
    b"--b\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nDELETE\r\n--b--\r\n",
    b"\xff\xfe raw bytes",
]

# template: templates one a line, NUL, body, NUL, query.
templates = set()
for policy in (ROOT / "policies").glob("*.toml"):
    for line in policy.read_text().splitlines():
        for t in re.findall(r'"([^"]*\{[^"]*\}[^"]*)"', line):
            templates.add(t)
templates = sorted(templates)
for i, body in enumerate(bodies[:6]):
    add("template", "\n".join(templates[i::6]).encode() + b"\0" + body + b"\0" + b"trace=1&id=op-2")
add("template", b"{{literal}}{header:x-operation-id}-{json:/a~1b/0}\n{query:id}\n{path:id}{fingerprint}\0{}\0")

# fingerprint: content-type and method byte, body, NUL, query, NUL, path.
for i, body in enumerate(bodies):
    add("fingerprint", bytes([i % 6 | (i % 3) << 4]) + body + b"\0b=2&a=1&a=0&trace=x\0/v1/refunds/re_1")

# route: raw path, NUL, pattern, NUL, base, NUL, method.
paths = ["/v1/refunds", "/v1//refunds/./x/../re_1/", "/v1/Refunds%2Fre_1", "/v1/re%2561;x=1",
         "/v1/a%20/b\\c", "/api/v1/payments/p_1/refunds", "/.."]
patterns = sorted({m.split(" ", 1)[1] for p in (ROOT / "policies").glob("*.toml")
                   for m in re.findall(r'^match\s*=\s*"([^"]*)"', p.read_text(), re.M) if " " in m})
for i, path in enumerate(paths):
    pattern = patterns[i * 5 % len(patterns)] if patterns else "/v1/{rest*}"
    add("route", f"{path}\0{pattern}\0\0POST")
add("route", "/v1/files/a/b\0/files/{rest*}\0/v1\0PUT")
# What the route target found: a bare `%` before an escape (fixed in path::normalize).
add("route", "/v1/a/%2%65/100%\0/a/{id}/{rest*}\0/v1\0GET")

# admin: resolve, approve, reject and rebind bodies, list and event queries.
for body in [
    '{"outcome":"failed","reason":"checked the dashboard"}',
    '{"outcome": "succeeded", "status": 200, "body": "", "empty_body": true}',
    '{"outcome": "succeeded", "status": 201, "headers": {"content-type": "application/json", "x-secret": "s"}, "body": "{\\"id\\":\\"re_1\\"}", "reason": "seen in the dashboard"}',
    '{"reason": "rotated the API key"}',
    "  ",
    "state=unknown&provider=stripe&limit=10&cursor=00000000000000016f702d31",
    "provider=stripe&route=create_refund&state=in_flight",
]:
    add("admin", body)

# kept: 0, then a request as `KeptRequest::encode` writes it.
def kept(method, pq, ct, body):
    out = bytes([1]) + struct.pack(">I", len(method)) + method + struct.pack(">I", len(pq)) + pq
    out += bytes([ct is not None]) + struct.pack(">I", len(ct or b"")) + (ct or b"") + body
    return b"\0" + out
add("kept", kept(b"POST", b"/v1/refunds?expand=charge", b"application/x-www-form-urlencoded", bodies[4]))
add("kept", kept(b"PUT", b"/v1/x", None, b""))
# What the kept target found: a content-type flag other than 0 or 1 (now refused).
add("kept", kept(b"PUT", b"/v1/", None, b"")[:-5] + b"x" + bytes(5))
add("kept", kept(b"POST", b"/v1/payments", b"application/json", bodies[0]))

# record: 0, then a stored operation, event or response; 1, then a list cursor.
op = {"v": 2, "id": "op-1", "provider": "stripe", "route": "create_refund", "effect": "irreversible",
      "state": "succeeded", "fingerprint": "ab12", "fields": {"body./amount": "0123456789abcdef"},
      "idempotency_key": "idem_1", "key_at": "header:idempotency-key", "attempts": 1,
      "created_at": 1700000000000, "updated_at": 1700000001000, "first_dispatched_at": 1700000000500,
      "last_dispatched_at": 1700000000500, "maybe_effect_at": None, "provider_request_id": "req_1",
      "response": {"status": 200, "body_bytes": 12, "body_sha256": "00"}, "error": None, "fence": 3,
      "approval": "not_required", "principal": "p1", "keyed": True}
add("record", b"\0" + json.dumps(op, separators=(",", ":")).encode())
legacy = {k: v for k, v in op.items() if k not in ("v", "key_at", "maybe_effect_at", "keyed", "principal")}
add("record", b"\0" + json.dumps(legacy).encode())
add("record", b"\0" + json.dumps({"at": 1, "kind": "claimed", "attempt": 1, "detail": "x"}).encode())
response = bytes([1]) + struct.pack(">HI", 200, 1) + struct.pack(">I", 12) + b"content-type"
response += struct.pack(">I", 16) + b"application/json" + b'{"id":"re_1"}'
add("record", b"\0" + response)
add("record", b"\1" + (struct.pack(">q", 1700000000000) + b"op-1").hex().encode())

# body: frames built by `arbitrary`; a few fixed byte strings to start from.
for i in range(4):
    add("body", hashlib.sha256(bytes([i])).digest() * (i + 1))

for target, items in seeds.items():
    folder = CORPUS / target
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("seed-*"):
        old.unlink()
    for data in items:
        (folder / f"seed-{hashlib.sha1(data).hexdigest()[:12]}").write_bytes(data)
    print(f"{target}: {len(items)} seeds")
