"""Sandbox settings: one frozen dataclass, every field documented once, read from ``SANDBOX_*`` variables.

`Settings.from_env()` maps field ``foo_bar`` to ``SANDBOX_FOO_BAR`` (two exceptions: ``allow_unsafe`` ←
``ALPRL_SANDBOX_ALLOW_UNSAFE``, ``pod_name`` ← ``MY_POD_NAME``, as SandboxFusion reads it). A bad value raises
`SettingsError` naming the variable, the value and what is expected. Units are in the field names.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import MISSING, dataclass, field, fields, replace

LAYERS = ("uid", "net", "pid", "mount", "seccomp")

# A run's limits when its caller names none, each stated once: every run() signature, request model and Settings
# field of the sandbox takes them from here (reference/sandbox.md §1-2).
RUN_TIMEOUT_S = 3.0  # wall clock of a run or a session cell: SimpleTIR's run_timeout, the TIR env's per-call limit
DEFAULT_MEMORY_MB = 1024  # RLIMIT_AS of a run (verl's memory_limit_mb): `Settings.default_memory_mb`'s default
# A request's memory limit meaning "the server's `default_memory_mb`": what requests and run() signatures default
# to, so the server's setting applies (SandboxFusion's -1, which there means no limit; here never unlimited).
SERVER_DEFAULT_MEMORY = -1
# The one documented difference, on SandboxFusion's route only: its RunCodeRequest defaults run_timeout to 10 s,
# and POST /run_code keeps that, so a SandboxFusion client that sends no run_timeout gets the limit it gets there.
SANDBOXFUSION_RUN_TIMEOUT_S = 10.0

# Not dataclasses: with inspect, ast, dis and tokenize it is 1.3 MB that every fork copies page tables for and
# every exit tears down (~0.1 ms a run); the rare run that imports it pays the import instead.
LIGHT_PRELOAD = ("math", "cmath", "fractions", "decimal", "itertools", "functools", "collections", "heapq",
                 "bisect", "random", "re", "json", "string", "statistics", "operator", "typing")


def tier_of(layers: set[str] | frozenset[str]) -> str:
    """Isolation tier of the active layers: T2 with net, pid and mount; T1 with the uid switch; else T0."""
    if {"net", "pid", "mount"} <= set(layers):
        return "T2"
    return "T1" if "uid" in layers else "T0"


class SettingsError(ValueError):
    """A setting has a bad value; the message names the variable and what to do."""


def _f(default, doc: str, env: str | None = None, *, secret: bool = False):
    meta = {"doc": doc, "env": env}
    if callable(default) and not isinstance(default, type):
        return field(default_factory=default, metadata=meta)
    return field(default=default, metadata=meta, repr=not secret)  # a secret never shows in a repr or a log


def _default_workdir_root() -> str:
    # tmpfs when available: a disk-backed workdir (mkdir/unlink with `discard`) costs milliseconds per run.
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()
    return os.path.join(base, f"alprl-sandbox-{os.getpid()}")


@dataclass(frozen=True)
class Settings:
    host: str = _f("127.0.0.1", "interface to bind (0.0.0.0 inside a container)")
    port: int = _f(8080, "TCP port (SandboxFusion's default is 8080 too)")
    workers: int = _f(0, "concurrent executions (warm zygotes); 0 = number of CPUs")
    max_queue: int = _f(256, "requests allowed to wait for a worker; beyond that → overload status at once")
    queue_timeout_s: float = _f(30.0, "longest wait for a worker before the overload status")
    overload_status: int = _f(429, "HTTP status when overloaded: 429 (with Retry-After) or 504 (what verl retries)")
    retry_after_s: int = _f(1, "Retry-After header value on overload, seconds")
    max_run_timeout_s: float = _f(60.0, "run_timeout is clamped to this (wall clock, seconds)")
    default_memory_mb: int = _f(DEFAULT_MEMORY_MB, "memory limit (RLIMIT_AS) when a request says -1 or nothing")
    max_memory_mb: int = _f(4096, "memory limit requests are clamped to")
    max_output_bytes: int = _f(1 << 20, "kept per stream (stdout, stderr); the rest is dropped and flagged")
    output_kill_factor: int = _f(8, "kill a run once it printed this many times max_output_bytes (both streams together)")
    max_file_mb: int = _f(64, "largest file a run may write (RLIMIT_FSIZE)")
    max_open_files: int = _f(256, "RLIMIT_NOFILE per run")
    max_processes: int = _f(64, "RLIMIT_NPROC per slot uid (only with the uid layer)")
    max_code_bytes: int = _f(1 << 20, "largest accepted program text")
    max_files_bytes: int = _f(10 << 20, "total decoded size of request `files`, and of fetched files")
    uid_base: int = _f(10000, "slot uids are uid_base + i; use a range no account or other server uses")
    layers: str = _f("auto", "isolation layers to use: 'auto' (all the machine allows) or a list like 'uid,net'")
    require_seccomp: bool = _f(False, "refuse to start when the seccomp layer cannot load (else: run without it)")
    tmpfs_mb: int = _f(256, "size of each private tmpfs (/tmp, /dev/shm, /var/tmp) with the mount layer, "
                       "and of each docker-backend container's /tmp")
    workdir_root: str = _f(_default_workdir_root, "per-run directories live here when there is no mount layer")
    preload: str = _f(",".join(LIGHT_PRELOAD), "modules every zygote imports before forking")
    preload_heavy: str = _f("numpy,sympy", "modules of the second zygote per slot; code naming them runs there")
    heavy_triggers: str = _f("numpy,sympy,scipy,pandas,mpmath", "words in code that route it to the heavy zygote")
    zygote_max_runs: int = _f(20000, "replace a zygote after this many runs")
    max_sessions: int = _f(64, "concurrent stateful sessions")
    session_ttl_s: float = _f(600.0, "idle time after which a session is deleted")
    session_cpu_s: int = _f(600, "CPU seconds a session interpreter may use in total")
    backend: str = _f("process", "'process' (zygotes, default) or 'docker' (one hardened container per run)")
    docker_image: str = _f("alprl/sandbox:latest", "image for the docker backend (make sandbox-image builds it)")
    allow_unsafe: bool = _f(False, "start even with neither a uid switch nor namespaces", "ALPRL_SANDBOX_ALLOW_UNSAFE")
    api_key: str = _f("", "callers must send 'Authorization: Bearer <key>' (a comma list: one key per caller); empty = "
                      "no auth. Environment only, never a flag: a command line is readable by every local user",
                      secret=True)
    max_inflight_per_client: int = _f(64, "run requests one client (key, else address) may have in flight; over "
                                      "it → overload status; 0 = no cap (64 = the alprl client's own cap)")
    pod_name: str = _f("", "reported as executor_pod_name", "MY_POD_NAME")
    log_level: str = _f("info", "server log level")

    def __post_init__(self) -> None:
        checks = [
            ("workers", self.workers >= 0, "an integer >= 0"), ("max_queue", self.max_queue >= 0, ">= 0"),
            ("overload_status", self.overload_status in (429, 503, 504), "429, 503 or 504"),
            ("max_run_timeout_s", self.max_run_timeout_s > 0, "> 0"),
            ("default_memory_mb", 32 <= self.default_memory_mb <= self.max_memory_mb, "32 ≤ value ≤ max_memory_mb"),
            ("max_output_bytes", self.max_output_bytes >= 1, ">= 1"),
            ("output_kill_factor", self.output_kill_factor >= 1, ">= 1"),
            ("uid_base", self.uid_base >= 1000, ">= 1000 (never a system or root uid)"),
            ("backend", self.backend in ("process", "docker"), "'process' or 'docker'"),
            ("max_sessions", self.max_sessions >= 0, ">= 0"),
            ("max_inflight_per_client", self.max_inflight_per_client >= 0, ">= 0 (0 = no cap)"), ("port", 0 <= self.port < 65536, "a TCP port"),
        ]
        for name, ok, expected in checks:
            if not ok:
                raise SettingsError(f"{env_name(name)}={getattr(self, name)!r}: expected {expected}")
        wanted = self.requested_layers()  # validates the layer list
        if self.require_seccomp and "seccomp" not in wanted:
            raise SettingsError(f"SANDBOX_REQUIRE_SECCOMP=1 with SANDBOX_LAYERS={self.layers!r}: add 'seccomp' to "
                                "the layers (or use 'auto'), or drop the requirement")

    @property
    def worker_count(self) -> int:
        return self.workers or os.cpu_count() or 1

    def requested_layers(self) -> frozenset[str]:
        if self.layers.strip() in ("auto", "all"):
            return frozenset(LAYERS)
        wanted = frozenset(x.strip() for x in self.layers.split(",") if x.strip() and x.strip() != "none")
        unknown = wanted - set(LAYERS)
        if unknown:
            raise SettingsError(f"SANDBOX_LAYERS={self.layers!r}: unknown layer(s) {sorted(unknown)}; "
                                f"use 'auto', 'none' or a comma list of {', '.join(LAYERS)}")
        return wanted

    def with_overrides(self, **changes) -> Settings:
        return replace(self, **{k: v for k, v in changes.items() if v is not None})

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **overrides) -> Settings:
        environ = os.environ if environ is None else environ
        values = {}
        for f in fields(cls):
            name = env_name(f.name)
            if name in environ:
                values[f.name] = _parse(name, environ[name], f.type)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


def env_name(field_name: str) -> str:
    for f in fields(Settings):
        if f.name == field_name and f.metadata.get("env"):
            return f.metadata["env"]
    return f"SANDBOX_{field_name.upper()}"


def _parse(name: str, raw: str, type_name: str):
    try:
        if type_name == "bool":
            lowered = raw.strip().lower()
            if lowered not in ("1", "0", "true", "false", "yes", "no", "on", "off", ""):
                raise ValueError(raw)
            return lowered in ("1", "true", "yes", "on")
        if type_name == "int":
            return int(raw)
        if type_name == "float":
            return float(raw)
        return raw
    except ValueError:
        raise SettingsError(f"{name}={raw!r}: expected a {type_name} value") from None


def describe() -> list[tuple[str, str, str]]:
    """(variable, default, doc) for every setting, for `--help` and docs."""
    rows = []
    for f in fields(Settings):
        default = f.default if f.default is not MISSING else "(computed)"
        rows.append((env_name(f.name), str(default), f.metadata["doc"]))
    return rows
