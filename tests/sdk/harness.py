"""The real idemproxy binary, started per test with a temp ledger and a shipped policy.

The policy is the file from the repository's policies/ folder with only `upstream` (and, where
a test says so, `timeout` or `pending_status`) replaced, so what is proven is what ships. The
proxy is ready when it prints its ready line; everything listens on port 0.
"""

import json
import os
import re
import subprocess
import tempfile
import threading
import urllib.parse
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
READY = re.compile(r"^idemproxy ready proxy=(\S+) admin=(\S+)")
START_TIMEOUT = 20
# The admin API is reached directly, whatever HTTP_PROXY a test sets for an SDK.
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def binary():
    path = os.environ.get("IDEMPROXY_BIN")
    if not path:
        raise RuntimeError("IDEMPROXY_BIN is not set: run these tests through `cargo test --test sdk`")
    return path


def shipped_policy(name, upstream, **provider_keys):
    """The text of policies/{name}.toml with `upstream` and any `provider_keys` replaced in its
    [provider] table (added at its end when the file does not set them)."""
    text = (REPO / "policies" / f"{name}.toml").read_text()
    return set_provider_keys(text, {"upstream": upstream, **provider_keys})


def set_provider_keys(text, keys):
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "[provider]")
    end = next(
        (i for i in range(start + 1, len(lines)) if lines[i].lstrip().startswith("[")),
        len(lines),
    )
    missing = dict(keys)
    for i in range(start + 1, end):
        key = lines[i].split("=", 1)[0].strip()
        if key in missing:
            lines[i] = f"{key} = {toml_value(missing.pop(key))}"
    insert_at = end
    while insert_at > start + 1 and not lines[insert_at - 1].strip():
        insert_at -= 1
    for key, value in missing.items():
        lines.insert(insert_at, f"{key} = {toml_value(value)}")
        insert_at += 1
    return "\n".join(lines) + "\n"


def toml_value(value):
    return str(value) if isinstance(value, int) else json.dumps(value)


class Proxy:
    """A running `idemproxy serve`; `stop()` (or the fixture) kills it and removes its dir."""

    def __init__(self, policy_name, policy_text, extra_env=None, intercept=False):
        self.dir = tempfile.TemporaryDirectory(prefix="idemproxy-sdk-")
        root = Path(self.dir.name)
        (root / "policies").mkdir()
        (root / "policies" / f"{policy_name}.toml").write_text(policy_text)
        (root / "proxy.toml").write_text(
            'listen = "127.0.0.1:0"\nadmin_listen = "127.0.0.1:0"\n'
            'ledger = "ledger.redb"\npolicies = "policies"\n'
        )
        if intercept:
            # HTTPS for HTTPS_PROXY clients: a new CA by `idemproxy ca init`, as a user makes it.
            subprocess.run(
                [binary(), "ca", "init", "-c", str(root / "proxy.toml")],
                check=True,
                capture_output=True,
            )
            with open(root / "proxy.toml", "a") as config:
                config.write('\n[intercept]\nca_cert = "ca/ca.pem"\nca_key = "ca/ca.key"\n')
            self.ca_pem = str(root / "ca" / "ca.pem")
        self.log_path = root / "proxy.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("IDEMPROXY_")}
        env["IDEMPROXY_LOG"] = "info"
        env.update(extra_env or {})  # e.g. IDEMPROXY_FAIL, a fault injection
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [binary(), "serve", "-c", str(root / "proxy.toml")],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
                env=env,
            )
        self.addr, self.admin = self._wait_ready()

    def _wait_ready(self):
        found, ready = {}, threading.Event()

        def read():
            # Reads stdout to its end, so the proxy never blocks on a full pipe.
            for raw in self.process.stdout:
                match = READY.match(raw.decode("utf-8", "replace"))
                if match and not ready.is_set():
                    found["addrs"] = match.groups()
                    ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(START_TIMEOUT) or "addrs" not in found:
            log = self.log()
            self.stop()
            raise RuntimeError(f"idemproxy did not print its ready line; stderr:\n{log}")
        return found["addrs"]

    def url(self, path=""):
        return f"http://{self.addr}{path}"

    def log(self):
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self):
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.dir.cleanup()

    def admin_get(self, path):
        with DIRECT.open(f"http://{self.admin}{path}", timeout=10) as resp:
            return resp.read().decode()

    def operation(self, operation_id):
        """The operation as the admin API shows it (`GET /ops/{id}`)."""
        quoted = urllib.parse.quote(operation_id, safe="")
        return json.loads(self.admin_get(f"/ops/{quoted}"))

    def only_operation(self):
        """The one operation the test made (`GET /ops`), so a test need not know the template."""
        ops = json.loads(self.admin_get("/ops"))["ops"]
        assert len(ops) == 1, ops
        return ops[0]

    def requests(self, outcome=None, route=None):
        """Agent requests the proxy counted (`idemproxy_requests_total`), summed over the
        series that match the given labels."""
        total = 0
        for line in self.admin_get("/metrics").splitlines():
            if not line.startswith("idemproxy_requests_total{"):
                continue
            labels, value = line[len("idemproxy_requests_total{") :].rsplit("} ", 1)
            labels = dict(re.findall(r'(\w+)="([^"]*)"', labels))
            if outcome is not None and labels.get("outcome") != outcome:
                continue
            if route is not None and labels.get("route") != route:
                continue
            total += int(float(value))
        return total
