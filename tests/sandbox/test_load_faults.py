"""Load and faults against real servers: 2,000 requests at concurrency 64, and SIGKILLed workers.

Counts are bounded and everything runs on loopback; the tests stop by themselves. No speed assertions
(see bench/sandbox_throughput.py for figures).
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections import Counter

import httpx
import pytest
from conftest import Server, fresh_uid_base

from sandbox.deploy.local_server import start_server

REQUESTS = 2000
CONCURRENCY = 64


async def _flood(url: str, n: int, concurrency: int) -> list[tuple[int, int, object]]:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=120) as http:
        gate = asyncio.Semaphore(concurrency)

        async def one(i: int):
            async with gate:
                resp = await http.post("/run_code", json={"code": f"print({i} * 3)", "language": "python"})
                return i, resp.status_code, resp.json() if resp.status_code == 200 else dict(resp.headers)

        return await asyncio.gather(*[one(i) for i in range(n)])


@pytest.mark.slow  # ~15 s on 2 shared cores: 2,000 real executions
def test_flood_of_2000_requests_loses_nothing_and_never_5xx():
    base = fresh_uid_base()
    with start_server(workers=2, max_queue=24, queue_timeout_s=10, max_sessions=0, uid_base=base) as handle:
        asyncio.run(_flood(handle.url, 200, 16))  # warm-up: allocator pools, connection buffers
        rss_before = _rss_mb(handle.proc.pid)
        results = asyncio.run(_flood(handle.url, REQUESTS, CONCURRENCY))
        rss_growth = _rss_mb(handle.proc.pid) - rss_before
        server = Server(handle, base, 2)
        server.assert_contained()
        metrics = server.http.get("/metrics").text
    assert sorted(i for i, _, _ in results) == list(range(REQUESTS))  # every request answered exactly once
    codes = Counter(code for _, code, _ in results)
    assert set(codes) <= {200, 429}, codes
    assert codes[200] >= CONCURRENCY  # the server did real work under load, not just refusals
    for i, code, body in results:
        if code == 200:
            assert body["status"] == "Success" and body["run_result"]["stdout"] == f"{i * 3}\n", body
        else:
            assert "retry-after" in body
    assert f'sandbox_requests_total{{route="/run_code",code="200"}} {codes[200] + 200}' in metrics
    assert rss_growth < 64, f"server RSS grew by {rss_growth:.0f} MiB over {REQUESTS} requests"


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


def _in_flight(server: Server, n: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while server.info()["in_flight"] < n:
        assert time.monotonic() < deadline, "runs never started"
        time.sleep(0.02)


def test_sigkilled_zygotes_fail_their_runs_and_are_replaced_under_load():
    base = fresh_uid_base()
    with start_server(workers=2, max_queue=256, max_sessions=0, uid_base=base, preload_heavy="") as handle:
        server = Server(handle, base, 2)
        long_runs: list[dict] = []
        threads = [threading.Thread(target=lambda: long_runs.append(
            server.run("import time\ntime.sleep(30)\nprint('finished')", run_timeout=40))) for _ in range(2)]
        for t in threads:
            t.start()
        _in_flight(server, 2)
        flood_results: list = []
        flood = threading.Thread(target=lambda: flood_results.extend(asyncio.run(_flood(handle.url, 300, 16))))
        flood.start()  # queued behind the two long runs while the workers die
        victims = server.info()["zygote_pids"]
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        for t in threads:
            t.join(timeout=60)
        flood.join(timeout=120)
        assert [r["status"] for r in long_runs] == ["SandboxError", "SandboxError"]
        assert all("worker" in r["message"] for r in long_runs)
        codes = Counter(code for _, code, _ in flood_results)
        assert len(flood_results) == 300 and set(codes) <= {200, 429}, codes
        statuses = Counter(body["status"] for _, code, body in flood_results if code == 200)
        assert statuses["Success"] > 0 and set(statuses) <= {"Success", "SandboxError"}
        info = server.info()
        assert info["respawns"] >= 2 and not set(info["zygote_pids"]) & set(victims)
        for i in range(20):  # after the replacement every request succeeds
            assert server.run(f"print({i})")["run_result"]["stdout"] == f"{i}\n"
        server.assert_contained()
