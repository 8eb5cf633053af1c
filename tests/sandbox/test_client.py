"""HTTP client against real servers: round-robin, dead endpoints, 429 retries, async twin, sessions."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import fresh_uid_base

from sandbox.client import AsyncSandboxClient, SandboxClient, make_runner
from sandbox.client.retry import RetryPolicy, parse_urls
from sandbox.deploy.local_server import start_server
from sandbox.execution.in_process import LocalExecutor

FAST_RETRY = RetryPolicy(attempts=10, base_s=0.02, max_s=0.3)


def runs_of(client: SandboxClient, url: str) -> int:
    return client._http.get(f"{url}/v1/info").json()["runs"]


@pytest.fixture(scope="module")
def two_servers():
    with start_server(workers=1, max_sessions=2, uid_base=fresh_uid_base(), preload_heavy="") as a, \
            start_server(workers=1, max_sessions=2, uid_base=fresh_uid_base(), preload_heavy="") as b:
        yield a.url, b.url


def test_make_runner_picks_the_path():
    assert isinstance(make_runner(None), LocalExecutor) and isinstance(make_runner(""), LocalExecutor)
    runner = make_runner("http://127.0.0.1:1, http://127.0.0.1:2/")
    assert isinstance(runner, SandboxClient) and runner.endpoints.urls == ["http://127.0.0.1:1", "http://127.0.0.1:2"]
    runner.close()
    for bad in ("127.0.0.1:8080", "http://h:8080/run_code", " , "):
        with pytest.raises(ValueError, match="sandbox url|no sandbox url"):
            parse_urls(bad)


def test_round_robin_spreads_runs_evenly(two_servers):
    client = SandboxClient(list(two_servers))
    before = [runs_of(client, u) for u in two_servers]
    results = [client.run(f"print({i})") for i in range(10)]
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(10)]
    assert [runs_of(client, u) - b for u, b in zip(two_servers, before, strict=True)] == [5, 5]
    client.close()


def test_dead_endpoint_is_skipped(two_servers):
    client = SandboxClient(["http://127.0.0.1:1", two_servers[0]], retry=FAST_RETRY)
    assert all(client.run("print('ok')").stdout == "ok\n" for _ in range(6))
    client.close()


def test_failed_results_are_answers_not_retried(two_servers):
    client = SandboxClient(two_servers[0])
    before = runs_of(client, two_servers[0])
    r = client.run("import sys; sys.exit(2)")
    assert (r.status, r.return_code) == ("Failed", 2) and runs_of(client, two_servers[0]) == before + 1
    assert client.run("import time; time.sleep(5)", timeout_s=0.3).status == "TimeLimitExceeded"
    client.close()


def test_unreachable_sandbox_gives_sandbox_error_without_raising():
    client = SandboxClient("http://127.0.0.1:1", retry=RetryPolicy(attempts=2, base_s=0.01))
    r = client.run("print(1)")
    assert r.status == "SandboxError" and "unreachable after retries" in r.stderr
    assert client.session().run("x = 1").session_lost is True
    client.close()


def test_429_is_retried_until_success():
    with start_server(workers=1, max_queue=0, retry_after_s=0, max_sessions=0, uid_base=fresh_uid_base(),
                      preload_heavy="") as srv:
        # a time budget, not a try count: on a loaded machine twelve 50 ms runs one at a time can outlast ten
        # quick retries, and the claim is that 429 is retried until the server has room
        client = SandboxClient(srv.url, retry=RetryPolicy(base_s=0.02, max_s=0.3, budget_s=60.0))
        with ThreadPoolExecutor(6) as pool:
            results = list(pool.map(lambda i: client.run(f"import time; time.sleep(0.05); print({i})"), range(12)))
        assert [r.stdout for r in results] == [f"{i}\n" for i in range(12)]
        rejected = [line for line in client._http.get(f"{srv.url}/metrics").text.splitlines()
                    if line.startswith("sandbox_rejected_total")]
        assert float(rejected[0].split()[1]) > 0  # the server did push back; the client absorbed it
        client.close()


def test_sessions_keep_state_and_report_loss(two_servers):
    client = SandboxClient(list(two_servers))
    with client.session() as sess:
        assert sess.run("x = 20").ok
        assert sess.run("x += 1\nprint(x * 2)").stdout == "42\n"
        lost = sess.run("while True: pass", timeout_s=0.3)
        assert lost.status == "TimeLimitExceeded" and lost.session_lost
        again = sess.run("print(x)")
        assert again.status == "SandboxError" and again.session_lost
    client.close()


def test_async_client_runs_concurrently_and_has_sessions(two_servers):
    async def scenario():
        client = AsyncSandboxClient(list(two_servers))
        results = await asyncio.gather(*[client.run(f"print({i} ** 2)") for i in range(30)])
        assert [r.stdout for r in results] == [f"{i ** 2}\n" for i in range(30)]
        async with await client.session() as sess:
            await sess.run("y = [1, 2]")
            assert (await sess.run("y.append(3); print(sum(y))")).stdout == "6\n"
        await client.aclose()

    asyncio.run(scenario())


def test_local_sessions_behave_like_http_sessions():
    with LocalExecutor().session() as sess:
        assert sess.run("import math\nz = math.factorial(5)").ok
        assert sess.run("print(z)").stdout == "120\n"
        assert sess.run("import os\nos._exit(0)").session_lost
        assert sess.run("print(z)").session_lost
