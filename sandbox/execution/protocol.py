"""Messages between the server side (`sandbox.execution.zygote_handle`) and a zygote process
(`sandbox.execution.zygote`).

Transport: one AF_UNIX SOCK_SEQPACKET socketpair per zygote (message boundaries kept, file descriptors passed
with SCM_RIGHTS). Both ends are our own trusted code: user code never holds this socket (the run child closes
every inherited descriptor before the snippet starts), so messages are pickled tuples ``(kind, payload)`` — but
for the two sent once per run, "run" and "exited", which travel as marshalled tuples of plain values: a zygote's
every page written after a fork is a copy-on-write fault, and unpickling a class instance (its class, copyreg,
the unpickler's state) touched ~40 pages a run that marshal does not. The zygote side imports only `_socket`
(the C module): `socket`'s enum classes are ~1.2 MB that a zygote would copy into every fork's page tables.

Request data (code, files, stdin) never travels over this socket: it goes through pipes straight to the forked
run child, so the long-lived zygote never holds one run's data for a later run to find in memory.

server → zygote: ``("config", ZygoteConfig)`` once; ``("run", RunSpec)`` + fds; ``("kill", reason)``;
``("start", SessionSpec)`` + fds (session zygotes); ``("exit", None)``.
zygote → server: ``("ready", info)``; ``("exited", RunReport)``.
"""

from __future__ import annotations

import _socket
import marshal
import pickle
import sys
from typing import NamedTuple

MAX_MESSAGE = 1 << 16
MAX_FDS = 8
ANCILLARY_BYTES = _socket.CMSG_LEN(MAX_FDS * 4)  # room for MAX_FDS descriptors (C ints)
MARSHALLED = b"M"


class ZygoteConfig(NamedTuple):
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


class Limits(NamedTuple):
    """Per-run resource limits applied in the child. Units: seconds, MiB, counts."""

    timeout_s: float
    memory_mb: int
    max_file_mb: int
    max_open_files: int
    max_processes: int
    cpu_s: int  # RLIMIT_CPU soft limit; SIGXCPU at soft, SIGKILL at soft + 1


class RunSpec(NamedTuple):
    """One stateless run. fds passed alongside: payload_r, stdin_r, stdout_w, stderr_w[, fetch_w]."""

    limits: Limits
    fetch_files: tuple[str, ...] = ()
    max_fetch_bytes: int = 10 << 20


class SessionSpec(NamedTuple):
    """A persistent interpreter. fds passed alongside: cell_r, stdout_w, stderr_w, done_w."""

    limits: Limits


class RunReport(NamedTuple):
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


def _plain(kind: str, payload) -> tuple | None:
    """The per-run messages' payloads as tuples of plain values (None for every other message)."""
    if kind == "run":
        lim = payload.limits
        return (lim.timeout_s, lim.memory_mb, lim.max_file_mb, lim.max_open_files, lim.max_processes, lim.cpu_s,
                payload.fetch_files, payload.max_fetch_bytes)
    if kind == "exited":
        return payload.return_code, payload.wall_s, payload.killed_reason, payload.setup_error, payload.cleanup_error
    return None


def _from_plain(kind: str, values: tuple) -> RunSpec | RunReport:
    if kind == "run":
        return RunSpec(Limits(*values[:6]), tuple(values[6]), values[7])
    return RunReport(*values)


def send(sock: _socket.socket, kind: str, payload=None, fds: list[int] | tuple[int, ...] = ()) -> None:
    plain = _plain(kind, payload)
    if plain is not None:
        data = MARSHALLED + marshal.dumps((kind, plain))
    else:
        data = pickle.dumps((kind, payload), protocol=pickle.HIGHEST_PROTOCOL)  # starts with PROTO (0x80)
    if len(data) > MAX_MESSAGE:
        raise ValueError(f"control message {kind!r} is {len(data)} bytes (max {MAX_MESSAGE})")
    if fds:  # socket.send_fds, without the socket module
        packed = b"".join(fd.to_bytes(4, sys.byteorder, signed=True) for fd in fds)
        sock.sendmsg([data], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, packed)])
    else:
        sock.sendall(data)


def recv(sock: _socket.socket) -> tuple[str, object, list[int]]:
    """Receive one message; raises EOFError when the peer closed the socket.

    A peer that closes while a message to it is still unread (e.g. a process exiting while its thread that would
    read a zygote's "ready" is frozen by interpreter shutdown) makes Linux report ECONNRESET instead of EOF; it
    is the same end of the conversation, so it raises EOFError too.
    """
    try:
        data, ancillary, flags, _ = sock.recvmsg(MAX_MESSAGE, ANCILLARY_BYTES)
    except ConnectionResetError as exc:
        raise EOFError("control socket closed by peer (with a message it had not read)") from exc
    fds = []  # socket.recv_fds' parsing, without its array object
    for level, cmsg_type, blob in ancillary:
        if level == _socket.SOL_SOCKET and cmsg_type == _socket.SCM_RIGHTS:
            fds += memoryview(blob)[:len(blob) - len(blob) % 4].cast("i").tolist()
    if not data:
        for fd in fds:
            _close_quietly(fd)
        raise EOFError("control socket closed by peer")
    if flags & (_socket.MSG_TRUNC | _socket.MSG_CTRUNC):
        for fd in fds:
            _close_quietly(fd)
        raise ValueError("control message truncated")
    if data[:1] == MARSHALLED:
        kind, plain = marshal.loads(data[1:])
        return kind, _from_plain(kind, plain), fds
    kind, payload = pickle.loads(data)
    return kind, payload, fds


def _close_quietly(fd: int) -> None:
    import os

    try:
        os.close(fd)
    except OSError:
        pass
