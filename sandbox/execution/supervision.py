"""Run supervision on the server side: a run's pipes and its zygote's report, watched until the run is over.

`Pump` multiplexes non-blocking pipe reads and writes and the zygote's control socket, driven either by a
selector of its own (a run thread) or by the running asyncio loop (the server's, so a run needs no thread
hand-off). `RunWatch` is one run in flight: stdout/stderr are read *concurrently* into `Capture`s with per-stream
byte caps (past the cap the bytes are drained and dropped; past the flood limit in total the zygote is told to
kill the run, reason "output"), and a run whose zygote dies or outlives the run's timeout + `GRACE_S` becomes a
`WorkerFailure` (the caller replaces the zygote). `RawRun` is what a run produced, before it is mapped onto an
ExecutionResult.
"""

from __future__ import annotations

import asyncio
import json
import os
import selectors
import socket
import time
from base64 import b64decode
from dataclasses import dataclass, field

from sandbox.execution.protocol import RunReport, RunSpec, recv, send

GRACE_S = 20.0  # beyond the run's own timeout: setup, fetch helper (≤ 10 s), cleanup


class WorkerFailure(RuntimeError):
    """The zygote died or hung; the run's outcome is unknown (maps to SandboxError)."""


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


class RunWatch:
    """One run in flight: what its pipes and the zygote's report say so far, whichever way it is waited on."""

    def __init__(self, sock: socket.socket, pump: Pump, spec: RunSpec, out: Capture, err: Capture, flood: int):
        self.sock, self.pump, self.out, self.err, self.flood = sock, pump, out, err, flood
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
            send(self.sock, "kill", "output")
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

