"""Pure execution core: a warm pool of zygotes that fork one isolated child per run (no FastAPI here).

Each of `workers` slots owns a light zygote (stdlib preloaded) and a heavy one (numpy, sympy preloaded); code
that names a heavy module forks from the heavy zygote, everything else from the light one, because forking and
tearing down a larger interpreter costs more (≈ 2 ms more here) — the choice changes speed, never isolation.

What IS isolated, per layer (each detected at start, reported by `Pool.info()` / `/healthz`; tier names from
reference/sandbox.md §5):
- always (T0): own session and process group, killed as a whole (plus a subreaper sweep) at the wall-clock
  deadline or when the main process exits; rlimits CPU, AS (memory), FSIZE, NOFILE, CORE=0, MEMLOCK=0;
  no_new_privs; a clean whitelisted environment; a fresh 0700 workdir (cwd, HOME, TMPDIR) deleted afterwards;
  every inherited descriptor closed (user code cannot reach the API's sockets); stdout/stderr read concurrently
  with byte caps; request data passed through pipes, never kept by the long-lived zygote.
- "uid" (server is root, T1): each slot runs code as its own uid (uid_base + slot) with no groups, so it cannot
  signal or read the server or other runs; RLIMIT_NPROC per slot uid bounds fork bombs; leftovers are killed by uid.
- "net" (T2): a network namespace with only its own loopback (up, as in SandboxFusion): a run may serve and
  connect on 127.0.0.1; any other connect fails at once (ENETUNREACH), the host's loopback is not this one.
- "pid" (T2): the zygote is init of a PID namespace, so kill(-1) ends every process of a run (double-forked
  daemons included) and user code cannot see or signal any outside process.
- "mount" (T2): private mount tree, everything remounted read-only, fresh size-capped tmpfs on /tmp, /dev/shm,
  /var/tmp (wiped after each run), a private /proc.
- "seccomp" (libseccomp present): a syscall filter over every run (the light zygote loads it into itself once
  and its children inherit it; the heavy zygote's children install it right before user code); ptrace,
  process_vm_*, mount/unshare/setns, keyctl, bpf, perf_event_open, userfaultfd, io_uring, kexec, module loading
  and the like fail with EPERM (list: `sandbox.isolation.seccomp.DENIED_SYSCALLS`; `info()["seccomp"]`).
What is NOT isolated: the kernel (the seccomp filter shrinks its reachable surface; no gVisor/VM: a kernel exploit
through an allowed call escapes); memory is bounded
by RLIMIT_AS, not a cgroup (page cache and tmpfs use are not counted against it); without "mount", world-readable
host files stay readable and world-writable dirs writable (files of the slot uid are removed after each run);
without "net", the network is open; without "uid" and "pid" (T0), code runs as the server's user and can signal or
read the server — the service refuses to start there unless ALPRL_SANDBOX_ALLOW_UNSAFE=1.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import queue
import re
import shutil
import sys
import threading
from concurrent.futures import Executor
from dataclasses import dataclass, field

from sandbox.execution.protocol import Limits, RunSpec, ZygoteConfig
from sandbox.execution.supervision import RawRun, WorkerFailure
from sandbox.execution.zygote_handle import ZygoteProcess
from sandbox.isolation import linux
from sandbox.isolation.file_paths import absolute_paths
from sandbox.settings import RUN_TIMEOUT_S, SERVER_DEFAULT_MEMORY, Settings, SettingsError, tier_of
from sandbox.types import ExecutionResult

log = logging.getLogger("sandbox")


class UnsafeSandbox(RuntimeError):
    """Neither a uid switch nor namespaces are available and unsafe mode was not allowed."""


class SandboxStartError(RuntimeError):
    """The pool started but cannot run code (e.g. the slot uid cannot read the Python installation)."""


# Imports modules no zygote preloads: proves the run's uid can read the interpreter's files from disk.
PROBE_CODE = "import csv, encodings.idna, wave\nprint('ok')"


@dataclass(frozen=True)
class RunRequest:
    """One stateless run. timeout_s: wall clock, clamped to the server maximum; memory_limit_mb ≤ 0 → default."""

    code: str
    timeout_s: float = RUN_TIMEOUT_S
    memory_limit_mb: int = SERVER_DEFAULT_MEMORY
    stdin: str | bytes = b""
    files: dict[str, bytes] = field(default_factory=dict)
    fetch_files: tuple[str, ...] = ()
    max_output_bytes: int | None = None


def limits_for(s: Settings, req: RunRequest) -> Limits:
    """Clamp a request's limits to the server's: timeout to (0, max_run_timeout_s]; memory ≤ 0 → default."""
    timeout = min(max(float(req.timeout_s), 0.001), s.max_run_timeout_s)
    memory = s.default_memory_mb if req.memory_limit_mb is None or req.memory_limit_mb <= 0 else \
        min(max(int(req.memory_limit_mb), 32), s.max_memory_mb)
    return Limits(timeout_s=timeout, memory_mb=memory, max_file_mb=s.max_file_mb, max_open_files=s.max_open_files,
                  max_processes=s.max_processes, cpu_s=math.ceil(timeout) + 1)


def to_result(raw: RawRun) -> ExecutionResult:
    """Map a zygote report onto ExecutionResult (SandboxError only for failures of the sandbox itself)."""
    rep, out, err = raw.report, raw.stdout, raw.stderr
    common = {"stdout": out.text(), "wall_time_s": rep.wall_s, "stdout_truncated": out.truncated,
              "stderr_truncated": err.truncated, "files": raw.files}
    if rep.setup_error:
        return ExecutionResult("SandboxError", **{**common, "stderr": f"sandbox setup failed: {rep.setup_error}"})
    if rep.killed_reason == "timeout":
        return ExecutionResult("TimeLimitExceeded", stderr=err.text(), return_code=None, killed_reason="timeout",
                               **common)
    if rep.killed_reason in ("server", "request"):
        return ExecutionResult("SandboxError", stderr=f"run aborted ({rep.killed_reason})", **common)
    status = "Success" if rep.return_code == 0 else "Failed"
    return ExecutionResult(status, stderr=err.text(), return_code=rep.return_code,
                           killed_reason=rep.killed_reason, **common)


class _Slot:
    def __init__(self, index: int, uid: int | None):
        self.index, self.uid = index, uid
        self.light: ZygoteProcess | None = None
        self.heavy: ZygoteProcess | None = None
        self.heavy_done = threading.Event()  # set once the heavy zygote started (or failed to)


class Pool:
    """`workers` slots of warm zygotes; `run()` is blocking and thread-safe (one run per slot at a time)."""

    def __init__(self, settings: Settings | None = None, *, allow_unsafe: bool | None = None):
        self.settings = s = settings or Settings.from_env()
        self._requested = s.requested_layers()
        self._heavy_re = _word_regex(s.heavy_triggers) if s.preload_heavy.strip() else None
        self._free: queue.Queue[_Slot] = queue.Queue()
        self._slots: list[_Slot] = []
        self._closed = False
        self.respawns = 0
        self.runs = 0
        os.makedirs(s.workdir_root, mode=0o711, exist_ok=True)
        root = os.geteuid() == 0
        self.uses_uid = root and "uid" in self._requested
        uids = [s.uid_base + i for i in range(s.worker_count)] if self.uses_uid else []
        try:
            for i in range(s.worker_count):
                slot = _Slot(i, uids[i] if uids else None)
                slot.light = self._spawn(slot, "light")
                self._slots.append(slot)
            self.info_first = self._slots[0].light.info
            allowed = s.allow_unsafe if allow_unsafe is None else allow_unsafe
            self._check_safety(allowed)
            if uids:  # session uids follow the slot uids (sandbox.execution.sessions)
                check_uids_unused(set(range(s.uid_base, s.uid_base + s.worker_count + s.max_sessions)),
                                  fatal="pid" not in self.info_first["layers"])
            for slot in self._slots:
                self._free.put(slot)
            self._probe()
        except BaseException:
            self.close()
            raise
        for slot in self._slots:
            threading.Thread(target=self._start_heavy, args=(slot,), daemon=True).start()

    # ---- zygote management ----------------------------------------------------------------------------
    def _spawn(self, slot: _Slot, which: str) -> ZygoteProcess:
        """A `which` ("light" or "heavy") zygote for `slot`."""
        s, preload = self.settings, self._preload_of(which)
        # The light zygote filters itself once (saves the kernel's ~0.3 ms filter install in every run) where a
        # heavy zygote exists to take the runs that need per-run mounts (absolute file paths).
        cfg = ZygoteConfig(slot=slot.index, uid=slot.uid, layers=self._requested,
                           preload=tuple(m.strip() for m in preload.split(",") if m.strip()),
                           tmpfs_mb=s.tmpfs_mb, workdir_root=s.workdir_root,
                           seccomp_once=which == "light" and self._heavy_re is not None)
        return ZygoteProcess(cfg)

    def _preload_of(self, which: str) -> str:
        """Modules a `which` ("light" or "heavy") zygote imports before it forks."""
        s = self.settings
        return f"{s.preload},{s.preload_heavy}" if which == "heavy" else s.preload

    def _start_heavy(self, slot: _Slot) -> None:
        try:
            if self._heavy_re is not None and not self._closed:
                heavy = self._spawn(slot, "heavy")
                if self._closed:  # the pool closed while this zygote was starting
                    heavy.close(timeout_s=0.5)
                else:
                    slot.heavy = heavy
        except WorkerFailure as exc:
            log.warning("heavy zygote for slot %d unavailable (%s); heavy code uses the light one", slot.index, exc)
        finally:
            slot.heavy_done.set()

    def _check_safety(self, allowed: bool) -> None:
        active = set(self.info_first["layers"])
        for name, reason in self.info_first["errors"].items():
            log.warning("sandbox layer %s unavailable: %s", name, reason)
        log.info("sandbox isolation: tier %s, layers %s", tier_of(active), sorted(active) or "none")
        if self.settings.require_seccomp and "seccomp" not in active:
            raise SandboxStartError("SANDBOX_REQUIRE_SECCOMP=1 but the seccomp layer cannot load: "
                                    f"{self.info_first['errors'].get('seccomp', 'not requested')}. Install "
                                    "libseccomp2 (and run on a kernel with seccomp filters), or unset the requirement")
        if not active & {"uid", "pid", "net", "userns"}:
            if not allowed:
                raise UnsafeSandbox("no uid switch and no namespaces are available: user code would run as the "
                                    "server's user. Run as root, allow user namespaces, use Docker, or set "
                                    "ALPRL_SANDBOX_ALLOW_UNSAFE=1 on a trusted developer machine")
            log.warning("ALPRL_SANDBOX_ALLOW_UNSAFE=1: running untrusted code WITHOUT uid or namespace isolation")

    def _probe(self) -> None:
        result = self.run(RunRequest(PROBE_CODE, timeout_s=30.0))
        if result.stdout != "ok\n":
            detail = (result.stderr.strip().splitlines() or [result.status])[-1]
            raise SandboxStartError(
                f"sandboxed code cannot import the standard library ({detail}). With the uid layer and no mount "
                f"layer the Python installation ({sys.base_prefix}) must be readable by other users; enable the "
                "mount layer (run as root with namespaces) or install Python in a world-readable location")

    def _replace(self, slot: _Slot, which: str) -> None:
        """Runs in a background thread: swap a broken or worn-out zygote, then free the slot again."""
        old = getattr(slot, which)
        try:
            if old is not None:
                old.close(timeout_s=0.5)
            setattr(slot, which, None if self._closed else self._spawn(slot, which))
            self.respawns += 1
        except WorkerFailure as exc:
            log.error("could not restart the %s zygote of slot %d: %s", which, slot.index, exc)
            setattr(slot, which, None)
        finally:
            if not self._closed:
                self._free.put(slot)

    # ---- running ------------------------------------------------------------------------------------------
    def run(self, req: RunRequest, *, wait_s: float | None = None) -> ExecutionResult:
        """Run one request; waits up to `wait_s` (default: queue_timeout_s) for a free slot."""
        if self._closed:
            return ExecutionResult("SandboxError", stderr="sandbox pool is closed")
        try:
            slot = self._free.get(timeout=self.settings.queue_timeout_s if wait_s is None else wait_s)
        except queue.Empty:
            return ExecutionResult("SandboxError", stderr="no sandbox worker became free in time")
        return self._run_on(slot, req)

    async def run_async(self, req: RunRequest, threads: Executor) -> ExecutionResult:
        """`run` for an asyncio caller: on the loop itself when a slot is free and its zygote is ready (no thread
        hand-off); otherwise, where getting there would block (no free slot, a zygote still starting or to be
        restarted), the same in one of `threads`. Let it finish (shield it from cancellation)."""
        loop = asyncio.get_running_loop()
        if self._closed:
            return ExecutionResult("SandboxError", stderr="sandbox pool is closed")
        try:
            slot = self._free.get_nowait()
        except queue.Empty:
            return await loop.run_in_executor(threads, self.run, req)
        which, zygote = self._pick_ready(slot, req)
        if zygote is None:
            return await loop.run_in_executor(threads, self._run_on, slot, req)
        try:
            args, caps = self._run_args(req)
            raw = await zygote.run_async(*args, **caps)
            return self._finish(slot, raw)
        except WorkerFailure as exc:
            log.error("slot %d: %s", slot.index, exc)
            return ExecutionResult("SandboxError", stderr=f"sandbox worker failed: {exc}")
        finally:
            self._release(slot, which)

    def _run_on(self, slot: _Slot, req: RunRequest) -> ExecutionResult:
        """Run `req` on `slot` (taken from the free queue) in this thread, then free the slot."""
        which = "light"
        try:
            which, zygote = self._pick(slot, req)
            if zygote is None:
                return ExecutionResult("SandboxError", stderr=(
                    "absolute file paths run in the heavy zygote, which cannot start (see the server log); use "
                    "relative paths" if which == "heavy" else "sandbox worker unavailable (restarting)"))
            args, caps = self._run_args(req)
            return self._finish(slot, zygote.run(*args, **caps))
        except WorkerFailure as exc:
            log.error("slot %d: %s", slot.index, exc)
            return ExecutionResult("SandboxError", stderr=f"sandbox worker failed: {exc}")
        finally:
            self._release(slot, which)

    def _run_args(self, req: RunRequest) -> tuple[tuple, dict[str, int]]:
        """`ZygoteProcess.run`'s arguments for `req`: (positional, output caps), its limits clamped to the server's."""
        stdin = req.stdin.encode("utf-8", "surrogateescape") if isinstance(req.stdin, str) else req.stdin
        spec = RunSpec(limits=limits_for(self.settings, req), fetch_files=tuple(req.fetch_files),
                       max_fetch_bytes=self.settings.max_files_bytes)
        cap = req.max_output_bytes or self.settings.max_output_bytes
        # A small per-call cap only trims what is kept; floods are judged against the server's cap.
        flood = max(cap, self.settings.max_output_bytes) * self.settings.output_kill_factor
        return (spec, req.code, dict(req.files), stdin), {"max_output": cap, "kill_after_bytes": flood}

    def _finish(self, slot: _Slot, raw: RawRun) -> ExecutionResult:
        self.runs += 1
        if raw.report.cleanup_error:
            log.warning("slot %d cleanup: %s", slot.index, raw.report.cleanup_error)
        return to_result(raw)

    def _wants_heavy(self, req: RunRequest) -> tuple[bool, bool]:
        """(run it in the heavy zygote, it has absolute file paths): the heavy zygote takes code naming a heavy
        module, and absolute file paths (the light one filters itself once, so it cannot mount them into a run)."""
        absolute = bool(absolute_paths(req.files, req.fetch_files))
        return self._heavy_re is not None and (absolute or bool(self._heavy_re.search(req.code))), absolute

    def _pick_ready(self, slot: _Slot, req: RunRequest) -> tuple[str, ZygoteProcess | None]:
        """`_pick` where it would not block: the zygote, or None where it is still starting or must restart."""
        heavy, _ = self._wants_heavy(req)
        if heavy:
            ready = slot.heavy_done.is_set() and slot.heavy is not None and slot.heavy.alive
            return "heavy", slot.heavy if ready else None
        ready = slot.light is not None and slot.light.alive
        return "light", slot.light if ready else None

    def _pick(self, slot: _Slot, req: RunRequest) -> tuple[str, ZygoteProcess | None]:
        """The zygote `_wants_heavy` names, started or restarted here if need be (blocking); None if it cannot
        start. Without a heavy zygote, heavy code runs in the light one (which imports the modules itself)."""
        heavy, absolute = self._wants_heavy(req)
        if heavy:
            slot.heavy_done.wait(timeout=120)
            if slot.heavy is not None and not slot.heavy.alive or slot.heavy is None and absolute:
                self._revive(slot, "heavy")  # died while idle (e.g. killed), or missing where only it will do
            if slot.heavy is not None:
                return "heavy", slot.heavy
            if absolute:
                return "heavy", None
            # no heavy zygote (it could not start): the light one imports the heavy modules on demand
        if slot.light is None or not slot.light.alive:
            self._revive(slot, "light")
        return "light", slot.light

    def _revive(self, slot: _Slot, which: str) -> None:
        """Replace the slot's dead (or missing) `which` zygote in the calling thread; None if it cannot start."""
        old = getattr(slot, which)
        if old is not None:
            old.kill()
        try:
            setattr(slot, which, self._spawn(slot, which))
            self.respawns += 1
        except WorkerFailure as exc:
            log.error("slot %d: cannot restart its %s zygote: %s", slot.index, which, exc)
            setattr(slot, which, None)

    def _release(self, slot: _Slot, which: str) -> None:
        zygote = getattr(slot, which)
        if zygote is None or not zygote.alive or zygote.runs >= self.settings.zygote_max_runs:
            threading.Thread(target=self._replace, args=(slot, which), daemon=True).start()
        elif not self._closed:
            self._free.put(slot)

    # ---- introspection and shutdown -----------------------------------------------------------------------
    def zygote_pids(self) -> list[int]:
        return [z.pid for s in self._slots for z in (s.light, s.heavy) if z is not None and z.alive]

    def info(self) -> dict:
        active = sorted(self.info_first["layers"])
        return {"workers": len(self._slots), "tier": tier_of(set(active)), "layers": active,
                "layer_errors": self.info_first["errors"], "seccomp": self.info_first.get("seccomp"),
                "idle_workers": self._free.qsize(),
                "preloaded": self.info_first["preloaded"], "runs": self.runs, "respawns": self.respawns,
                "zygote_pids": self.zygote_pids(),
                # heavy zygotes still importing in the background (they cost CPU until ready)
                "warming": sum(not s.heavy_done.is_set() for s in self._slots)}

    def close(self) -> None:
        self._closed = True
        for slot in self._slots:
            for z in (slot.light, slot.heavy):
                if z is not None:
                    z.close(timeout_s=0.5)
        shutil.rmtree(self.settings.workdir_root, ignore_errors=True)


def _word_regex(words: str) -> re.Pattern:
    names = [re.escape(w.strip()) for w in words.split(",") if w.strip()]
    return re.compile(r"\b(?:" + "|".join(names) + r")\b") if names else re.compile(r"(?!)")


def check_uids_unused(uids: set[int], *, fatal: bool) -> None:
    """Slot uids must be ours alone when leftovers are killed by uid (no PID namespace); else only warn."""
    busy = linux.pids_of_uid(uids)
    if not busy:
        return
    msg = (f"SANDBOX_UID_BASE: slot uids {min(uids)}..{max(uids)} are in use (e.g. by pid {busy[0]}); "
           "choose a free range for SANDBOX_UID_BASE (one per server)")
    if fatal:
        raise SettingsError(msg)
    log.warning("%s — harmless with PID namespaces, but RLIMIT_NPROC is shared", msg)
