"""The service object behind the HTTP routes: backend (process pool or docker), sessions, gate, metrics.

A run is driven on the event loop itself when its slot's zygote is ready (`Pool.run_async`); whatever would block
(starting a zygote, the docker backend, sessions) runs in a thread pool sized to the gate's capacity.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor

from sandbox.execution.pool import Pool, RunRequest
from sandbox.execution.sessions import SessionManager
from sandbox.service.admission import Gate
from sandbox.service.metrics import Metrics
from sandbox.settings import Settings
from sandbox.types import ExecutionResult

log = logging.getLogger("sandbox")
VERSION = "0.1.0"


class SandboxService:
    def __init__(self, settings: Settings, metrics: Metrics):
        self.settings = settings
        self.metrics = metrics
        self.sessions: SessionManager | None = None
        if settings.backend == "docker":
            from sandbox.execution.docker_backend import DockerBackend

            self.backend = DockerBackend(settings)
        else:
            self.backend = Pool(settings)
            if settings.max_sessions:
                uid_start = settings.uid_base + settings.worker_count if self.backend.uses_uid else None
                self.sessions = SessionManager(settings, uid_start=uid_start)
        workers = settings.worker_count
        self.gate = Gate(workers, settings.max_queue, settings.queue_timeout_s, settings.retry_after_s)
        self.threads = ThreadPoolExecutor(max_workers=workers + 4, thread_name_prefix="sandbox-run")
        metrics.gauge("sandbox_queue_depth", "requests waiting for a worker", lambda: self.gate.waiting)
        metrics.gauge("sandbox_in_flight", "executions running", lambda: self.gate.in_flight)
        metrics.gauge("sandbox_rejected_total", "requests refused for overload", lambda: self.gate.rejected)
        metrics.gauge("sandbox_workers", "execution slots", lambda: workers)
        metrics.gauge("sandbox_sessions_active", "open sessions", lambda: len(self.sessions or ()))
        metrics.gauge("sandbox_worker_respawns_total", "zygotes replaced", lambda: getattr(self.backend, "respawns", 0))

    async def run(self, req: RunRequest) -> tuple[ExecutionResult, float]:
        """Admit (may raise Overloaded), run in a thread; returns (result, seconds spent queueing)."""
        queued = time.monotonic()
        async with self.gate:
            waited = time.monotonic() - queued
            # shielded: a request cancelled mid-run (client gone) must still let its run finish and free its slot
            result = await asyncio.shield(self.backend.run_async(req, self.threads))
        self.metrics.observe_execution(result.status, result.killed_reason)
        return result, waited

    async def session_create(self):
        # The default executor, not self.threads: starting an interpreter must not delay queued runs.
        return await asyncio.to_thread(self.sessions.create)

    async def session_execute(self, session_id: str, code: str, timeout_s: float) -> ExecutionResult:
        async with self.gate:
            loop = asyncio.get_running_loop()
            result = await loop.run_in_executor(self.threads, self.sessions.execute, session_id, code, timeout_s)
        self.metrics.observe_execution(result.status, result.killed_reason)
        return result

    async def session_delete(self, session_id: str) -> bool:
        return await asyncio.to_thread(self.sessions.delete, session_id)

    def info(self) -> dict:
        backend = self.backend.info()
        return {"version": VERSION, "backend": self.settings.backend, "pid": os.getpid(), **backend,
                "queue_depth": self.gate.waiting, "in_flight": self.gate.in_flight,
                "max_queue": self.settings.max_queue,
                "sessions": self.sessions.info() if self.sessions is not None else {"active": 0, "max": 0}}

    def close(self) -> None:
        if self.sessions is not None:
            self.sessions.close()
        self.backend.close()
        self.threads.shutdown(wait=False, cancel_futures=True)
