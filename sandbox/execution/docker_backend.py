"""Optional stronger tier (T3): every run in its own hardened, network-less container (``SANDBOX_BACKEND=docker``).

Uses the `docker` SDK against a reachable engine (``DOCKER_HOST`` or the local socket — which must then be given
to the *service*, never to user code). Each run: create a container with `hardening()` flags, copy a payload
(program, files, stdin) into ``/opt/run`` before start, run a small bootstrap that writes the files into the
tmpfs workdir and execs the program, wait with the wall-clock deadline, keep capped stdout/stderr, remove the
container. Not supported here: sessions and `fetch_files` (the tmpfs is gone once the container stops).
The process backend (`sandbox.execution.pool.Pool`) stays the default and is what the tests exercise without an engine.
"""

from __future__ import annotations

import asyncio
import io
import json
import tarfile
import threading
import time
from concurrent.futures import Executor

from sandbox.execution.child import clean_environ
from sandbox.execution.pool import RunRequest, limits_for
from sandbox.settings import Settings
from sandbox.types import ExecutionResult

WORKDIR = "/tmp/run"
# Runs inside the container: unpack the payload into the tmpfs workdir, then run the program as __main__.
BOOTSTRAP = (
    "import base64, json, os, sys, runpy\n"
    "p = json.load(open('/opt/run/payload.json'))\n"
    f"os.makedirs({WORKDIR!r}, exist_ok=True); os.chdir({WORKDIR!r})\n"
    "for path, data in p['files'].items():\n"
    "    os.makedirs(os.path.dirname(path) or '.', exist_ok=True)\n"
    "    open(path, 'wb').write(base64.b64decode(data))\n"
    "open('main.py', 'w').write(p['code'])\n"
    "sys.stdin = open('/opt/run/stdin', encoding='utf-8')\n"
    "sys.argv = ['main.py']; sys.path.insert(0, os.getcwd())\n"
    "runpy.run_path('main.py', run_name='__main__')\n"
)


class DockerUnavailable(RuntimeError):
    """The docker SDK is missing or no engine answers; the message says what to do."""


def hardening(settings: Settings, memory_mb: int) -> dict:
    """docker SDK `containers.create` keyword arguments shared with docker-compose.yml's hardening keys."""
    from docker.types import Mount, Ulimit

    return {
        "network_mode": "none", "read_only": True, "init": True, "user": "65534:65534",
        "cap_drop": ["ALL"], "security_opt": ["no-new-privileges:true"],
        "tmpfs": {"/tmp": f"rw,size={settings.tmpfs_mb}m,nosuid,nodev"},
        "pids_limit": settings.max_processes, "mem_limit": f"{memory_mb}m", "memswap_limit": f"{memory_mb}m",
        "nano_cpus": 1_000_000_000,
        "ulimits": [Ulimit(name="nofile", soft=settings.max_open_files, hard=settings.max_open_files),
                    Ulimit(name="core", soft=0, hard=0),
                    Ulimit(name="fsize", soft=settings.max_file_mb << 20, hard=settings.max_file_mb << 20)],
        "environment": clean_environ(WORKDIR), "working_dir": "/tmp",
        # the root is read-only, so the payload goes into a per-run anonymous volume (root-owned, 0755: the run
        # reads it and cannot write there), removed with the container
        "mounts": [Mount("/opt/run", None, type="volume")],
    }


def _payload_tar(req: RunRequest) -> bytes:
    import base64

    stdin = req.stdin.encode() if isinstance(req.stdin, str) else req.stdin
    payload = json.dumps({"code": req.code, "files": {p: base64.b64encode(d).decode() for p, d in req.files.items()}})
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:  # extracted into the /opt/run volume
        for name, data in (("payload.json", payload.encode()), ("stdin", stdin)):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o444
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class DockerBackend:
    """Same `run()` / `info()` / `close()` surface as the process Pool."""

    def __init__(self, settings: Settings):
        try:
            import docker
        except ImportError as exc:
            raise DockerUnavailable("SANDBOX_BACKEND=docker needs the `docker` package (pip install docker)") from exc
        try:
            self.client = docker.from_env()
            self.client.ping()
        except Exception as exc:  # the SDK raises several types for "no engine"
            raise DockerUnavailable(f"SANDBOX_BACKEND=docker but no Docker engine answers ({exc}); start one, set "
                                    "DOCKER_HOST, or use SANDBOX_BACKEND=process") from exc
        self.settings = settings
        self._slots = threading.BoundedSemaphore(settings.worker_count)
        self.runs = 0

    async def run_async(self, req: RunRequest, threads: Executor) -> ExecutionResult:
        """The service's entry point: every docker call blocks, so the whole run goes to one of `threads`."""
        return await asyncio.get_running_loop().run_in_executor(threads, self.run, req)

    def run(self, req: RunRequest) -> ExecutionResult:
        limits = limits_for(self.settings, req)
        with self._slots:
            container = self.client.containers.create(
                self.settings.docker_image, ["python", "-u", "-c", BOOTSTRAP],
                **hardening(self.settings, limits.memory_mb))
            try:
                container.put_archive("/opt/run", _payload_tar(req))
                return self._supervise(container, limits.timeout_s, req.max_output_bytes)
            finally:
                container.remove(force=True, v=True)

    def _supervise(self, container, timeout_s: float, cap: int | None) -> ExecutionResult:
        cap = cap or self.settings.max_output_bytes
        start = time.monotonic()
        container.start()
        try:
            code = container.wait(timeout=timeout_s)["StatusCode"]
            timed_out = False
        except Exception:  # requests' ReadTimeout: the deadline passed
            container.kill()
            code, timed_out = None, True
        wall = time.monotonic() - start
        out = container.logs(stdout=True, stderr=False)
        err = container.logs(stdout=False, stderr=True)
        self.runs += 1
        common = {"stdout": out[:cap].decode("utf-8", "replace"), "stderr": err[:cap].decode("utf-8", "replace"),
                  "wall_time_s": wall, "stdout_truncated": len(out) > cap, "stderr_truncated": len(err) > cap}
        if timed_out:
            return ExecutionResult("TimeLimitExceeded", killed_reason="timeout", **common)
        # A process killed by signal N exits the container with 128 + N (137: SIGKILL, e.g. the OOM killer).
        rc = -(code - 128) if code is not None and code > 128 else code
        return ExecutionResult("Success" if rc == 0 else "Failed", return_code=rc, **common)

    def info(self) -> dict:
        return {"workers": self.settings.worker_count, "tier": "T3", "layers": ["container"], "layer_errors": {},
                "idle_workers": self._slots._value, "runs": self.runs, "respawns": 0, "zygote_pids": []}

    def close(self) -> None:
        self.client.close()
