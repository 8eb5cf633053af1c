"""Stateful sessions: one persistent interpreter per session, so a multi-turn episode keeps its variables.

Each session has its own zygote (own uid, own namespaces, same isolation as a stateless run) that forks one
long-lived interpreter (`sandbox.execution.child.repl`). Cells travel on a pipe as length-prefixed UTF-8; after each cell
the interpreter writes its return code on a "done" pipe. A cell that hits its wall-clock timeout, floods output,
or a crashed interpreter ends the session: the result says ``session_lost=True`` and the id is forgotten.
Idle sessions are deleted after `session_ttl_s`; at most `max_sessions` exist at once.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time
from dataclasses import dataclass, field

from sandbox.execution.protocol import Limits, SessionSpec, ZygoteConfig, send
from sandbox.execution.supervision import Capture, Pump, WorkerFailure
from sandbox.execution.zygote_handle import ZygoteProcess
from sandbox.settings import RUN_TIMEOUT_S, SERVER_DEFAULT_MEMORY, Settings, tier_of
from sandbox.types import ExecutionResult

log = logging.getLogger("sandbox.execution.sessions")
START_TIMEOUT_S = 60.0


class SessionLimit(RuntimeError):
    """max_sessions sessions already exist."""


@dataclass
class Session:
    id: str
    index: int
    zygote: ZygoteProcess
    cell_w: int
    out_r: int
    err_r: int
    done_r: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    last_used: float = field(default_factory=time.monotonic)
    cells: int = 0

    def close(self) -> None:
        self.zygote.close(timeout_s=1.0)
        for fd in (self.cell_w, self.out_r, self.err_r, self.done_r):
            try:
                os.close(fd)
            except OSError:
                pass


class SessionManager:
    def __init__(self, settings: Settings, *, uid_start: int | None):
        """uid_start: first uid of the session range (None: no uid layer); session i runs as uid_start + i."""
        self.settings = settings
        self._uid_start = uid_start
        self._sessions: dict[str, Session] = {}
        self._free = list(range(settings.max_sessions))
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.created = self.lost = self.expired = 0
        self._reaper = threading.Thread(target=self._reap_loop, daemon=True, name="sandbox-session-reaper")
        self._reaper.start()

    def __len__(self) -> int:
        return len(self._sessions)

    def create(self) -> Session:
        with self._lock:
            if not self._free:
                raise SessionLimit(f"{self.settings.max_sessions} sessions are open (SANDBOX_MAX_SESSIONS)")
            index = self._free.pop()
        try:
            session = self._start(index)
        except BaseException:
            with self._lock:
                self._free.append(index)
            raise
        with self._lock:
            self._sessions[session.id] = session
            self.created += 1
        return session

    def _start(self, index: int) -> Session:
        s = self.settings
        uid = None if self._uid_start is None else self._uid_start + index
        cfg = ZygoteConfig(slot=index, uid=uid, layers=s.requested_layers(), kind="session",
                           preload=tuple(m for m in s.preload.split(",") if m), tmpfs_mb=s.tmpfs_mb,
                           workdir_root=s.workdir_root)
        zygote = ZygoteProcess(cfg)
        cell_r, cell_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        done_r, done_w = os.pipe()
        limits = Limits(timeout_s=s.session_ttl_s, memory_mb=s.default_memory_mb, max_file_mb=s.max_file_mb,
                        max_open_files=s.max_open_files, max_processes=s.max_processes, cpu_s=s.session_cpu_s)
        try:
            send(zygote.sock, "start", SessionSpec(limits), fds=[cell_r, out_w, err_w, done_w])
        finally:
            for fd in (cell_r, out_w, err_w, done_w):
                os.close(fd)
        session = Session(secrets.token_hex(12), index, zygote, cell_w, out_r, err_r, done_r)
        line = self._wait_line(session, START_TIMEOUT_S, Capture(1 << 16), Capture(1 << 16))
        if line != "ready":
            session.close()
            raise WorkerFailure(f"session interpreter did not start ({line})")
        return session

    def _wait_line(self, session: Session, timeout_s: float, out: Capture, err: Capture,
                   payload: bytes = b"") -> str:
        """Pump one cell: write `payload`, collect output until a line on the done pipe.

        Returns the line, or "lost:<reason>" if the interpreter died / timed out / flooded the output.
        """
        pump = Pump(session.zygote.sock, own_fds=False)
        done = bytearray()
        pump.add_writer(session.cell_w, payload)
        pump.add_reader(session.out_r, out.feed)
        pump.add_reader(session.err_r, err.feed)
        pump.add_reader(session.done_r, done.extend)
        deadline = time.monotonic() + timeout_s
        flood = out.cap * self.settings.output_kill_factor
        try:
            while b"\n" not in done:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return self._kill(session, "timeout", pump, out, err)
                if out.total + err.total > flood:
                    return self._kill(session, "output", pump, out, err)
                pump.step(remaining)
                if pump.messages or pump.sock_eof:
                    return "lost:" + self._report_reason(pump)
            pump.drain(session.out_r, out.feed)  # the interpreter flushed before writing "done"
            pump.drain(session.err_r, err.feed)
            return done.split(b"\n", 1)[0].decode("ascii", "replace")
        finally:
            pump.close_all()

    def _kill(self, session: Session, reason: str, pump: Pump, out: Capture, err: Capture) -> str:
        try:
            send(session.zygote.sock, "kill", reason)
        except OSError:
            pass
        give_up = time.monotonic() + 5.0
        while not (pump.messages or pump.sock_eof) and time.monotonic() < give_up:
            pump.step(give_up - time.monotonic())
        pump.drain(session.out_r, out.feed)
        pump.drain(session.err_r, err.feed)
        return f"lost:{reason}"

    @staticmethod
    def _report_reason(pump: Pump) -> str:
        for kind, payload in pump.messages:
            if kind == "exited":
                return f"exit:{payload.return_code}"
        return "worker"

    def execute(self, session_id: str, code: str, timeout_s: float) -> ExecutionResult:
        """Run one cell. KeyError if the id is unknown (never created, deleted, expired or lost before)."""
        session = self._sessions[session_id]
        timeout_s = min(max(timeout_s, 0.001), self.settings.max_run_timeout_s)
        with session.lock:
            if session_id not in self._sessions:
                raise KeyError(session_id)
            out, err = Capture(self.settings.max_output_bytes), Capture(self.settings.max_output_bytes)
            data = code.encode("utf-8", "surrogatepass")
            start = time.monotonic()
            line = self._wait_line(session, timeout_s, out, err, len(data).to_bytes(8, "big") + data)
            wall = time.monotonic() - start
            session.last_used = time.monotonic()
            session.cells += 1
        common = {"stdout": out.text(), "stderr": err.text(), "wall_time_s": wall,
                  "stdout_truncated": out.truncated, "stderr_truncated": err.truncated}
        if not line.startswith("lost:"):
            rc = int(line) if line.lstrip("-").isdigit() else 1
            return ExecutionResult("Success" if rc == 0 else "Failed", return_code=rc, **common)
        self._forget(session_id)
        self.lost += 1
        reason = line[5:]
        if reason == "timeout":
            return ExecutionResult("TimeLimitExceeded", killed_reason="timeout", session_lost=True, **common)
        if reason.startswith("exit:"):
            rc = None if reason[5:] == "None" else int(reason[5:])
            return ExecutionResult("Success" if rc == 0 else "Failed", return_code=rc, session_lost=True, **common)
        if reason == "output":
            return ExecutionResult("Failed", return_code=-9, killed_reason="output", session_lost=True, **common)
        return ExecutionResult("SandboxError", session_lost=True, **{**common, "stderr": "session worker failed"})

    def delete(self, session_id: str) -> bool:
        return self._forget(session_id)

    def _forget(self, session_id: str) -> bool:
        with self._lock:
            session = self._sessions.pop(session_id, None)
        if session is None:
            return False
        session.close()
        with self._lock:
            self._free.append(session.index)
        return True

    def _reap_loop(self) -> None:
        period = max(0.05, min(5.0, self.settings.session_ttl_s / 4))
        while not self._stop.wait(period):
            now = time.monotonic()
            for sid, session in list(self._sessions.items()):
                if now - session.last_used > self.settings.session_ttl_s and session.lock.acquire(blocking=False):
                    try:
                        if self._forget(sid):
                            self.expired += 1
                    finally:
                        session.lock.release()

    def info(self) -> dict:
        first = next(iter(self._sessions.values()), None)
        layers = first.zygote.info["layers"] if first else None
        return {"active": len(self._sessions), "max": self.settings.max_sessions, "ttl_s": self.settings.session_ttl_s,
                "created": self.created, "lost": self.lost, "expired": self.expired,
                "tier": tier_of(set(layers)) if layers is not None else None}

    def close(self) -> None:
        self._stop.set()
        for sid in list(self._sessions):
            self._forget(sid)


class LocalSession:
    """In-process twin of `sandbox.client.HttpSession` (same methods, same lost-session behaviour)."""

    def __init__(self, manager: SessionManager):
        self.manager, self.session_id, self.lost = manager, "", ""
        try:
            self.session_id = manager.create().id
        except (SessionLimit, WorkerFailure) as exc:
            self.lost = f"could not create a session: {exc}"

    def run(self, code: str, *, timeout_s: float = RUN_TIMEOUT_S, memory_limit_mb: int = SERVER_DEFAULT_MEMORY,
            stdin: str = "") -> ExecutionResult:
        if not self.lost:
            try:
                result = self.manager.execute(self.session_id, code, timeout_s)
            except KeyError:
                self.lost = "session not found (expired, deleted or lost)"
            else:
                if result.session_lost:
                    self.lost = f"the interpreter ended ({result.status})"
                return result
        return ExecutionResult("SandboxError", stderr=f"session {self.session_id} lost: {self.lost}",
                               session_lost=True)

    def close(self) -> None:
        if self.session_id and not self.lost:
            self.manager.delete(self.session_id)
        self.lost = self.lost or "closed"

    def __enter__(self) -> LocalSession:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
