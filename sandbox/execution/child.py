"""Code that runs inside a child forked from a zygote: set up the run, drop privileges, run the snippet.

Order (reference/sandbox.md §4): setsid → read the request payload → private workdir → redirect stdio, close
every other descriptor → setgroups/setgid/setuid (slot uid) → rlimits → chdir → run the code as ``__main__``, in
the clean environment the zygote set once for its workdir (`set_environ`). (no_new_privs is set once in the zygote
and inherited: it cannot be undone.) Anything failing before the snippet starts is a *setup* error, reported on a
pipe the snippet never sees, so user code can never fake a SandboxError (or hide one).
"""

from __future__ import annotations

import atexit
import builtins
import io
import linecache
import os
import pickle
import resource
import signal
import stat
import sys
import types

from sandbox.execution.protocol import Limits
from sandbox.isolation.file_paths import AbsoluteMap, ancestors, bind_absolute, check_absolute, host_path

# Private references to everything a child uses after user code ran (result codes, flushing, the session's
# done pipe, exit): user code may patch `os._exit`, `os.write`, `sys.exit`, `print`, `sys.stdout` or any builtin
# (e.g. the "anti-hack" header `os._exit = None; sys.exit = None` some pipelines prepend), and must not be able
# to break our reporting or make our own traceback leak into its output. The module's functions look builtins up
# in a private copy of the builtins namespace (functions capture `__builtins__` when they are defined).
__builtins__ = dict(builtins.__dict__)
_exit, _write, _read = os._exit, os.write, os.read
_excepthook, _run_exitfuncs = sys.__excepthook__, atexit._run_exitfuncs
_streams: list = []  # the text streams rebuild_sys_streams made: flushed after a run even if user code swapped

PROGRAM = "main.py"  # short, stable name for tracebacks (the file also exists in the workdir)
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS")


def clean_environ(workdir: str) -> dict[str, str]:
    """The whole environment user code sees: nothing inherited, so no secret can leak through it."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": workdir, "TMPDIR": workdir,
           "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0", "MPLBACKEND": "Agg"}
    env.update({k: "1" for k in THREAD_VARS})
    return env


def read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):  # pipe-sized reads: a larger buffer is allocated (and touched) per call
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


def encode_payload(code: str, files: dict[str, bytes]) -> bytes:
    """The request as the child reads it: the bare source when there are no files (the usual case: unpickling
    touches memory a plain decode does not, and every page a run touches is a copy), else (code, files) pickled."""
    if files:
        return pickle.dumps((code, files), protocol=pickle.HIGHEST_PROTOCOL)  # starts with PROTO (0x80)
    return b"\0" + code.encode("utf-8", "surrogatepass")


def decode_payload(data: bytes) -> tuple[str, dict[str, bytes]]:
    if data[:1] == b"\0":
        return data[1:].decode("utf-8", "surrogatepass"), {}
    return pickle.loads(data)


def make_workdir(workdir: str, code: str, files: dict[str, bytes], uid: int | None,
                 amap: AbsoluteMap | None = None) -> None:
    """Fresh 0700 directory holding the program and the request's files, owned by the run's uid.

    Absolute paths: see `sandbox.isolation.file_paths` (in <workdir>/.root, or as they are in a private tmp dir)."""
    os.mkdir(workdir, 0o700)
    for rel, data in files.items():
        full, root = host_path(rel, workdir, amap)
        os.makedirs(os.path.dirname(full), mode=0o700, exist_ok=True)
        real_dir, real_root = os.path.realpath(os.path.dirname(full)), os.path.realpath(root)
        if real_dir != real_root and not real_dir.startswith(real_root + "/"):
            raise ValueError(f"file path {rel!r} leads out of {root}")  # a symlink left in a tmp dir
        _write_new(full, data)
        if uid is not None and root != workdir:
            for path in ancestors(full, root):
                os.lchown(path, uid, uid)
    _write_new(os.path.join(workdir, PROGRAM), code.encode("utf-8", "surrogatepass"))
    if uid is not None:
        os.lchown(workdir, uid, uid)
        os.lchown(os.path.join(workdir, PROGRAM), uid, uid)
        if files:
            for root, dirs, names in os.walk(workdir):
                for name in dirs + names:
                    os.lchown(os.path.join(root, name), uid, uid)


def _write_new(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def drop_privileges(uid: int) -> None:
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    if os.getuid() != uid or os.geteuid() != uid or uid == 0:
        raise PermissionError(f"could not switch to uid {uid}")


def apply_rlimits(limits: Limits, *, nproc: bool) -> None:
    """Lower the limits (never above the current hard limit, which an unprivileged process cannot raise)."""
    wanted = {
        resource.RLIMIT_CPU: (limits.cpu_s, limits.cpu_s + 1),
        resource.RLIMIT_AS: (limits.memory_mb << 20,) * 2,
        resource.RLIMIT_FSIZE: (limits.max_file_mb << 20,) * 2,
        resource.RLIMIT_NOFILE: (limits.max_open_files,) * 2,
        resource.RLIMIT_CORE: (0, 0),
        resource.RLIMIT_MEMLOCK: (0, 0),
    }
    if nproc:  # only meaningful with a dedicated uid: NPROC counts every process of the real uid
        wanted[resource.RLIMIT_NPROC] = (limits.max_processes,) * 2
    for res, (soft, hard) in wanted.items():
        cur_hard = resource.getrlimit(res)[1]
        if cur_hard != resource.RLIM_INFINITY:
            soft, hard = min(soft, cur_hard), min(hard, cur_hard)
        resource.setrlimit(res, (soft, hard))


def reset_process_state() -> None:
    """Undo the zygote's SIGCHLD fallback (wakeup fd + handler) so the snippet starts like `python main.py`.

    SIGINT, SIGTERM (defaults) and SIGPIPE (ignored, so EPIPE raises BrokenPipeError) are left as CPython sets them.
    """
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)


def redirect_stdio(stdin_fd: int, stdout_fd: int, stderr_fd: int, keep: tuple[int, ...]) -> None:
    """Make the pipes fds 0-2 and close every other descriptor except `keep` (setup / session pipes).

    Closing everything is what keeps the zygote's control socket (and so the API) out of user code's reach.
    """
    for src, dst in ((stdin_fd, 0), (stdout_fd, 1), (stderr_fd, 2)):
        if src != dst:
            os.dup2(src, dst)
    low = 3
    for fd in sorted(k for k in keep if k >= 3):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 20)


def rebuild_sys_streams() -> None:
    """Text streams on fds 0-2, unbuffered like PYTHONUNBUFFERED=1 (partial output survives a kill)."""
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)),
                                                 encoding="utf-8", errors="strict")
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8",
                                                   errors="strict", write_through=True)
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8",
                                                   errors="backslashreplace", write_through=True)
    _streams[:] = [sys.stdout, sys.stderr]


def exit_code(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:  # as the interpreter does: any other value is printed to (the current) sys.stderr
        print(code, file=sys.stderr)
    except BaseException:
        pass
    return 1


def report_exception(exc: BaseException, *, skip_frames: int = 1, cells: bool = False) -> None:
    """Print like the interpreter does, hiding our own exec frame(s).

    cells: source lives only in linecache (session cells), so use the pure-Python printer; scripts keep the
    C hook, which is also much faster on a 10**6-frame RecursionError.
    """
    tb = exc.__traceback__
    for _ in range(skip_frames):
        tb = tb.tb_next if tb is not None else None
    exc.__traceback__ = tb  # the default hook prints the exception's own traceback, not the argument
    try:
        if cells and sys.excepthook is sys.__excepthook__:
            import traceback  # sessions only: scripts print with the C hook, so runs fork without this module

            traceback.print_exception(type(exc), exc, tb)
        else:
            sys.excepthook(type(exc), exc, tb)
    except BaseException:  # a broken user excepthook must not hide the original error
        try:
            _excepthook(type(exc), exc, tb)
        except BaseException:
            pass


def new_main_module(workdir: str) -> dict:
    main = types.ModuleType("__main__")
    main.__file__ = os.path.join(workdir, PROGRAM)
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    sys.argv[:] = [PROGRAM]
    sys.path.insert(0, workdir)
    return main.__dict__


def flush_streams() -> None:
    for stream in (sys.stdout, sys.stderr, *_streams):
        try:
            stream.flush()
        except BaseException:
            pass


def run_main(code: str, workdir: str) -> int:
    """Run `code` as a script; returns the exit status the interpreter would have."""
    namespace = new_main_module(workdir)
    try:
        compiled = compile(code, PROGRAM, "exec")
    except (SyntaxError, ValueError, UnicodeError) as exc:  # ValueError: NUL bytes in the source
        report_exception(exc, skip_frames=99)
        return 1
    rc = 0
    try:
        exec(compiled, namespace)
    except SystemExit as exc:
        rc = exit_code(exc)
    except BaseException as exc:
        report_exception(exc)
        rc = 1
    try:  # what interpreter shutdown does: join non-daemon threads, then atexit handlers
        threading = sys.modules.get("threading")  # imported by user code if it made threads; the zygote avoids
        if threading is not None:  # importing it, since its at-fork hook would run in every child
            threading._shutdown()
        _run_exitfuncs()
    except SystemExit as exc:
        rc = exit_code(exc)
    except BaseException as exc:
        report_exception(exc, skip_frames=0)
    flush_streams()
    return rc


def repl(cell_fd: int, done_fd: int, workdir: str) -> int:
    """Session interpreter: read length-prefixed cells, run each in one persistent namespace.

    After each cell, flushes stdio and writes "<return code>\\n" on `done_fd` (0 ok, 1 uncaught exception,
    SystemExit's code otherwise). Exits when the server closes the cell pipe.
    """
    namespace = new_main_module(workdir)
    _write(done_fd, b"ready\n")
    count = 0
    while header := _read_exact(cell_fd, 8):
        source = _read_exact(cell_fd, int.from_bytes(header, "big")).decode("utf-8", "replace")
        count += 1
        name = f"<cell-{count}>"
        linecache.cache[name] = (len(source), None, source.splitlines(True), name)
        rc = 0
        try:
            exec(compile(source, name, "exec"), namespace)
        except SystemExit as exc:
            rc = exit_code(exc)
        except SyntaxError as exc:
            report_exception(exc, skip_frames=99, cells=True)
            rc = 1
        except BaseException as exc:
            report_exception(exc, cells=True)
            rc = 1
        flush_streams()
        _write(done_fd, f"{rc}\n".encode())
    return 0


def _read_exact(fd: int, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = _read(fd, n - len(buf))
        if not chunk:
            break
        buf += chunk
    return bytes(buf)


def fetch_files(workdir: str, paths: tuple[str, ...], cap: int, out_fd: int, amap: AbsoluteMap | None = None) -> None:
    """Read requested files back (after the run, as the run's uid), confined to `workdir`; JSON to `out_fd`.

    Output: {"files": {path: base64}, "skipped": [path, ...]} — missing, non-regular, outside-the-workdir or
    over-the-cap files are left out (SandboxFusion omits missing files).
    """
    import base64  # in the fetch helper only: every run would otherwise fork with them
    import json

    found: dict[str, str] = {}
    skipped: list[str] = []
    total = 0
    for rel in paths:
        try:
            where, root = host_path(rel, workdir, amap)
        except ValueError:
            skipped.append(rel)
            continue
        full, real_root = os.path.realpath(where), os.path.realpath(root)
        if not full.startswith(real_root + os.sep):
            skipped.append(rel)
            continue
        try:
            fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        with open(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                skipped.append(rel)
                continue
            data = f.read(cap - total + 1)
        if total + len(data) > cap:
            skipped.append(rel)
            continue
        total += len(data)
        found[rel] = base64.b64encode(data).decode()
    blob = json.dumps({"files": found, "skipped": skipped}).encode()
    view = memoryview(blob)
    while view:
        view = view[os.write(out_fd, view):]


def prepare(*, payload_fd: int | None, stdio: tuple[int, int, int], keep: tuple[int, ...], workdir: str,
            limits: Limits, uid: int | None, reset_signals: bool = True, fetch_paths: tuple[str, ...] = (),
            amap: AbsoluteMap | None = None) -> str:
    """Everything before user code; returns the code to run ("" for sessions). Raises on any setup failure.

    `keep`: descriptors that survive besides 0-2 (the setup pipe; for sessions also the cell and done pipes).
    fetch_paths, amap: absolute paths of `files` and `fetch_paths` are mapped (`sandbox.isolation.file_paths`);
    amap None: no private mount tree, so they are refused.
    reset_signals: the zygote used a SIGCHLD handler (no pidfd support); restore defaults first. The text
    streams sys.stdin/out/err were built once in the zygote and already target fds 0-2.
    """
    os.setsid()
    if reset_signals:
        reset_process_state()
    code, files = "", {}
    if payload_fd is not None:
        code, files = decode_payload(read_all(payload_fd))
    check_absolute((*files, *fetch_paths), amap)
    make_workdir(workdir, code, files, uid, amap)
    bind_absolute(workdir, (*files, *fetch_paths), uid, amap)
    redirect_stdio(*stdio, keep=keep)
    if uid is not None:
        drop_privileges(uid)
    apply_rlimits(limits, nproc=uid is not None)
    os.umask(0o077)  # files a run leaves in a shared /tmp (no mount layer) stay unreadable to other slots
    os.chdir(workdir)  # the environment (clean_environ of this workdir) was set once by the zygote: inherited
    return code


def set_environ(workdir: str) -> None:
    """Make the process environment exactly `clean_environ(workdir)`. The zygote calls it once: every child it
    forks inherits it, and a child that edited its environment leaves the zygote's untouched."""
    env = clean_environ(workdir)
    for key in set(os.environ) - set(env):
        del os.environ[key]
    for key, value in env.items():
        if os.environ.get(key) != value:
            os.environ[key] = value
