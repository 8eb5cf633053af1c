"""The client tells the service's failures from the program's: connection refused, HTTP 5xx and the service's own
timeouts are retried within the retry budget and then come back SandboxError; a program that raises or runs past
its own limit is an answer (Failed / TimeLimitExceeded), returned at once."""

from __future__ import annotations

import time

import httpx
import pytest
from conftest import fresh_uid_base

from sandbox.client import SandboxClient, make_runner
from sandbox.client.retry import RetryPolicy
from sandbox.deploy.local_server import start_server


def mocked(handler, **kwargs) -> tuple[SandboxClient, list[str]]:
    """A client whose requests go to `handler`; returns it and the list of URLs it was asked for."""
    seen: list[str] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return handler(request)

    client = SandboxClient(["http://a:1", "http://b:2"], **kwargs)
    client._http = httpx.Client(transport=httpx.MockTransport(record))
    return client, seen


def refused(request):
    raise httpx.ConnectError("[Errno 111] Connection refused", request=request)


def server_error(request):
    return httpx.Response(503, text="overloaded")


def service_timeout(request):
    raise httpx.ReadTimeout("timed out", request=request)


@pytest.mark.parametrize("handler", [refused, server_error, service_timeout], ids=lambda h: h.__name__)
def test_infrastructure_errors_are_retried_within_the_budget_then_sandbox_error(handler):
    client, seen = mocked(handler, retry=RetryPolicy(base_s=0.02, max_s=0.1, budget_s=0.6))
    start = time.monotonic()
    result = client.run("print(1)")
    elapsed = time.monotonic() - start
    assert result.status == "SandboxError" and "unreachable after retries" in result.stderr
    assert "tries in" in result.stderr  # says how long it kept trying
    assert len(seen) > 5 and elapsed < 1.0  # more than the default 5 tries, and bounded by the budget
    assert {u.split("/run_code")[0] for u in seen} == {"http://a:1", "http://b:2"}  # across both URLs
    client.close()


def test_a_zero_budget_is_one_try():
    client, seen = mocked(refused, retry=RetryPolicy(budget_s=0.0))
    assert client.run("print(1)").status == "SandboxError" and len(seen) == 1
    client.close()


def test_make_runner_passes_the_retry_budget():
    runner = make_runner("http://127.0.0.1:1", retry_s=2.5)
    assert runner.retry.budget_s == 2.5
    runner.close()
    assert make_runner("http://127.0.0.1:1").retry.budget_s is None  # the default 5 tries


def test_the_program_s_own_errors_are_answers_returned_at_once():
    with start_server(workers=1, max_sessions=0, uid_base=fresh_uid_base(), preload_heavy="") as srv:
        client = SandboxClient(srv.url, retry=RetryPolicy(budget_s=30.0))
        before = client._http.get(f"{srv.url}/v1/info").json()["runs"]
        start = time.monotonic()
        raised = client.run("raise ValueError('policy bug')")
        assert raised.status == "Failed" and "ValueError: policy bug" in raised.stderr
        slow = client.run("import time; time.sleep(5)", timeout_s=0.3)
        assert slow.status == "TimeLimitExceeded"
        assert time.monotonic() - start < 10.0  # no retry: the budget would allow 30 s
        assert client._http.get(f"{srv.url}/v1/info").json()["runs"] == before + 2
        client.close()
