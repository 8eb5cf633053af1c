"""The server's run path on its event loop (`Pool.run_async`): no thread while a slot is free and its zygote ready,
the thread path where that would block, and a cancelled request that still lets its run finish."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import fresh_uid_base

from sandbox.execution import supervision
from sandbox.execution.pool import Pool, RunRequest
from sandbox.service.metrics import Metrics
from sandbox.service.sandbox_service import SandboxService
from sandbox.settings import Settings


class CountingThreads(ThreadPoolExecutor):
    """A real thread pool that counts what is handed to it."""

    def __init__(self):
        super().__init__(max_workers=4)
        self.handed = 0

    def submit(self, fn, /, *args, **kwargs):
        self.handed += 1
        return super().submit(fn, *args, **kwargs)


def _pool(**settings) -> Pool:
    base = {"workers": 1, "uid_base": fresh_uid_base(), "preload": "math", "preload_heavy": "", "max_sessions": 0}
    return Pool(Settings(**{**base, **settings}), allow_unsafe=True)


def test_a_free_slot_runs_on_the_loop_and_a_busy_one_in_a_thread():
    pool, threads = _pool(), CountingThreads()

    async def main():
        alone = await pool.run_async(RunRequest("print(6 * 7)"), threads)
        assert (alone.status, alone.stdout) == ("Success", "42\n")
        assert threads.handed == 0  # driven by the loop itself
        # one slot, three requests at once: the first on the loop, the others wait for the slot in threads
        together = await asyncio.gather(*(pool.run_async(RunRequest(f"import time\ntime.sleep(0.2)\nprint({i})"),
                                                         threads) for i in range(3)))
        assert [r.stdout for r in together] == ["0\n", "1\n", "2\n"]
        assert threads.handed == 2

    try:
        before = pool.runs  # the start-up probe
        asyncio.run(main())
        assert pool._free.qsize() == 1 and pool.runs == before + 4
    finally:
        pool.close()
        threads.shutdown()


def test_output_caps_stdin_and_timeouts_hold_on_the_loop_path():
    pool, threads = _pool(), CountingThreads()

    async def main():
        echoed = await pool.run_async(RunRequest("print(input()[::-1])", stdin="abc\n"), threads)
        capped = await pool.run_async(RunRequest("print('x' * 5000)", max_output_bytes=100), threads)
        slow = await pool.run_async(RunRequest("while True: pass", timeout_s=0.5), threads)
        return echoed, capped, slow

    try:
        echoed, capped, slow = asyncio.run(main())
        assert echoed.stdout == "cba\n"
        assert len(capped.stdout) == 100 and capped.stdout_truncated
        assert (slow.status, slow.killed_reason) == ("TimeLimitExceeded", "timeout")
        assert threads.handed == 0
    finally:
        pool.close()
        threads.shutdown()


def test_code_for_a_heavy_zygote_still_starting_goes_to_a_thread():
    pool, threads = _pool(preload_heavy="fractions", heavy_triggers="fractions"), CountingThreads()
    routed = "import sys\nprint('fractions' in sys.modules)  # fractions"

    async def main():
        async def ready_later():
            await asyncio.sleep(0.3)
            slot.heavy_done.set()

        result, _ = await asyncio.gather(pool.run_async(RunRequest(routed), threads), ready_later())
        return result

    try:
        while pool.info()["warming"]:
            time.sleep(0.05)
        slot = pool._slots[0]
        slot.heavy_done.clear()  # as while its interpreter still imports in the background
        result = asyncio.run(main())
        assert result.stdout == "True\n"  # ran in the heavy zygote, once it was ready, from a thread
        assert threads.handed == 1
    finally:
        pool.close()
        threads.shutdown()


def test_a_cancelled_request_lets_its_run_finish_and_frees_the_slot():
    settings = Settings(workers=1, uid_base=fresh_uid_base(), preload="math", preload_heavy="", max_sessions=0,
                        allow_unsafe=True)

    async def main(service: SandboxService):
        slow = asyncio.create_task(service.run(RunRequest("import time\ntime.sleep(0.5)\nprint('slow')")))
        await asyncio.sleep(0.2)
        slow.cancel()  # the client went away mid-run
        with pytest.raises(asyncio.CancelledError):
            await slow
        result, _ = await service.run(RunRequest("print('next')"))
        return result

    service = SandboxService(settings, Metrics())
    try:
        before = service.backend.runs  # the start-up probe
        result = asyncio.run(main(service))
        assert result.stdout == "next\n"  # its own output, not the cancelled run's report
        assert service.backend.runs == before + 2  # the cancelled run went on to its end before the slot served another
        assert service.backend._free.qsize() == 1
    finally:
        service.close()


@pytest.mark.parametrize("driver", ["thread", "loop"])
def test_a_zygote_that_stops_answering_fails_its_run_and_is_replaced(driver, monkeypatch):
    monkeypatch.setattr(supervision, "GRACE_S", 0.5)  # how long past the run's timeout the server waits for a report
    pool, threads = _pool(), CountingThreads()
    try:
        hung = pool._slots[0].light
        os.killpg(hung.pid, signal.SIGSTOP)  # the zygote (and its PID namespace's shim) freeze, mid-nothing
        request = RunRequest("print('never')", timeout_s=0.5)
        result = pool.run(request) if driver == "thread" else asyncio.run(pool.run_async(request, threads))
        assert result.status == "SandboxError" and "stopped answering" in result.stderr
        assert not hung.alive
        assert pool.run(RunRequest("print('again')")).stdout == "again\n"  # a fresh zygote took the slot
        assert pool.respawns == 1
    finally:
        pool.close()
        threads.shutdown()
