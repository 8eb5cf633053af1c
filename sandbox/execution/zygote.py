"""Zygote: a pre-imported, single-threaded interpreter that forks one sandboxed child per run.

Started by `sandbox.execution.zygote_handle.ZygoteProcess` as ``python -I -S -c "...zygote.main(fd)"`` with a
whitelisted environment and one inherited descriptor (its control socket). At start it enters the requested
namespaces — each layer tried on its own, failures reported, never fatal — then imports the preload modules and
answers ``("ready", info)``.

Layers (see reference/sandbox.md §5): "net" (new network namespace: no interface but its loopback, brought up),
"pid" (new PID namespace; the zygote becomes its init, so ``kill(-1)`` ends every process of a run and /proc is private),
"mount" (private mount tree: every mount remounted read-only, fresh size-capped tmpfs on /tmp, /dev/shm, /var/tmp,
a new /proc), "uid" (runs switch to a dedicated slot uid; needs root), "seccomp" (a syscall filter compiled
here once, installed by each child as its last step before user code: `sandbox.isolation.seccomp`; with
`seccomp_once`, installed in the zygote itself at the end of its set-up and inherited by every child, which then
cannot bind absolute paths into its run, so such a zygote refuses them). As non-root,
namespaces come from a user namespace where the kernel allows it.

Run lifecycle: fork → child sets itself up (`sandbox.execution.child`) → wait for exit, a "kill" message or the wall-clock
deadline → kill the whole tree → reap → optional fetch helper (as the run's uid) → delete the workdir and wipe the
private tmp dirs → ``("exited", RunReport)``. A "session" zygote does the same for one long-lived interpreter.

A zygote ends on ``("exit", None)`` or when its server closes the control socket (shut down or died, whether or
not it read our last report): a normal end, printed nowhere.
"""

from __future__ import annotations

import _socket
import atexit
import os
import select
import signal
import sys
import time

from sandbox.execution import child
from sandbox.execution.preload import preload
from sandbox.execution.protocol import RunReport, RunSpec, SessionSpec, ZygoteConfig, recv, send
from sandbox.isolation import linux, seccomp
from sandbox.isolation.file_paths import AbsoluteMap

TMP_DIRS = ("/tmp", "/dev/shm", "/var/tmp")
PRIVATE_ROOT = "/tmp/.alprl"  # workdir root inside the private /tmp when the mount layer is active
REAP_GRACE_S = 5.0


def _log(msg: str) -> None:
    try:
        os.write(2, f"[sandbox zygote {os.getpid()}] {msg}\n".encode())
    except OSError:
        pass


def importable_paths() -> list[str]:
    """What sandboxed code must be able to read: the interpreter, its venv and sys.path, and of this project only
    the `sandbox` package. The project root itself (on sys.path so the zygote could boot) is left out: when it is
    closed to other users (e.g. a 0700 `mktemp -d` clone) exposing it whole would keep it closed, and the venv
    inside it unreachable for the slot uid."""
    package = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))  # sandbox/, above this room
    project = os.path.dirname(package)
    paths = [p for p in sys.path if os.path.realpath(p or ".") != project]
    return [sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable)), *paths, package]


class Zygote:
    def __init__(self, sock: _socket.socket, config: ZygoteConfig):
        self.sock = sock
        self.config = config
        self.active: set[str] = set()
        self.errors: dict[str, str] = {}
        self.uid: int | None = None
        self.workdir = ""
        self.tmp_dirs: tuple[str, ...] = ()
        self.exposed: list[str] = []
        self.filter: seccomp.Filter | None = None  # set while each child must install it
        self.seccomp_where = "run"  # where the filter is loaded: "run" (each child) or "zygote" (once, inherited)
        self.amap: AbsoluteMap | None = None

    # ---- start-up -------------------------------------------------------------------------------------
    def enter_namespaces(self) -> None:
        wanted, root = self.config.layers, os.geteuid() == 0
        if "uid" in wanted:
            if root and self.config.uid:
                self.uid = self.config.uid
                self.active.add("uid")
            else:
                self.errors["uid"] = "needs the server to run as root"
        if wanted & {"net", "pid", "mount"} and not root:
            try:
                uid, gid = os.getuid(), os.getgid()
                linux.unshare(linux.CLONE_NEWUSER)
                linux.write_id_maps(uid, gid)
                self.active.add("userns")
            except OSError as exc:
                self.errors["userns"] = str(exc)
        for layer, flag in (("net", linux.CLONE_NEWNET), ("mount", linux.CLONE_NEWNS),
                            ("pid", linux.CLONE_NEWPID)):
            if layer in wanted:
                try:
                    linux.unshare(flag)
                    self.active.add(layer)
                except OSError as exc:
                    self.errors[layer] = str(exc)
        if "net" in self.active:
            try:  # SandboxFusion parity: a run may serve and connect on 127.0.0.1 / localhost (still no route out)
                linux.loopback_up()
            except OSError as exc:
                self.errors["net.loopback"] = str(exc)
        if "pid" in self.active:
            self._become_init()

    def _become_init(self) -> None:
        """unshare(CLONE_NEWPID) applies to children: fork once; the parent stays as a shim that mirrors exit."""
        pid = os.fork()
        if pid == 0:
            linux.set_parent_death_signal(signal.SIGKILL)  # shim killed → we die → the whole namespace dies
            return
        self.sock.close()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, lambda *_: os.kill(pid, signal.SIGKILL))
        _, status = os.waitpid(pid, 0)
        os._exit(os.waitstatus_to_exitcode(status) & 0xFF)

    def setup_filesystem(self) -> None:
        if "mount" in self.active:
            try:
                linux.mount(None, "/", None, linux.MS_REC | linux.MS_PRIVATE)
                failed = linux.readonly_remount_all(skip=("/proc", "/sys", "/dev"))
                if failed:
                    self.errors["mount.readonly"] = "; ".join(failed[:5])
                needed = importable_paths()
                if self.uid is not None:  # e.g. Python under /root (0700): let the slot uid import the stdlib
                    self.exposed = linux.expose_through(needed)
                if "pid" in self.active:
                    linux.mount("proc", "/proc", "proc", linux.MS_NOSUID | linux.MS_NODEV | linux.MS_NOEXEC)
                size = f"size={self.config.tmpfs_mb}m,mode=1777"
                self.tmp_dirs = tuple(d for d in TMP_DIRS if os.path.isdir(d))
                for d in self.tmp_dirs:
                    # An interpreter or venv living under /tmp (e.g. a CI clone) stays importable, read-only.
                    self.exposed += linux.mount_tmpfs_keeping(d, size, needed)
                os.mkdir(PRIVATE_ROOT, 0o711)
            except OSError as exc:
                self.active.discard("mount")
                self.errors["mount"] = str(exc)
        root = PRIVATE_ROOT if "mount" in self.active else self.config.workdir_root
        self.workdir = os.path.join(root, f"{self.config.kind[0]}{self.config.slot}")
        self.program = os.path.join(self.workdir, child.PROGRAM)
        # what a sweep of each private tmp dir leaves: our workdir root and the paths to a kept interpreter
        self.tmp_kept = {d: _kept_names(d, [PRIVATE_ROOT, *self.exposed]) for d in self.tmp_dirs}
        if "pid" not in self.active:
            linux.set_child_subreaper()  # orphans come back to us, so nothing escapes the reap loop

    def preload(self) -> list[str]:
        return preload(self.config.preload, self.errors)

    def setup_seccomp(self) -> None:
        """Compile the syscall filter once; each child installs it as its last step before user code (or, with
        `seccomp_once`, `install_seccomp_here` loads it into the zygote at the end of its set-up)."""
        if "seccomp" in self.config.layers:
            try:
                self.filter = seccomp.Filter.build()
                if not self.config.seccomp_once:
                    self.filter.probe()
                self.active.add("seccomp")
            except seccomp.SeccompUnavailable as exc:
                self.filter = None
                self.errors["seccomp"] = str(exc)

    def install_seccomp_here(self) -> None:
        """`seccomp_once`: filter the zygote itself, after everything it sets up (it makes no mount, namespace or
        other denied call from here on), so every child inherits the filter without paying for an install."""
        if self.filter is None or not self.config.seccomp_once:
            return
        try:
            self.filter.install()
            self.filter = None  # nothing left for the children to install
            self.seccomp_where = "zygote"
        except OSError as exc:
            self.active.discard("seccomp")
            self.errors["seccomp"] = f"the kernel refused to load the filter: {exc}"

    # ---- serving --------------------------------------------------------------------------------------
    def serve(self, loaded: list[str]) -> int:
        linux.set_no_new_privs()  # inherited by every child, irreversible: no setuid-binary privilege gain
        self.setup_seccomp()
        atexit._clear()  # handlers registered by preloaded modules must not run in every child
        child.set_environ(self.workdir)  # once here: the workdir is the same for every run of this zygote
        # the same for every run: computed once; none under a zygote-wide filter (a per-run bind mount is denied)
        self.amap = None if self.config.seccomp_once else self.absolute_map()
        child.rebuild_sys_streams()  # once here; children inherit them (fds 0-2 are re-pointed before use)
        # One epoll for the zygote's life, used directly: every page a wait touches is copied after each fork
        self.poller = select.epoll()
        self.poller.register(self.sock.fileno(), select.EPOLLIN)
        self.use_pidfd = linux.pidfd_works()
        if not self.use_pidfd:  # kernel < 5.3 or seccomp: learn about exits through SIGCHLD instead
            self.wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
            self.poller.register(self.wake_r, select.EPOLLIN)
            signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
            signal.signal(signal.SIGCHLD, lambda *_: None)
        described = self.filter.describe() if self.filter else None
        self.install_seccomp_here()  # last: every call above may need what the filter denies
        info = {"pid": os.getpid(), "layers": sorted(self.active), "errors": self.errors, "preloaded": loaded,
                "uid": self.uid, "euid": os.geteuid(), "workdir": self.workdir, "exposed": self.exposed,
                "seccomp": {**described, "installed": self.seccomp_where} if "seccomp" in self.active else None,
                "absolute_paths": self.amap is not None}
        try:
            send(self.sock, "ready", info)
        except OSError:  # the server went away while we were starting
            return 0
        while True:
            try:
                kind, payload, fds = recv(self.sock)
            except EOFError:  # the server closed its end (shut down or died): a normal end, said nowhere
                return 0
            if kind == "run":
                self.run(payload, fds)
            elif kind == "start":
                self.session(payload, fds)
                return 0
            elif kind == "exit":
                return 0
            else:  # a late "kill" for a run that already ended
                for fd in fds:
                    os.close(fd)

    def _fork(self, prepare_kwargs: dict, body) -> tuple[int, int]:
        """Fork a child that runs `child.prepare` then `body(code)`; returns (pid, setup pipe read end)."""
        setup_r, setup_w = os.pipe()
        exit_, write = child._exit, child._write  # frame locals: out of reach of a run that patches modules
        pid = os.fork()
        if pid == 0:
            try:
                code = child.prepare(keep=(setup_w, *prepare_kwargs.pop("keep", ())), workdir=self.workdir,
                                     uid=self.uid, reset_signals=not self.use_pidfd, **prepare_kwargs)
                if self.filter is not None:  # last layer: after set-up (which may mount, chdir, setuid)
                    self.filter.install()
            except BaseException as exc:
                try:
                    write(setup_w, f"err:{type(exc).__name__}: {exc}".encode()[:4000])
                finally:
                    exit_(125)
            os.write(setup_w, b"ok")
            os.close(setup_w)
            rc = 1
            try:  # from here on user code may have patched os, sys and builtins: only child's private references
                rc = body(code)
            finally:
                exit_(rc)
        os.close(setup_w)
        return pid, setup_r

    def absolute_map(self) -> AbsoluteMap | None:
        """How runs may use absolute file paths (`sandbox.isolation.file_paths`): only with our private mount tree."""
        if "mount" not in self.active:
            return None
        return AbsoluteMap((os.path.dirname(self.workdir), *importable_paths()), self.tmp_dirs)

    def _wait(self, pid: int, deadline: float | None) -> str | None:
        """Block until `pid` exits (reason None), a kill message arrives, or the deadline passes."""
        pidfd = os.pidfd_open(pid) if self.use_pidfd else None  # readable once the process has exited
        if pidfd is not None:
            self.poller.register(pidfd, select.EPOLLIN)
        try:  # without a pidfd, SIGCHLD wakes the wait (through wake_r) and waitid tells whether it was `pid`
            while pidfd is not None or os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
                timeout = -1.0 if deadline is None else deadline - time.monotonic()
                if deadline is not None and timeout <= 0:
                    return "timeout"
                for fd, _ in self.poller.poll(timeout):
                    if fd == pidfd:
                        return None
                    if fd == self.sock.fileno():
                        try:
                            kind, payload, fds = recv(self.sock)
                        except EOFError:
                            return "server"
                        for received in fds:
                            os.close(received)
                        if kind in ("kill", "exit"):
                            return str(payload or "request")
                    else:
                        linux.drain(self.wake_r)
            return None
        finally:
            if pidfd is not None:
                self.poller.unregister(pidfd)
                os.close(pidfd)

    def run(self, spec: RunSpec, fds: list[int]) -> None:
        payload_r, stdin_r, out_w, err_w, *rest = fds
        fetch_w = rest[0] if rest else None
        start = time.monotonic()
        pid, setup_r = self._fork({"payload_fd": payload_r, "stdio": (stdin_r, out_w, err_w), "limits": spec.limits,
                                   "fetch_paths": spec.fetch_files, "amap": self.amap},
                                  lambda code: child.run_main(code, self.workdir))
        for fd in (payload_r, stdin_r, out_w, err_w):
            os.close(fd)
        reason = self._wait(pid, start + spec.limits.timeout_s)
        wall = time.monotonic() - start
        rc = self._end_tree(pid)
        setup_error = _setup_error(setup_r, rc, reason)
        if fetch_w is not None:
            if not setup_error and spec.fetch_files:
                self._fetch(spec, fetch_w)
            os.close(fetch_w)
        report = RunReport(rc, wall, reason, setup_error, cleanup_error=self._cleanup())
        try:
            send(self.sock, "exited", report)
        except OSError:
            pass  # server gone: the next recv sees EOF and we exit

    def session(self, spec: SessionSpec, fds: list[int]) -> None:
        cell_r, out_w, err_w, done_w = fds
        devnull = os.open(os.devnull, os.O_RDONLY)
        start = time.monotonic()
        pid, setup_r = self._fork({"payload_fd": None, "stdio": (devnull, out_w, err_w), "keep": (cell_r, done_w),
                                   "limits": spec.limits},
                                  lambda _code: child.repl(cell_r, done_w, self.workdir))
        for fd in (cell_r, out_w, err_w, done_w, devnull):
            os.close(fd)
        reason = self._wait(pid, None)
        rc = self._end_tree(pid)
        report = RunReport(rc, time.monotonic() - start, reason, setup_error=_setup_error(setup_r, rc, reason),
                           cleanup_error=self._cleanup())
        try:
            send(self.sock, "exited", report)
        except OSError:
            pass

    # ---- ending a run ---------------------------------------------------------------------------------
    def _end_tree(self, pid: int) -> int:
        """Kill every process of the run, reap them all; returns the main process's return code."""
        if "pid" in self.active and os.getpid() == 1:
            linux.kill_quietly(-1)  # init of our own PID namespace: this reaches exactly the run's processes
        else:
            linux.kill_quietly(-pid)  # the child called setsid(), so its pgid is its pid
        rc = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        if "pid" not in self.active:
            if self.uid is not None:
                self._kill_uid()
            if linux.has_children():  # only then pay for a /proc scan (re-parented orphans, subreaper)
                for stray in linux.children_of(os.getpid()):
                    linux.kill_quietly(stray)
        self._reap_all()
        return rc

    def _kill_uid(self) -> None:
        """SIGKILL every process of the slot uid (catches setsid'd, re-parented daemons) from a helper.

        kill(-1) returns success whenever *any* other process exists (EPERM is not reported), so its result
        cannot tell "nothing left"; a second pass covers a fork that raced the first, the reap loop the rest.
        """
        helper = os.fork()
        if helper == 0:
            try:
                child.drop_privileges(self.uid)
                os.kill(-1, signal.SIGKILL)  # as the slot uid: reaches only that uid's processes
                os.kill(-1, signal.SIGKILL)
            finally:
                os._exit(0)
        os.waitpid(helper, 0)

    def _reap_all(self) -> None:
        give_up = time.monotonic() + REAP_GRACE_S
        while time.monotonic() < give_up:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:  # children left but none dead yet: re-kill (a fork may have raced the first kill)
                if "pid" in self.active and os.getpid() == 1:
                    linux.kill_quietly(-1)
                else:
                    for stray in linux.children_of(os.getpid()):
                        linux.kill_quietly(stray)
                time.sleep(0.001)
        _log("processes survived the kill for 5 s (uninterruptible sleep?)")

    def _fetch(self, spec: RunSpec, fetch_w: int) -> None:
        helper = os.fork()
        if helper == 0:
            code = 1
            try:
                if not self.use_pidfd:
                    child.reset_process_state()
                if self.uid is not None:
                    child.drop_privileges(self.uid)
                child.fetch_files(self.workdir, spec.fetch_files, spec.max_fetch_bytes, fetch_w, self.amap)
                code = 0
            finally:
                os._exit(code)
        if self._wait(helper, time.monotonic() + 10.0) is not None:
            linux.kill_quietly(helper)
        os.waitpid(helper, 0)

    def _cleanup(self) -> str:
        """Delete the workdir and whatever the run left in the world-writable tmp dirs.

        The usual case, a run that left only its program, costs five syscalls and few Python objects: this runs
        after every fork, where each page the zygote writes is copied."""
        problems = []
        try:
            os.unlink(self.program)
            os.rmdir(self.workdir)
        except OSError:
            if os.path.lexists(self.workdir):
                import shutil  # only for a run that left more than its program (kept out of every fork till then)

                shutil.rmtree(self.workdir, onerror=lambda f, p, e: problems.append(f"{p}: {e[1]}"))
            if os.path.lexists(self.workdir):
                problems.append(f"{self.workdir} still exists")
        if "mount" in self.active:  # our own tmpfs: everything but what was there before any run goes
            for d, kept in self.tmp_kept.items():
                try:
                    names = os.listdir(d)
                except OSError:
                    continue
                for name in names:
                    if name not in kept:
                        _remove(os.path.join(d, name), problems)
        elif self.uid is not None:  # the host's shared dirs: only what this run's uid created
            for d in TMP_DIRS:
                try:
                    entries = list(os.scandir(d))
                except OSError:
                    continue
                for entry in entries:
                    try:
                        if entry.stat(follow_symlinks=False).st_uid == self.uid:
                            _remove(entry.path, problems)
                    except OSError as exc:
                        problems.append(f"{entry.path}: {exc.strerror}")
        return "; ".join(problems)


def _remove(path: str, problems: list[str]) -> None:
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            import shutil  # as in Zygote._cleanup

            shutil.rmtree(path)
        else:
            os.unlink(path)
    except OSError as exc:
        problems.append(f"{path}: {exc.strerror}")


def _kept_names(directory: str, kept: list[str]) -> frozenset[str]:
    """The entries of `directory` that hold one of the `kept` paths (the first component below it)."""
    prefix = directory.rstrip("/") + "/"
    return frozenset(k[len(prefix):].split("/", 1)[0] for k in kept if k.startswith(prefix) and len(k) > len(prefix))


def _setup_error(setup_r: int, rc: int, reason: str | None) -> str:
    try:
        status = os.read(setup_r, 4096)
    finally:
        os.close(setup_r)
    if status.startswith(b"ok"):
        return ""
    if status.startswith(b"err:"):
        return status[4:].decode("utf-8", "replace")
    if reason == "timeout":
        return ""  # killed by the deadline while still setting up: reported as a time limit
    return f"run process ended during setup (return code {rc})"


def main(fd: int) -> int:
    sock = _socket.socket(fileno=fd)
    try:
        kind, config, _ = recv(sock)
    except EOFError:  # the server went away before sending the config: nothing to serve, nothing to report
        return 0
    if kind != "config":
        _log(f"expected a config message, got {kind!r}")
        return 2
    zygote = Zygote(sock, config)
    zygote.enter_namespaces()  # with "pid", only the namespace's init returns from here
    zygote.setup_filesystem()
    return zygote.serve(zygote.preload())


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))
