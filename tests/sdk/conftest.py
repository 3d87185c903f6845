"""Fixtures of the SDK tests: a fake provider and the real proxy in front of it.

`guard(name, fake, **provider_keys)` starts idemproxy with the shipped policies/{name}.toml,
its `upstream` pointed at the fake (or, with `intercept=True`, a proxy with `[intercept]` and a
CA of `idemproxy ca init`) (plus any [provider] keys a test replaces, such as a short
`timeout`); both are stopped when the test ends, and a failing test prints the proxy's log.
"""

import socket

import pytest

from harness import Proxy, shipped_policy


@pytest.fixture
def guard(request):
    started = []

    def start(name, upstream, extra_env=None, intercept=False, **provider_keys):
        url = upstream if isinstance(upstream, str) else upstream.url
        proxy = Proxy(name, shipped_policy(name, url, **provider_keys), extra_env, intercept)
        started.append(proxy)
        return proxy

    yield start
    failed = getattr(request.node, "failed_call", False)
    for proxy in started:
        if failed:
            print(f"--- idemproxy log ({proxy.addr}) ---\n{proxy.log()}")
        proxy.stop()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when == "call" and report.failed:
        item.failed_call = True
    return report


@pytest.fixture
def closed_port_url():
    """A URL where nothing listens: connecting is refused, so nothing is ever sent."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"
