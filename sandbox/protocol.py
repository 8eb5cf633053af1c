"""Messages between the server side (`sandbox.worker`) and a zygote process (`sandbox.zygote`).

Transport: one AF_UNIX SOCK_SEQPACKET socketpair per zygote (message boundaries kept, file descriptors passed
with SCM_RIGHTS). Both ends are our own trusted code: user code never holds this socket (the run child closes
every inherited descriptor before the snippet starts), so messages are pickled tuples ``(kind, payload)``.

Request data (code, files, stdin) never travels over this socket: it goes through pipes straight to the forked
run child, so the long-lived zygote never holds one run's data for a later run to find in memory.

server → zygote: ``("config", ZygoteConfig)`` once; ``("run", RunSpec)`` + fds; ``("kill", reason)``;
``("start", SessionSpec)`` + fds (session zygotes); ``("exit", None)``.
zygote → server: ``("ready", info)``; ``("exited", RunReport)``.
"""

from __future__ import annotations

import pickle
import socket
from dataclasses import dataclass, field

MAX_MESSAGE = 1 << 16
MAX_FDS = 8


@dataclass(frozen=True)
class ZygoteConfig:
    """What a zygote needs at start. `layers` is the requested subset of {"uid", "net", "pid", "mount"}."""

    slot: int
    uid: int | None  # run user code as this uid (only honoured when the zygote is root)
    layers: frozenset[str]
    preload: tuple[str, ...]
    tmpfs_mb: int  # size of the private /tmp (and /dev/shm) when the mount layer is active
    workdir_root: str  # where per-run directories are created (inside the private /tmp under "mount")
    kind: str = "pool"  # "pool": one stateless run at a time; "session": one persistent interpreter
    # Install the seccomp filter in the zygote itself, once, rather than in every child (each install costs the
    # kernel ~0.3 ms: it compiles the program). Children inherit it; such a zygote can make no per-run mounts,
    # so it refuses absolute file paths (the pool sends those to a zygote without it).
    seccomp_once: bool = False


@dataclass(frozen=True)
class Limits:
    """Per-run resource limits applied in the child. Units: seconds, MiB, counts."""

    timeout_s: float
    memory_mb: int
    max_file_mb: int
    max_open_files: int
    max_processes: int
    cpu_s: int  # RLIMIT_CPU soft limit; SIGXCPU at soft, SIGKILL at soft + 1


@dataclass(frozen=True)
class RunSpec:
    """One stateless run. fds passed alongside: payload_r, stdin_r, stdout_w, stderr_w[, fetch_w]."""

    limits: Limits
    fetch_files: tuple[str, ...] = ()
    max_fetch_bytes: int = 10 << 20


@dataclass(frozen=True)
class SessionSpec:
    """A persistent interpreter. fds passed alongside: cell_r, stdout_w, stderr_w, done_w."""

    limits: Limits


@dataclass
class RunReport:
    """How a run (or a session interpreter) ended, as seen by the zygote.

    return_code follows subprocess: >= 0 exit status, < 0 killed by that signal. `killed_reason` is set when the
    zygote killed it: "timeout" (wall clock), "output" (server asked: output flood), "request" (session delete).
    `setup_error` is non-empty when the sandbox failed before user code started (maps to SandboxError).
    """

    return_code: int | None
    wall_s: float
    killed_reason: str | None = None
    setup_error: str = ""
    cleanup_error: str = ""
    extra: dict = field(default_factory=dict)


def send(sock: socket.socket, kind: str, payload=None, fds: list[int] | tuple[int, ...] = ()) -> None:
    data = pickle.dumps((kind, payload), protocol=pickle.HIGHEST_PROTOCOL)
    if len(data) > MAX_MESSAGE:
        raise ValueError(f"control message {kind!r} is {len(data)} bytes (max {MAX_MESSAGE})")
    if fds:
        socket.send_fds(sock, [data], list(fds))
    else:
        sock.sendall(data)


def recv(sock: socket.socket) -> tuple[str, object, list[int]]:
    """Receive one message; raises EOFError when the peer closed the socket.

    A peer that closes while a message to it is still unread (e.g. a process exiting while its thread that would
    read a zygote's "ready" is frozen by interpreter shutdown) makes Linux report ECONNRESET instead of EOF; it
    is the same end of the conversation, so it raises EOFError too.
    """
    try:
        data, fds, flags, _ = socket.recv_fds(sock, MAX_MESSAGE, MAX_FDS)
    except ConnectionResetError as exc:
        raise EOFError("control socket closed by peer (with a message it had not read)") from exc
    if not data:
        for fd in fds:
            _close_quietly(fd)
        raise EOFError("control socket closed by peer")
    if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
        for fd in fds:
            _close_quietly(fd)
        raise ValueError("control message truncated")
    kind, payload = pickle.loads(data)
    return kind, payload, fds


def _close_quietly(fd: int) -> None:
    import os

    try:
        os.close(fd)
    except OSError:
        pass
