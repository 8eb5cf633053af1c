"""Server-side handle of one zygote process (`ZygoteProcess`): spawn, handshake, hand it one run at a time, kill.

A run's data moves through pipes created here: the request payload (`child.encode_payload`) and stdin go straight
to the forked child; stdout/stderr come straight back, watched by `sandbox.execution.supervision` (capped,
read concurrently). The zygote reports only how the run ended. If the zygote dies or stops answering, the run
becomes a `WorkerFailure` and the caller replaces the zygote.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from sandbox.execution.child import THREAD_VARS, encode_payload
from sandbox.execution.protocol import RunSpec, ZygoteConfig, recv, send
from sandbox.execution.supervision import Capture, Pump, RawRun, RunWatch, WorkerFailure

_PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])  # the directory holding the `sandbox` package
# -I: no user site, no PYTHONPATH, no cwd on sys.path. -S: no `site` either, whose .pth hooks (an editable
# install's import finder with pathlib, ipaddress, urllib) are 1.3 MB every fork would copy page tables for; the
# zygote gets what `site` would have set (`site_state`: the path, and a venv's prefix, which runs see and whose
# files a private /tmp must keep visible), and the package's parent before the path.
_BOOT = ("import sys; sys.prefix, sys.exec_prefix = sys.argv[3:5]; sys.path[:] = [sys.argv[1], *sys.argv[5:]]; "
         "from sandbox.execution.zygote import main; sys.exit(main(int(sys.argv[2])))")


@functools.cache
def site_state() -> tuple[str, ...]:
    """(sys.prefix, sys.exec_prefix, *sys.path) of this interpreter started with -I, asked of it once: what
    `site` sets (a venv's prefix; stdlib, site-packages and the directories their .pth files add) and a zygote,
    started without it, takes from its command line."""
    query = "import json, sys; print(json.dumps([sys.prefix, sys.exec_prefix, *sys.path]))"
    out = subprocess.run([sys.executable, "-I", "-c", query], capture_output=True, text=True, check=True, cwd="/",
                         env=zygote_environ())
    prefix, exec_prefix, *path = json.loads(out.stdout)
    return (prefix, exec_prefix, *(p for p in path if p))


def zygote_environ() -> dict[str, str]:
    """The zygote's environment (children inherit its memory): whitelisted, so the server's secrets stay out."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONHASHSEED": "0", "MPLBACKEND": "Agg"}
    env.update({k: "1" for k in THREAD_VARS})  # before numpy is imported: BLAS thread pools reserve memory
    return env


class ZygoteProcess:
    """One zygote. Not thread-safe: the pool hands a zygote to one thread at a time."""

    def __init__(self, config: ZygoteConfig, *, ready_timeout_s: float = 120.0):
        self.config = config
        self.runs = 0
        self.broken = False
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _BOOT, _PACKAGE_PARENT, str(theirs.fileno()), *site_state()],
                pass_fds=[theirs.fileno()], env=zygote_environ(), stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, start_new_session=True, cwd="/")
        finally:
            theirs.close()
        try:
            send(self.sock, "config", config)
            self.sock.settimeout(ready_timeout_s)
            kind, self.info, _ = recv(self.sock)
            self.sock.settimeout(None)
            if kind != "ready":
                raise WorkerFailure(f"zygote answered {kind!r} instead of 'ready'")
        except (OSError, EOFError, WorkerFailure) as exc:
            self.kill()
            raise WorkerFailure(f"zygote for slot {config.slot} failed to start: {exc}") from exc

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return not self.broken and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the zygote's process group (with a PID namespace this ends every process of its runs)."""
        self.broken = True
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self.sock.close()

    def close(self, timeout_s: float = 2.0) -> None:
        """Ask the zygote to exit (it kills any run it still has), then make sure it is gone."""
        if self.alive:
            try:
                send(self.sock, "exit")
                self.proc.wait(timeout=timeout_s)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()

    def run(self, spec: RunSpec, code: str, files: dict[str, bytes], stdin: bytes, *, max_output: int,
            kill_after_bytes: int) -> RawRun:
        """Run one request, waiting in this thread; raises WorkerFailure if the zygote fails (it is then marked
        broken)."""
        run = self._begin(spec, code, files, stdin, max_output, kill_after_bytes, loop=None)
        try:
            while (remaining := run.waiting()) is not None:
                run.pump.step(remaining)
        finally:
            self._end(run, kill=run.failed)
        return run.result()

    async def run_async(self, spec: RunSpec, code: str, files: dict[str, bytes], stdin: bytes, *, max_output: int,
                        kill_after_bytes: int) -> RawRun:
        """`run` on the running asyncio loop: the loop itself waits on the run's pipes and the control socket, so
        the server needs no thread hand-off. Cancelled, it kills the zygote (its report would otherwise reach
        the next run): callers that mean to reuse the zygote let it finish (the service shields it)."""
        run = self._begin(spec, code, files, stdin, max_output, kill_after_bytes, loop=asyncio.get_running_loop())
        cancelled = False
        try:
            while (remaining := run.waiting()) is not None:
                await run.pump.step_async(remaining)
        except asyncio.CancelledError:
            cancelled = True
            raise
        finally:
            self._end(run, kill=run.failed or cancelled)
        return run.result()

    def _end(self, run: RunWatch, *, kill: bool) -> None:
        run.pump.close_all()  # first: nothing may still watch the control socket when kill() closes it
        if kill:
            self.kill()

    def _begin(self, spec: RunSpec, code: str, files: dict[str, bytes], stdin: bytes, max_output: int,
               kill_after_bytes: int, loop: asyncio.AbstractEventLoop | None) -> RunWatch:
        """Hand the run to the zygote with its pipes; returns what watches it."""
        payload = encode_payload(code, files)
        payload_r, payload_w = os.pipe()
        stdin_r, stdin_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        theirs = [payload_r, stdin_r, out_w, err_w]
        fetch_r = None
        if spec.fetch_files:
            fetch_r, fetch_w = os.pipe()
            theirs.append(fetch_w)
        try:
            send(self.sock, "run", spec, fds=theirs)
        except OSError as exc:
            for fd in (*theirs, payload_w, stdin_w, out_r, err_r, *([fetch_r] if fetch_r is not None else [])):
                os.close(fd)
            self.broken = True
            raise WorkerFailure(f"could not reach the zygote: {exc}") from exc
        for fd in theirs:
            os.close(fd)
        self.runs += 1
        run = RunWatch(self.sock, Pump(self.sock, loop=loop), spec, Capture(max_output), Capture(max_output),
                       kill_after_bytes)
        run.pump.add_writer(payload_w, payload)
        run.pump.add_writer(stdin_w, stdin)
        run.pump.add_reader(out_r, run.out.feed)
        run.pump.add_reader(err_r, run.err.feed)
        if fetch_r is not None:
            run.pump.add_reader(fetch_r, run.fetched.extend)
        return run
