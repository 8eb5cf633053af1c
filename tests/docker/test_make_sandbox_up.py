"""`make sandbox-up` / `make sandbox-down` as the README gives them, with each compose spelling.

Debian bookworm ships docker.io 20.10 and docker-compose 1.29: the v1 command only, where `docker compose` is an
unknown command. The v1 case runs on any machine that has `docker-compose`; where the v2 plugin is installed too, a
`docker` on PATH that forwards every command but `compose` to the real one makes the machine look as Debian ships
it. The v2 case runs where the plugin answers. Each brings the stack up on a free port in its own compose project,
runs the check the target prints (`print(6*7)` → 42), brings it up again (nothing to do), then down, and looks
for anything of the project left behind.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from conftest import ROOT, compose_command, free_port

pytestmark = pytest.mark.timeout(600)

# What Docker 20.10 without the plugin prints for `docker compose`, and its exit status.
NO_PLUGIN = 'echo "docker: \'compose\' is not a docker command." >&2; exit 1'


def _plugin() -> bool:
    return subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0


def _v1_only_path(tmp_path: Path) -> str:
    """PATH on which `docker compose` is unknown, as on Debian: a `docker` that refuses `compose` first."""
    real = shutil.which("docker")
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "docker").write_text(f'#!/bin/sh\nif [ "$1" = compose ]; then {NO_PLUGIN}; fi\nexec {real} "$@"\n')
    (shim / "docker").chmod(0o755)
    return f"{shim}{os.pathsep}{os.environ['PATH']}"


def _make(target: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["make", target], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


def _left_behind(project: str) -> tuple[str, str]:
    label = f"label=com.docker.compose.project={project}"
    containers = subprocess.run(["docker", "ps", "-aq", "--filter", label], capture_output=True, text=True).stdout
    networks = subprocess.run(["docker", "network", "ls", "-q", "--filter", label], capture_output=True,
                              text=True).stdout
    return containers.strip(), networks.strip()


@pytest.mark.parametrize("spelling", ["docker-compose", "docker compose"], ids=["v1-only", "v2-plugin"])
def test_make_sandbox_up_serves_print_6_times_7_and_down_removes_it(sandbox_image, tmp_path, spelling):
    if shutil.which("make") is None:
        pytest.skip("no make command (apt-get install make)")
    env = {**os.environ, "PIP": f"{sys.executable} -m pip",  # as tests/docker/conftest.py builds the image
           "COMPOSE_PROJECT_NAME": f"alprltestmake{os.getpid()}", "SANDBOX_HOST_PORT": str(free_port()),
           "SANDBOX_API_KEY": ""}
    if spelling == "docker-compose":
        if shutil.which("docker-compose") is None:
            pytest.skip("no docker-compose (v1) here (Debian: apt-get install docker-compose)")
        if _plugin():
            env["PATH"] = _v1_only_path(tmp_path)
        hidden = subprocess.run(["docker", "compose", "version"], env=env, capture_output=True)
        assert hidden.returncode != 0  # the machine as Debian ships it: only the v1 command
    elif not _plugin():
        pytest.skip("no `docker compose` plugin here (the v1-only case covers this machine)")
    else:
        assert compose_command() == ["docker", "compose"]
    project = env["COMPOSE_PROJECT_NAME"]
    try:
        up = _make("sandbox-up", env)
        assert up.returncode == 0, f"make sandbox-up failed:\n{up.stdout[-3000:]}\n{up.stderr[-3000:]}"
        assert f"up with `{spelling}`" in up.stdout, up.stdout
        url = re.search(r"→ (http://127\.0\.0\.1:\d+)$", up.stdout, re.M)
        assert url and url.group(1) == f"http://127.0.0.1:{env['SANDBOX_HOST_PORT']}", up.stdout
        check = re.search(r"^check it:\s+(.+)$", up.stdout, re.M)
        assert check, up.stdout
        if shutil.which("curl"):  # the printed check, as a user pastes it
            ran = subprocess.run(["bash", "-c", check.group(1)], capture_output=True, text=True, timeout=60)
            assert ran.returncode == 0, ran.stderr
            body = json.loads(ran.stdout)
        else:  # the same request without curl
            body = httpx.post(f"{url.group(1)}/run_code", json={"code": "print(6*7)", "language": "python"},
                              timeout=60).json()
        assert body["status"] == "Success" and body["run_result"]["stdout"] == "42\n", body
        again = _make("sandbox-up", env)  # idempotent: the image and the stack are already there
        assert again.returncode == 0 and f"→ {url.group(1)}" in again.stdout, again.stderr[-2000:]
    finally:
        down = _make("sandbox-down", env)
    assert down.returncode == 0, down.stderr[-2000:]
    assert _left_behind(project) == ("", "")
    assert _make("sandbox-down", env).returncode == 0  # down again: nothing to do, no error
