"""The machinery every fake provider shares: a stdlib HTTP server on port 0 in a thread, a
route table, an effect log, and dedupe on the idempotency key.

A fake is shaped like its provider's API (paths, body encoding, error envelopes); the provider
modules say how. What they share:
- `effects`: every side effect the fake committed, so a test can assert exactly one;
- `requests`: every request that reached it (method, path, idempotency key);
- dedupe: the same key with the same parameters answers the first result again, with other
  parameters the provider's mismatch error, and while the first request with the key still
  runs, the provider's in-progress answer;
- `misbehave(*modes)`: what the next create requests do after committing their effect:
  "drop" closes the connection without answering (the answer is lost), "hold" keeps the
  request running (so it answers after the proxy's timeout) until another request with the
  same key has been given the in-progress answer; "late" answers after `late_by` seconds
  (past an SDK's own timeout, within the proxy's).
"""

import itertools
import json
import re
import socket
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HOLD_LIMIT = 20  # seconds a held request waits at most, so a failing test still ends


class Answer:
    def __init__(self, status, body, headers=None):
        self.status, self.body, self.headers = status, body, dict(headers or {})


class Request:
    def __init__(self, handler, captures):
        self.method = handler.command
        split = urllib.parse.urlsplit(handler.path)
        self.path = split.path
        self.query = dict(urllib.parse.parse_qsl(split.query))
        self.headers = handler.headers
        self.captures = captures
        length = int(handler.headers.get("content-length") or 0)
        self.raw = handler.rfile.read(length) if length else b""

    def json(self):
        return json.loads(self.raw or b"{}")

    def form(self):
        return dict(urllib.parse.parse_qsl(self.raw.decode()))


class Created:
    """What a create handler asks the base to do: unless the key was seen, call `make()`,
    which commits the effect and returns (effect, answer), and keep it under `key`, compared
    by `params`."""

    def __init__(self, key, params, make):
        self.key, self.params, self.make = key, params, make


class FakeProvider:
    """Subclasses set `routes`: (method, path pattern with {name} segments, handler name), and
    implement `replayed`, `mismatch` and `in_progress` in the provider's envelopes."""

    routes = []

    def __init__(self):
        self.lock = threading.Lock()
        self.effects, self.requests = [], []
        self.history = []  # per create: answered, dropped, held, in_progress, mismatch, replayed
        self.by_key = {}  # key -> (params, answer)
        self.running = {}  # key -> Event set once the in-progress answer was given
        self.modes = []
        self.late_by = 1.5
        self.counter = itertools.count(1)
        self._compiled = [
            (m, re.compile("^" + re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", p) + "$"), h)
            for m, p, h in self.routes
        ]
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                fake._handle(self)

            do_POST = do_GET

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.server.server_address[1]

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def next_id(self, prefix):
        return f"{prefix}{next(self.counter):06d}"  # itertools.count: safe across threads

    def misbehave(self, *modes):
        """The next len(modes) committed creates do these, in order ("drop", "hold", "late")."""
        with self.lock:
            self.modes.extend(modes)

    def reused(self, created, first_params, first_answer):
        """The answer to a key seen before whose first request has finished: the first answer
        again for the same parameters, else the provider's mismatch error."""
        if first_params != created.params:
            return "mismatch", self.mismatch(created)
        return "replayed", self.replayed(first_answer)

    def keys_seen(self):
        return [key for (_, _, key) in self.requests if key is not None]

    # -- the request path --------------------------------------------------------------

    def _handle(self, handler):
        for method, pattern, name in self._compiled:
            match = pattern.match(urlsplit_path(handler.path))
            if method == handler.command and match:
                request = Request(handler, match.groupdict())
                outcome = getattr(self, name)(request)
                break
        else:
            request = Request(handler, {})
            outcome = Answer(404, {"error": "no such route in the fake"})
        self.requests.append((request.method, request.path, self.key_of(request)))
        if isinstance(outcome, Created):
            self._create(handler, outcome)
        else:
            write(handler, outcome)

    def key_of(self, request):
        return request.headers.get("idempotency-key")

    def _create(self, handler, created):
        held = None
        with self.lock:
            seen = self.by_key.get(created.key)
            if seen is None:
                mode = self.modes.pop(0) if self.modes else "answer"
                kind = {"answer": "answered", "drop": "dropped", "hold": "held", "late": "late"}[mode]
                effect, answer = created.make()
                self.effects.append(effect)
                self.by_key[created.key] = (created.params, answer)
                if mode == "hold":
                    held = self.running[created.key] = threading.Event()
            elif created.key in self.running:
                kind, mode, answer = "in_progress", "answer", self.in_progress(created)
                # The first request finishes right after this answer: the next one replays.
                self.running.pop(created.key).set()
            else:
                mode = "answer"
                kind, answer = self.reused(created, *seen)
            self.history.append(kind)
        if mode == "drop":
            drop(handler)
        elif mode == "hold":
            held.wait(HOLD_LIMIT)
            write(handler, answer)
        elif mode == "late":
            time.sleep(self.late_by)  # the fake's behaviour under test, not a wait for a signal
            write(handler, answer)
        else:
            write(handler, answer)

def urlsplit_path(path):
    return urllib.parse.urlsplit(path).path


def write(handler, answer):
    body = b"" if answer.body is None else json.dumps(answer.body).encode()
    try:
        handler.send_response(answer.status)
        headers = {"content-type": "application/json", **answer.headers}
        for name, value in headers.items():
            handler.send_header(name, value)
        handler.send_header("content-length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)
        handler.wfile.flush()
    except OSError:
        handler.close_connection = True  # the proxy gave up on this exchange


def drop(handler):
    """Closes the connection without a byte of answer: the effect is made, the answer lost."""
    handler.close_connection = True
    try:
        handler.connection.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
