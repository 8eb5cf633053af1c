"""Code runs without a server: the process-wide warm pool and session manager behind `make_runner(None)`, tests
and benches (`LocalExecutor`, the in-process CodeRunner; `execute`, one call).

The pool is the service's own (`sandbox.execution.pool.Pool`), with its isolation; unsafe mode is allowed here,
since whoever calls this in-process already runs code on the machine.
"""

from __future__ import annotations

import atexit
import os
import threading

from sandbox.execution.pool import Pool, RunRequest
from sandbox.execution.sessions import LocalSession, SessionManager
from sandbox.settings import RUN_TIMEOUT_S, SERVER_DEFAULT_MEMORY, Settings
from sandbox.types import ExecutionResult

DEFAULT_MAX_OUTPUT_BYTES = 64 * 1024  # LocalExecutor's default cap (the service uses Settings.max_output_bytes)

_shared: dict[int, Pool] = {}
_shared_lock = threading.Lock()


def shared_pool() -> Pool:
    """A process-wide pool for in-process use (tests, `make_runner(None)`); created on first use."""
    with _shared_lock:
        pool = _shared.get(os.getpid())  # a forked process must not reuse its parent's zygote sockets
        if pool is None:
            # Several processes may each hold an in-process pool (test workers, trainer ranks): unless a uid
            # range is configured, give each its own, derived from the pid.
            base = None if "SANDBOX_UID_BASE" in os.environ else 10000 + (os.getpid() % 400) * 100
            settings = Settings.from_env(workers=min(2, os.cpu_count() or 1), uid_base=base)
            pool = _shared[os.getpid()] = Pool(settings, allow_unsafe=True)
            atexit.register(pool.close)
        return pool


_shared_manager: dict[int, SessionManager] = {}
_shared_manager_lock = threading.Lock()


def shared_session_manager() -> SessionManager:
    """Process-wide manager for `LocalExecutor.session()`; uses the uids after the shared pool's slots."""
    pool = shared_pool()
    with _shared_manager_lock:
        manager = _shared_manager.get(os.getpid())
        if manager is None:
            s = pool.settings
            manager = SessionManager(s, uid_start=s.uid_base + s.worker_count if pool.uses_uid else None)
            _shared_manager[os.getpid()] = manager
            atexit.register(manager.close)
        return manager


def execute(code: str, *, timeout_s: float = RUN_TIMEOUT_S, memory_limit_mb: int = SERVER_DEFAULT_MEMORY, stdin: str = "",
            max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES) -> ExecutionResult:
    """Run `code` in the shared warm pool; never raises for untrusted-code problems."""
    return shared_pool().run(RunRequest(code, timeout_s, memory_limit_mb, stdin, max_output_bytes=max_output_bytes))


class LocalExecutor:
    """In-process CodeRunner over the shared pool (no server needed; the service path is `sandbox.client`)."""

    def __init__(self, max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES):
        self.max_output_bytes = max_output_bytes

    def run(self, code: str, *, timeout_s: float = RUN_TIMEOUT_S, memory_limit_mb: int = SERVER_DEFAULT_MEMORY,
            stdin: str = "") -> ExecutionResult:
        return execute(code, timeout_s=timeout_s, memory_limit_mb=memory_limit_mb, stdin=stdin,
                       max_output_bytes=self.max_output_bytes)

    def session(self):
        """A persistent interpreter (see `sandbox.client` for the session API); never raises."""
        return LocalSession(shared_session_manager())

    def close(self) -> None:
        """Nothing to release: the shared pool lives until interpreter exit."""
