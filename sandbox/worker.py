"""Server-side handle of one zygote process: spawn, handshake, drive one run at a time, kill.

A run's data moves through pipes created here: the request payload (code + files, pickled) and stdin go straight
to the forked child; stdout/stderr come straight back and are read *concurrently* with per-stream byte caps
(past the cap the bytes are drained and dropped; past `kill_after_bytes` in total the run is killed, reason
"output").
The zygote reports only how the run ended. If the zygote dies or stops answering, the run becomes a
`WorkerFailure` and the caller replaces the zygote.
"""

from __future__ import annotations

import json
import os
import pickle
import selectors
import signal
import socket
import subprocess
import sys
import time
from base64 import b64decode
from dataclasses import dataclass, field
from pathlib import Path

from sandbox.child import THREAD_VARS
from sandbox.protocol import RunReport, RunSpec, ZygoteConfig, recv, send

_PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent)
# -I: no user site, no PYTHONPATH, no cwd on sys.path; the package is found through an explicit path instead.
_BOOT = "import sys; sys.path.insert(0, sys.argv[1]); from sandbox.zygote import main; sys.exit(main(int(sys.argv[2])))"
GRACE_S = 20.0  # beyond the run's own timeout: setup, fetch helper (≤ 10 s), cleanup


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
    """Non-blocking writer/reader multiplexing over pipes plus the zygote's control socket."""

    def __init__(self, sock: socket.socket, *, own_fds: bool = True):
        self.sel = selectors.DefaultSelector()
        self.own_fds = own_fds  # False for a session's long-lived pipes: unregister, never close
        self.sock = sock
        self.messages: list[tuple[str, object]] = []
        self.sock_eof = False
        self.sel.register(sock, selectors.EVENT_READ)

    def add_writer(self, fd: int, data: bytes) -> None:
        os.set_blocking(fd, False)
        if data:
            self.sel.register(fd, selectors.EVENT_WRITE, memoryview(data))
        elif self.own_fds:
            os.close(fd)

    def add_reader(self, fd: int, sink) -> None:
        os.set_blocking(fd, False)
        self.sel.register(fd, selectors.EVENT_READ, sink)

    def open_readers(self) -> int:
        return sum(1 for k in self.sel.get_map().values() if k.events == selectors.EVENT_READ and k.fd != self.sock.fileno())

    def step(self, timeout: float) -> None:
        for key, _ in self.sel.select(max(timeout, 0.0)):
            if key.fileobj is self.sock:
                self._read_sock()
            elif key.events == selectors.EVENT_WRITE:
                self._write(key)
            else:
                self._read(key)

    def _read_sock(self) -> None:
        try:
            kind, payload, fds = recv(self.sock)
        except (EOFError, OSError):
            self.sock_eof = True
            self.sel.unregister(self.sock)
            return
        for fd in fds:
            os.close(fd)
        self.messages.append((kind, payload))

    def _write(self, key) -> None:
        try:
            sent = os.write(key.fd, key.data[:1 << 16])
        except BlockingIOError:
            return
        except OSError:  # EPIPE: the child stopped reading (exited or never reads stdin)
            sent = len(key.data)
        rest = key.data[sent:]
        if rest:
            self.sel.modify(key.fd, selectors.EVENT_WRITE, rest)
        else:
            self.close(key.fd)

    def _read(self, key) -> None:
        try:
            data = os.read(key.fd, 1 << 16)
        except BlockingIOError:
            return
        if data:
            key.data(data)
        else:
            self.close(key.fd)

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
        self.sel.unregister(fd)
        if self.own_fds:
            os.close(fd)

    def close_all(self) -> None:
        for key in list(self.sel.get_map().values()):
            if key.fileobj is not self.sock:
                self.close(key.fd)
        self.sel.close()


class ZygoteProcess:
    """One zygote. Not thread-safe: the pool hands a zygote to one thread at a time."""

    def __init__(self, config: ZygoteConfig, *, ready_timeout_s: float = 120.0):
        self.config = config
        self.runs = 0
        self.broken = False
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-c", _BOOT, _PACKAGE_PARENT, str(theirs.fileno())],
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
        """Run one request; raises WorkerFailure if the zygote fails (it is then marked broken)."""
        payload = pickle.dumps((code, files), protocol=pickle.HIGHEST_PROTOCOL)
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
        pump = Pump(self.sock)
        out, err, fetched = Capture(max_output), Capture(max_output), bytearray()
        pump.add_writer(payload_w, payload)
        pump.add_writer(stdin_w, stdin)
        pump.add_reader(out_r, out.feed)
        pump.add_reader(err_r, err.feed)
        if fetch_r is not None:
            pump.add_reader(fetch_r, fetched.extend)
        try:
            report = self._supervise(pump, spec, out, err, kill_after_bytes)
        finally:
            pump.close_all()
        return RawRun(report, out, err, _decode_fetch(bytes(fetched)))

    def _supervise(self, pump: Pump, spec: RunSpec, out: Capture, err: Capture, flood: int) -> RunReport:
        guard = time.monotonic() + spec.limits.timeout_s + GRACE_S
        report: RunReport | None = None
        kill_sent = False
        while report is None or pump.open_readers():
            remaining = guard - time.monotonic()
            if remaining <= 0:
                self.kill()
                raise WorkerFailure("zygote stopped answering (run not ended within timeout + grace)")
            pump.step(remaining)
            for kind, payload in pump.messages:
                if kind == "exited":
                    report = payload
            pump.messages.clear()
            if pump.sock_eof and report is None:
                self.kill()
                raise WorkerFailure("zygote exited during the run")
            if not kill_sent and out.total + err.total > flood and report is None:
                send(self.sock, "kill", "output")
                kill_sent = True
        return report


def _decode_fetch(blob: bytes) -> dict[str, bytes]:
    if not blob:
        return {}
    try:
        return {path: b64decode(data) for path, data in json.loads(blob)["files"].items()}
    except (ValueError, KeyError, TypeError):
        return {}

