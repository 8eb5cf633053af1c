"""The compose stack for real: a Docker engine, the image built offline, `compose up` on a free host port.

`make test` runs `sandbox/deploy/docker_engine.sh` first (installs and starts Debian's engine as root where it can); with
no engine these tests skip with the reason. The image is built by `sandbox/deploy/build_image.sh`, the script behind
`make sandbox-image`, so the tests exercise exactly what a user runs.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
SLOT_UID_BASE = 10000  # Settings.uid_base default: the compose file does not change it


def _docker_answers() -> str | None:
    """None when an engine answers, else why not."""
    if shutil.which("docker") is None:
        return "no docker command (make docker-engine installs Debian's docker.io as root)"
    out = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True,
                         timeout=30)
    return None if out.returncode == 0 else f"the Docker engine does not answer: {out.stderr.strip()[:200]}"


def compose_command() -> list[str] | None:
    """The v2 plugin where present, `docker-compose` v1 otherwise."""
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    return ["docker-compose"] if shutil.which("docker-compose") else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ensure_sandbox_image() -> None:
    """Build alprl/sandbox:latest as `make sandbox-image` does (a no-op when it is up to date)."""
    env = {**os.environ, "PIP": f"{sys.executable} -m pip"}
    out = subprocess.run(["bash", "sandbox/deploy/build_image.sh"], cwd=ROOT, capture_output=True, text=True, env=env,
                         timeout=1500)
    if out.returncode == 3:  # no base image or wheels obtainable here (no registry, no mirror, not root)
        pytest.skip(f"the sandbox image cannot be built on this machine: {out.stderr.strip()[-300:]}")
    assert out.returncode == 0, f"make sandbox-image failed:\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}"


@pytest.fixture(scope="session")
def docker_engine() -> None:
    why = _docker_answers()
    if why:
        pytest.skip(why)


@pytest.fixture(scope="session")
def sandbox_image(docker_engine) -> str:
    ensure_sandbox_image()
    return "alprl/sandbox:latest"


class Stack:
    """One compose project: its published URL and helpers to look inside its containers."""

    def __init__(self, compose: list[str], project: str, port: int, env: dict[str, str],
                 files: tuple[str, ...] = ("docker-compose.yml",)):
        self.compose, self.project, self.port, self.env = compose, project, port, env
        self.files = [arg for f in files for arg in ("-f", str(ROOT / f))]
        self.url = f"http://127.0.0.1:{port}"
        self.http = httpx.Client(base_url=self.url, timeout=60.0)

    def cmd(self, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
        out = subprocess.run([*self.compose, "-p", self.project, *self.files, *args],
                             cwd=ROOT, capture_output=True, text=True, env=self.env, timeout=timeout)
        if check and out.returncode != 0:
            raise AssertionError(f"{' '.join(args)} failed: {out.stderr[-3000:]}")
        return out

    def container(self, service: str = "sandbox") -> str:
        ids = self.cmd("ps", "-q", service).stdout.split()
        assert ids, f"no {service} container in {self.project}"
        return ids[0]

    def exec_python(self, code: str, service: str = "sandbox") -> str:
        """Run Python in the service's container as its root (outside any sandboxed run)."""
        out = subprocess.run(["docker", "exec", self.container(service), "python", "-c", code],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return out.stdout

    def server_pid(self) -> int:
        """The pid of the `alprl-sandbox serve` interpreter in the sandbox container (pid 1 is docker-init)."""
        return int(self.exec_python(
            "import os\nfor p in os.listdir('/proc'):\n    if p.isdigit():\n        try:\n"
            "            c = open(f'/proc/{p}/cmdline', 'rb').read()\n        except OSError:\n            continue\n"
            "        argv = c.split(b'\\0')\n"
            "        if b'python' in argv[0] and b'alprl-sandbox' in c and b'serve' in argv:\n"
            "            print(p); break"))

    def slot_processes(self) -> list[int]:
        """Pids in the container running as a slot uid (every run's processes; none when idle)."""
        return json.loads(self.exec_python(
            "import os, json\npids = []\nfor p in os.listdir('/proc'):\n    if p.isdigit():\n        try:\n"
            f"            if os.stat(f'/proc/{{p}}').st_uid >= {SLOT_UID_BASE}: pids.append(int(p))\n"
            "        except OSError:\n            pass\nprint(json.dumps(pids))"))

    def wait_ready(self, timeout_s: float = 90.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if self.http.get("/v1/ping", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        logs = self.cmd("logs", "--tail", "40", check=False).stdout
        raise AssertionError(f"{self.url} did not answer /v1/ping within {timeout_s:.0f} s:\n{logs}")

    def run(self, code: str, **fields) -> dict:
        resp = self.http.post("/run_code", json={"code": code, "language": "python", "run_timeout": 5.0, **fields})
        assert resp.status_code == 200, resp.text
        return resp.json()

    def down(self) -> None:
        self.cmd("down", "--remove-orphans", "--timeout", "5", check=False)
        self.http.close()


def start_stack(compose: list[str], name: str, files: tuple[str, ...] = ("docker-compose.yml",)) -> Stack:
    port = free_port()
    project = f"alprltest{name}{os.getpid()}"
    env = {**os.environ, "SANDBOX_HOST_PORT": str(port), "SANDBOX_API_KEY": ""}
    stack = Stack(compose, project, port, env, files)
    stack.cmd("up", "-d", "--no-build", "sandbox")
    try:
        stack.wait_ready()
    except AssertionError:
        stack.down()
        raise
    return stack


@pytest.fixture(scope="module")
def compose(sandbox_image) -> list[str]:
    cmd = compose_command()
    if cmd is None:
        pytest.skip("neither `docker compose` nor `docker-compose` is installed (apt-get install docker-compose)")
    return cmd


@pytest.fixture(scope="module")
def stack(compose):
    s = start_stack(compose, "a")
    yield s
    s.down()


@pytest.fixture(scope="module")
def make_stack(compose):
    """Start another compose project (the caller takes it down)."""
    return lambda name, files=("docker-compose.yml",): start_stack(compose, name, files)
