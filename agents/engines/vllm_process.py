"""vLLM's engine-core processes, watched from the trainer's side: death detection and bounded shutdown.

Why: `vllm.LLM` runs its scheduler and model in an "EngineCore" child process (workers below it). When that
process is killed (OOM killer, SIGKILL, a crash), vLLM 0.32's own monitor thread marks the client dead but leaves
every call already waiting where it is: `LLMEngine.step()` blocks on an output queue nobody will fill and
`collective_rpc` on a future nobody will resolve, so a run hung silently and its cleanup waited on it forever.
`EngineCoreWatch` waits on the processes' sentinels in a daemon thread and, when one exits unexpectedly, reports
an `EngineDied` naming the process and its exit code / signal; the engine then fails everything waiting (see
`VLLMEngine._on_death`). `kill_leftovers` ends whatever of the process tree is still running after a deadline.

Reads two vLLM internals (0.32): `llm.llm_engine.engine_core.resources.engine_manager.processes` (the
`multiprocessing` handles of the engine cores) and, in `unblock_client`, the sync client's `outputs_queue` and
`utility_results`. Without them (an in-process engine core, another vLLM layout) the watch does nothing.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable
from multiprocessing import connection
from typing import Any

from agents.engines.base import EngineDied


def describe_exit(name: str, pid: int | None, exitcode: int | None) -> str:
    """One line: which process ended and how (multiprocessing reports a signal as a negative exit code)."""
    if exitcode is not None and exitcode < 0:
        try:
            how = f"signal {-exitcode} ({signal.Signals(-exitcode).name})"
        except ValueError:
            how = f"signal {-exitcode}"
    else:
        how = f"exit code {exitcode}"
    return f"{name} (pid {pid}) died with {how}; the run cannot continue (its log above may say why)"


def engine_core_processes(llm: Any) -> list[Any]:
    """The `multiprocessing.Process` handles of `llm`'s engine cores ([] for an in-process engine core)."""
    resources = getattr(llm.llm_engine.engine_core, "resources", None)
    return list(getattr(getattr(resources, "engine_manager", None), "processes", None) or [])


def unblock_client(llm: Any, err: BaseException) -> None:
    """Make vLLM's calls that wait on a dead engine core raise `err`: the step's output queue and pending utility
    calls (`collective_rpc`, `sleep`, ...) get it."""
    client = llm.llm_engine.engine_core
    outputs = getattr(client, "outputs_queue", None)
    if outputs is not None:
        outputs.put_nowait(err)  # LLMEngine.step() -> get_output() raises an Exception it finds there
    for future in list(getattr(client, "utility_results", {}).values()):
        with contextlib.suppress(Exception):  # already resolved meanwhile
            future.set_exception(err)


class EngineCoreWatch:
    """Calls `on_death(EngineDied)` once when an engine-core process exits while the watch is running."""

    def __init__(self, llm: Any, on_death: Callable[[EngineDied], None]):
        self.processes = engine_core_processes(llm)
        self._descendants = _descendants([p.pid for p in self.processes])  # workers, to end if orphaned
        self._on_death = on_death
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        if self.processes:
            self._thread = threading.Thread(target=self._watch, name="vllm-engine-watch", daemon=True)
            self._thread.start()

    def _watch(self) -> None:
        sentinels = {p.sentinel: p for p in self.processes}
        while not self._stopped.is_set():
            ended = connection.wait(list(sentinels), timeout=0.5)
            if ended and not self._stopped.is_set():
                proc = sentinels[ended[0]]
                self._on_death(EngineDied(describe_exit("vLLM engine core", proc.pid, _exit_status(proc))))
                return

    def stop(self) -> None:
        """From here on, a process exit is expected (the engine is closing)."""
        self._stopped.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)

    def kill_leftovers(self, grace_s: float) -> list[int]:
        """End what still runs of the engine cores and their workers `grace_s` seconds from now: SIGTERM first (a
        vLLM worker then releases its shared memory), SIGKILL a second later. Returns the pids it signalled."""
        import psutil

        deadline = time.monotonic() + grace_s
        for proc in self.processes:
            proc.join(timeout=max(0.0, deadline - time.monotonic()))
        tree = [p for p in [*map(_handle, self.processes), *self._descendants] if p is not None and _running(p)]
        _, alive = psutil.wait_procs(tree, timeout=max(0.0, deadline - time.monotonic()))
        signalled = [p.pid for p in alive]
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for p in alive:
                with contextlib.suppress(psutil.Error):
                    p.send_signal(sig)
            _, alive = psutil.wait_procs(alive, timeout=1.0)
        for proc in self.processes:
            proc.join(timeout=1.0)  # reap the engine cores (our children)
        return signalled


def _exit_status(proc: Any, wait_s: float = 3.0) -> int | None:
    """The exit code of an ended process. Its sentinel closes a moment before it can be reaped, and another thread
    (vLLM's own monitor) may reap it first and record the status a moment later: poll until it is known."""
    proc.join(timeout=1.0)
    deadline = time.monotonic() + wait_s
    while proc.exitcode is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return proc.exitcode


def _descendants(pids: list[int]) -> list[Any]:
    try:
        import psutil
    except ImportError:  # psutil comes with vLLM; without it orphaned workers are left to vLLM's own shutdown
        return []
    found = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            found.extend(psutil.Process(pid).children(recursive=True))
    return found


def _handle(proc: Any) -> Any:
    """A psutil handle of a multiprocessing process (None once it is gone)."""
    import psutil

    try:
        return psutil.Process(proc.pid) if proc.pid is not None else None
    except psutil.Error:
        return None


def _running(p: Any) -> bool:
    import psutil

    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
