"""The stop guard of the long-running commands (train, sft, demo, eval, experiment): SIGTERM and Ctrl-C close the
run's engine, sandbox and logs within a bounded time, then exit with 128 + N."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

from trainer.config.errors import ConfigError

STOP_TIMEOUT_S = 30.0
"""Seconds the run's cleanup may take after SIGTERM or SIGINT (ALPRL_STOP_TIMEOUT_S overrides): closing vLLM and
the sandbox takes a few seconds; one that waits on a dead or stuck engine core would wait forever."""


class StopGuard:
    """SIGTERM and SIGINT end the run within a bounded time.

    `kill`, `timeout` and schedulers send SIGTERM, which by default ends Python without running `finally` or atexit:
    the vLLM engine-core and worker processes were left running (holding a GPU's memory). So the first signal
    raises (SystemExit(128 + N) for SIGTERM, KeyboardInterrupt for SIGINT) and the run's cleanup closes the engine,
    the sandbox pool and the logs. That cleanup can itself hang (waiting on an engine core that no longer answers),
    so the first signal also arms a deadline; when it passes, or on a second signal, the child processes are killed
    and the process exits at once with 128 + N (os._exit: no further cleanup, which is what hangs).
    """

    def __init__(self, command: str, timeout_s: float) -> None:
        self.command = command
        self.timeout_s = timeout_s
        self.first: int | None = None
        self._previous: dict[int, object] = {}
        self._forcing = threading.Lock()

    @staticmethod
    def timeout_from_env() -> float:
        raw = os.environ.get("ALPRL_STOP_TIMEOUT_S", "").strip()
        try:
            value = float(raw) if raw else STOP_TIMEOUT_S
        except ValueError:
            value = -1.0
        if not value > 0:
            raise ConfigError(f"ALPRL_STOP_TIMEOUT_S={raw!r}: expected seconds > 0 (default {STOP_TIMEOUT_S:g})")
        return value

    def install(self) -> StopGuard:
        if threading.current_thread() is threading.main_thread():  # Python handles signals there only
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._on_signal)
        return self

    def uninstall(self) -> None:
        """Restore the previous handlers (for in-process callers); not after a signal, whose deadline must also
        cover the interpreter's exit (atexit handlers close engines and sandbox pools too)."""
        if self.first is None:
            for sig, handler in self._previous.items():
                signal.signal(sig, handler)
            self._previous.clear()

    def _on_signal(self, signum: int, frame: object) -> None:
        name = signal.Signals(signum).name
        if self.first is not None:
            self.force(signum, f"{name} again during cleanup; exiting now")
            return  # the deadline's thread is already exiting
        self.first = signum
        reason = f"cleanup did not finish within {self.timeout_s:g} s after {name}; exiting"
        timer = threading.Timer(self.timeout_s, self.force, args=(signum, reason))
        timer.daemon = True
        timer.start()
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(128 + signum)

    def force(self, signum: int, reason: str) -> None:
        """Kill our child processes (vLLM engine core and workers, sandbox zygotes) and exit with 128 + signum."""
        if not self._forcing.acquire(blocking=False):
            return
        # os.write, not print: this may run inside a handler that interrupted a print to stderr
        os.write(2, f"alprl {self.command}: {reason}\n".encode())
        kill_children()
        os._exit(128 + signum)


def kill_children(grace_s: float = 2.0) -> None:
    """SIGTERM every descendant, then SIGKILL those still there after `grace_s`. SIGCONT too: a stopped process
    keeps a SIGTERM pending until it runs again."""
    try:
        import psutil  # vllm requires it
    except ImportError:  # then no vLLM processes; sandbox zygotes exit when our end of their socket closes
        return
    children = psutil.Process().children(recursive=True)
    for child in children:
        try:
            child.terminate()
            child.resume()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(children, timeout=grace_s)
    for child in alive:
        try:
            child.kill()
        except psutil.Error:
            pass


def guarded(command: str, run, args: argparse.Namespace) -> int:
    """`run(args)` under the stop guard (an experiment: a rerun skips the cells finished before the signal)."""
    try:
        guard = StopGuard(command, StopGuard.timeout_from_env()).install()
    except ConfigError as exc:
        print(f"alprl {command}: error: {exc}", file=sys.stderr)
        return 2
    try:
        return run(args)
    finally:
        guard.uninstall()
