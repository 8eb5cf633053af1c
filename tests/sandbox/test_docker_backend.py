"""Docker backend: what it shares with the compose file is tested everywhere; real runs need an engine."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from sandbox.execution.pool import RunRequest
from sandbox.settings import Settings

pytest.importorskip("docker", reason="the docker SDK is not installed (pip install docker)")
from sandbox.execution.docker_backend import (  # noqa: E402
    BOOTSTRAP,
    DockerBackend,
    DockerUnavailable,
    _payload_tar,
    hardening,
)

COMPOSE = yaml.safe_load((Path(__file__).resolve().parents[2] / "docker-compose.yml").read_text())


def test_per_run_containers_use_the_compose_hardening_and_no_network():
    kw = hardening(Settings(), memory_mb=512)
    svc = COMPOSE["services"]["sandbox"]
    assert kw["network_mode"] == "none"
    assert kw["read_only"] is svc["read_only"] is True
    assert kw["cap_drop"] == svc["cap_drop"] == ["ALL"]
    assert kw["security_opt"] == svc["security_opt"]
    assert kw["init"] is True and kw["mem_limit"] == kw["memswap_limit"] == "512m"
    assert int(kw["user"].split(":")[0]) != 0 and 0 < kw["pids_limit"] <= svc["pids_limit"]
    assert {u["Name"] for u in kw["ulimits"]} >= {"nofile", "core"}
    assert set(kw["environment"]) <= {"PATH", "LANG", "HOME", "TMPDIR", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE",
                                      "PYTHONHASHSEED", "MPLBACKEND", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                      "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"}


def test_payload_and_bootstrap_reproduce_the_run_locally(tmp_path):
    """The bootstrap, run by a plain interpreter on the extracted payload, runs the program with its files."""
    req = RunRequest("import sys\nprint(open('d/in.txt').read(), sys.stdin.read())", files={"d/in.txt": b"file"},
                     stdin="input")
    with tarfile.open(fileobj=io.BytesIO(_payload_tar(req))) as tar:
        tar.extractall(tmp_path / "run", filter="data")
    payload = json.loads((tmp_path / "run" / "payload.json").read_text())
    assert payload["code"] == req.code
    script = BOOTSTRAP.replace("/opt/run", str(tmp_path / "run")).replace("/tmp/run", str(tmp_path / "work"))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "file input\n"


def test_docker_backend_runs_code_when_an_engine_is_reachable():
    try:
        backend = DockerBackend(Settings(backend="docker", workers=1))
    except DockerUnavailable as exc:
        pytest.skip(f"no Docker engine reachable here: {exc}")
    image = backend.settings.docker_image
    if subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode != 0:
        backend.close()
        pytest.skip(f"image {image} is missing: `make sandbox-image` builds it (tests/docker does, earlier in the run)")
    try:
        assert backend.run(RunRequest("print(6*7)")).stdout == "42\n"
        assert backend.run(RunRequest("while True: pass", timeout_s=1)).status == "TimeLimitExceeded"
        blocked = backend.run(RunRequest("import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=3)"))
        assert blocked.status == "Failed"
    finally:
        backend.close()


def test_docker_backend_without_engine_says_what_to_do(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:1")
    with pytest.raises(DockerUnavailable, match="SANDBOX_BACKEND=process"):
        DockerBackend(Settings(backend="docker", workers=1))
