"""Pure execution core: run an untrusted Python snippet in a child process.

First version (issue 2). What is isolated now:
- a separate interpreter process in its own session (process group), killed as a whole on timeout;
- a private temporary working directory, removed afterwards;
- a clean environment (only PATH, LANG, HOME=tmpdir, PYTHONHASHSEED, PYTHONDONTWRITEBYTECODE);
- rlimits: CPU seconds, address space, file size, open files, no core dumps;
- stdout/stderr read concurrently with byte caps (excess is discarded, a truncation flag is set).
What is NOT isolated yet (issue 3): network, PID namespace, uid (runs as the caller), filesystem
reads outside the temp dir. Do not expose this to untrusted users before issue 3 lands.

This module never imports FastAPI; the HTTP service is a thin layer over it.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from sandbox.types import ExecutionResult

DEFAULT_MAX_OUTPUT_BYTES = 64 * 1024


def _limits(timeout_s: float, memory_limit_mb: int):
    """Return a preexec function applying rlimits in the child (runs after fork, before exec)."""
    cpu = max(1, int(timeout_s) + 1)
    mem = memory_limit_mb * 1024 * 1024

    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_FSIZE, (16 * 1024 * 1024,) * 2)
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return apply


def _read_capped(stream, cap: int, out: list[bytes], flag: list[bool]) -> None:
    """Read a pipe to EOF, keeping at most `cap` bytes (keeps draining so the child never blocks)."""
    kept = 0
    while chunk := stream.read1(65536):
        room = cap - kept
        if len(chunk) > room:
            flag[0] = True
        if room > 0:
            out.append(chunk[:room])
            kept += len(out[-1])
    stream.close()


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def execute(code: str, *, timeout_s: float = 3.0, memory_limit_mb: int = 1024, stdin: str = "",
            max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES) -> ExecutionResult:
    """Run `code` with `python -I` in a fresh process; never raises for untrusted-code problems."""
    workdir = tempfile.mkdtemp(prefix="alprl-run-")
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": workdir, "PYTHONHASHSEED": "0",
           "PYTHONDONTWRITEBYTECODE": "1", "PYTHONIOENCODING": "utf-8"}
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-c", code], cwd=workdir, env=env, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
            preexec_fn=_limits(timeout_s, memory_limit_mb))
    except OSError as exc:
        shutil.rmtree(workdir, ignore_errors=True)
        return ExecutionResult("SandboxError", stderr=f"could not start interpreter: {exc}")
    outs: list[bytes] = []
    errs: list[bytes] = []
    out_trunc, err_trunc = [False], [False]
    readers = [threading.Thread(target=_read_capped, args=(proc.stdout, max_output_bytes, outs, out_trunc)),
               threading.Thread(target=_read_capped, args=(proc.stderr, max_output_bytes, errs, err_trunc))]
    for t in readers:
        t.daemon = True
        t.start()
    try:
        if stdin:
            proc.stdin.write(stdin.encode())
        proc.stdin.close()
    except (BrokenPipeError, OSError):
        pass
    timed_out = False
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
    _kill_group(proc)  # also reaps daemons the snippet left in its group
    proc.wait()
    for t in readers:
        t.join(timeout=1.0)
    wall = time.monotonic() - start
    shutil.rmtree(workdir, ignore_errors=True)
    stdout = b"".join(outs).decode("utf-8", errors="replace")
    stderr = b"".join(errs).decode("utf-8", errors="replace")
    if timed_out:
        status = "TimeLimitExceeded"
    else:
        status = "Success" if proc.returncode == 0 else "Failed"
    return ExecutionResult(status, stdout, stderr, proc.returncode, wall, out_trunc[0], err_trunc[0])


class LocalExecutor:
    """In-process CodeRunner over `execute` (no server needed; used by tests and as a fallback)."""

    def __init__(self, max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES):
        self.max_output_bytes = max_output_bytes

    def run(self, code: str, *, timeout_s: float = 3.0, memory_limit_mb: int = 1024,
            stdin: str = "") -> ExecutionResult:
        return execute(code, timeout_s=timeout_s, memory_limit_mb=memory_limit_mb, stdin=stdin,
                       max_output_bytes=self.max_output_bytes)

    def close(self) -> None:
        pass
