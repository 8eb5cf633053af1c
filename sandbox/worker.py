"""Server-side handle of one zygote process: spawn, handshake, drive one run at a time, kill.

A run's data moves through pipes created here: the request payload (`child.encode_payload`) and stdin go straight
to the forked child; stdout/stderr come straight back and are read *concurrently* with per-stream byte caps
(past the cap the bytes are drained and dropped; past `kill_after_bytes` in total the run is killed, reason
"output").
The zygote reports only how the run ended. If the zygote dies or stops answering, the run becomes a
`WorkerFailure` and the caller replaces the zygote.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from base64 import b64decode
from dataclasses import dataclass, field
from pathlib import Path

from sandbox.child import THREAD_VARS, encode_payload
from sandbox.protocol import RunReport, RunSpec, ZygoteConfig, recv, send

_PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent)
# -I: no user site, no PYTHONPATH, no cwd on sys.path. -S: no `site` either, whose .pth hooks (an editable
# install's import finder with pathlib, ipaddress, urllib) are 1.3 MB every fork would copy page tables for; the
# zygote gets what `site` would have set (`site_state`: the path, and a venv's prefix, which runs see and whose
# files a private /tmp must keep visible), and the package's parent before the path.
_BOOT = ("import sys; sys.prefix, sys.exec_prefix = sys.argv[3:5]; sys.path[:] = [sys.argv[1], *sys.argv[5:]]; "
         "from sandbox.zygote import main; sys.exit(main(int(sys.argv[2])))")
GRACE_S = 20.0  # beyond the run's own timeout: setup, fetch helper (≤ 10 s), cleanup


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


class WorkerFailure(RuntimeError):
    """The zygote died or hung; the run's outcome is unknown (maps to SandboxError)."""


def zygote_environ() -> dict[str, str]:
    """The zygote's environment (children inherit its memory): whitelisted, so the server's secrets stay out."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONHASHSEED": "0", "MPLBACKEND": "Agg"}
    env.update({k: "1" for k in THREAD_VARS})  # before numpy is imported: BLAS thread pools reserve memory
    return env


class Capture:
    """Keeps the first `cap` bytes of a stream and counts the rest."""

    def __init__(self, cap: int):
        self.cap, self.total, self.parts = cap, 0, []

    def feed(self, data: bytes) -> None:
        room = self.cap - (self.total if self.total < self.cap else self.cap)
        if room > 0:
            self.parts.append(data[:room])
        self.total += len(data)

    @property
    def truncated(self) -> bool:
        return self.total > self.cap

    def text(self) -> str:
        return b"".join(self.parts).decode("utf-8", errors="replace")


@dataclass
class RawRun:
    """What one run produced, before it is mapped onto ExecutionResult / RunCodeResponse."""

    report: RunReport
    stdout: Capture
    stderr: Capture
    files: dict[str, bytes] = field(default_factory=dict)


class Pump:
    """Non-blocking writer/reader multiplexing over pipes plus the zygote's control socket.

    Two drivers share every handler: `step` waits on a selector of its own (a run thread), `step_async` on the
    running asyncio loop (the server's event loop, so a run needs no thread hand-off).
    """

    def __init__(self, sock: socket.socket, *, own_fds: bool = True, loop: asyncio.AbstractEventLoop | None = None):
        self.loop = loop
        self.sel = None if loop else selectors.DefaultSelector()
        self.own_fds = own_fds  # False for a session's long-lived pipes: unregister, never close
        self.sock = sock
        self.messages: list[tuple[str, object]] = []
        self.sock_eof = False
        self._readers: dict[int, object] = {}  # fd → sink
        self._writers: dict[int, memoryview] = {}  # fd → bytes left to write
        self._woken: asyncio.Future | None = None
        self._watch(sock.fileno(), write=False)

    def _watch(self, fd: int, *, write: bool) -> None:
        if self.loop is None:
            self.sel.register(fd, selectors.EVENT_WRITE if write else selectors.EVENT_READ)
        elif write:
            self.loop.add_writer(fd, self._ready, fd)
        else:
            self.loop.add_reader(fd, self._ready, fd)

    def _unwatch(self, fd: int, *, write: bool) -> None:
        if self.loop is None:
            self.sel.unregister(fd)
        elif write:
            self.loop.remove_writer(fd)
        else:
            self.loop.remove_reader(fd)

    def add_writer(self, fd: int, data: bytes) -> None:
        os.set_blocking(fd, False)
        if data:
            self._writers[fd] = memoryview(data)
            self._watch(fd, write=True)
        elif self.own_fds:
            os.close(fd)

    def add_reader(self, fd: int, sink) -> None:
        os.set_blocking(fd, False)
        self._readers[fd] = sink
        self._watch(fd, write=False)

    def open_readers(self) -> int:
        return len(self._readers)

    def step(self, timeout: float) -> None:
        for key, _ in self.sel.select(max(timeout, 0.0)):
            self._handle(key.fd)

    async def step_async(self, timeout: float) -> None:
        """Wait until at least one event was handled (by `_ready`, on the loop) or `timeout` passed."""
        self._woken = woken = self.loop.create_future()
        timer = self.loop.call_later(max(timeout, 0.0), _resolve, woken)
        try:
            await woken
        finally:
            timer.cancel()

    def _ready(self, fd: int) -> None:
        self._handle(fd)
        _resolve(self._woken)

    def _handle(self, fd: int) -> None:
        if fd == self.sock.fileno() and not self.sock_eof:
            self._read_sock()
        elif fd in self._writers:
            self._write(fd)
        elif fd in self._readers:
            self._read(fd)

    def _read_sock(self) -> None:
        try:
            kind, payload, fds = recv(self.sock)
        except (EOFError, OSError):
            self.sock_eof = True
            self._unwatch(self.sock.fileno(), write=False)
            return
        for fd in fds:
            os.close(fd)
        self.messages.append((kind, payload))

    def _write(self, fd: int) -> None:
        data = self._writers[fd]
        try:
            sent = os.write(fd, data[:1 << 16])
        except BlockingIOError:
            return
        except OSError:  # EPIPE: the child stopped reading (exited or never reads stdin)
            sent = len(data)
        self._writers[fd] = rest = data[sent:]
        if not rest:
            self.close(fd)

    def _read(self, fd: int) -> None:
        try:
            data = os.read(fd, 1 << 16)
        except BlockingIOError:
            return
        if data:
            self._readers[fd](data)
        else:
            self.close(fd)

    def drain(self, fd: int, sink) -> None:
        """Read whatever is already buffered in `fd` without waiting."""
        while True:
            try:
                data = os.read(fd, 1 << 16)
            except BlockingIOError:
                return
            if not data:
                return
            sink(data)

    def close(self, fd: int) -> None:
        write = fd in self._writers
        (self._writers if write else self._readers).pop(fd)
        self._unwatch(fd, write=write)
        if self.own_fds:
            os.close(fd)

    def close_all(self) -> None:
        for fd in [*self._writers, *self._readers]:
            self.close(fd)
        if not self.sock_eof:
            self._unwatch(self.sock.fileno(), write=False)
        if self.sel is not None:
            self.sel.close()


def _resolve(future: asyncio.Future | None) -> None:
    if future is not None and not future.done():
        future.set_result(None)


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

    def _end(self, run: _Run, *, kill: bool) -> None:
        run.pump.close_all()  # first: nothing may still watch the control socket when kill() closes it
        if kill:
            self.kill()

    def _begin(self, spec: RunSpec, code: str, files: dict[str, bytes], stdin: bytes, max_output: int,
               kill_after_bytes: int, loop: asyncio.AbstractEventLoop | None) -> _Run:
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
        run = _Run(self, Pump(self.sock, loop=loop), spec, Capture(max_output), Capture(max_output), kill_after_bytes)
        run.pump.add_writer(payload_w, payload)
        run.pump.add_writer(stdin_w, stdin)
        run.pump.add_reader(out_r, run.out.feed)
        run.pump.add_reader(err_r, run.err.feed)
        if fetch_r is not None:
            run.pump.add_reader(fetch_r, run.fetched.extend)
        return run


class _Run:
    """One run in flight: what its pipes and the zygote's report say so far, whichever way it is waited on."""

    def __init__(self, zygote: ZygoteProcess, pump: Pump, spec: RunSpec, out: Capture, err: Capture, flood: int):
        self.zygote, self.pump, self.out, self.err, self.flood = zygote, pump, out, err, flood
        self.fetched = bytearray()
        self.guard = time.monotonic() + spec.limits.timeout_s + GRACE_S
        self.report: RunReport | None = None
        self.kill_sent = False
        self.failed = False  # the zygote died or hung: the caller kills it

    def waiting(self) -> float | None:
        """Seconds to wait for the next event, or None once the report and every output stream are in.

        Raises WorkerFailure (with `failed` set) if the zygote died or outlived the run's timeout + grace."""
        for kind, payload in self.pump.messages:
            if kind == "exited":
                self.report = payload
        self.pump.messages.clear()
        if self.pump.sock_eof and self.report is None:
            self.failed = True
            raise WorkerFailure("zygote exited during the run")
        if not self.kill_sent and self.out.total + self.err.total > self.flood and self.report is None:
            send(self.zygote.sock, "kill", "output")
            self.kill_sent = True
        if self.report is not None and not self.pump.open_readers():
            return None
        remaining = self.guard - time.monotonic()
        if remaining <= 0:
            self.failed = True
            raise WorkerFailure("zygote stopped answering (run not ended within timeout + grace)")
        return remaining

    def result(self) -> RawRun:
        return RawRun(self.report, self.out, self.err, _decode_fetch(bytes(self.fetched)))


def _decode_fetch(blob: bytes) -> dict[str, bytes]:
    if not blob:
        return {}
    try:
        return {path: b64decode(data) for path, data in json.loads(blob)["files"].items()}
    except (ValueError, KeyError, TypeError):
        return {}

