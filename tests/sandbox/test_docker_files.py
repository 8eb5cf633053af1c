"""No Docker engine runs here: parse docker-compose.yml and sandbox/Dockerfile and assert the hardening."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


@pytest.fixture(scope="module")
def dockerfile() -> list[str]:
    text = (ROOT / "sandbox" / "Dockerfile").read_text()
    return [line.strip() for line in text.replace("\\\n", " ").splitlines() if line.strip() and not line.startswith("#")]


def _bytes(size: str) -> int:
    number, unit = re.fullmatch(r"(\d+)([kmg]?)", size.lower()).groups()
    return int(number) * {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[unit]


def test_sandbox_service_is_hardened(compose):
    svc = compose["services"]["sandbox"]
    assert svc["read_only"] is True
    assert any(t.startswith("/tmp:") and "size=" in t and "nosuid" in t for t in svc["tmpfs"])
    assert svc["cap_drop"] == ["ALL"] and "cap_add" not in svc
    assert "no-new-privileges:true" in svc["security_opt"]
    assert not any("unconfined" in opt for opt in svc["security_opt"])
    assert 0 < svc["pids_limit"] <= 4096
    assert _bytes(svc["mem_limit"]) == _bytes(svc["memswap_limit"])  # no swap beyond the memory limit
    assert float(svc["cpus"]) > 0 and svc["init"] is True
    uid = str(svc["user"]).split(":")[0]
    assert uid.isdigit() and int(uid) != 0
    assert svc["ulimits"]["core"] == 0 and svc["ulimits"]["nofile"]["hard"] <= 65536
    assert "privileged" not in svc and "volumes" not in svc  # no docker.sock, no host bind mounts
    assert "ports" not in svc  # reachable only through the internal network / gateway


def test_sandbox_healthcheck_pings_v1_ping(compose):
    check = compose["services"]["sandbox"]["healthcheck"]
    assert "/v1/ping" in " ".join(check["test"]) and check["interval"] == "10s"


def test_sandbox_network_has_no_egress(compose):
    nets = compose["services"]["sandbox"]["networks"]
    assert nets and all(compose["networks"][n].get("internal") is True for n in nets)
    gateway = compose["services"]["sandbox-gateway"]
    assert gateway["ports"] == ["127.0.0.1:8080:8080"] and set(nets) <= set(gateway["networks"])
    assert gateway["read_only"] is True and gateway["cap_drop"] == ["ALL"]


def test_replicas_are_configurable(compose):
    assert "replicas" in compose["services"]["sandbox"]["deploy"]


def test_compose_command_matches_the_cli(compose):
    from sandbox.cli import build_parser

    command = compose["services"]["sandbox"]["command"]
    assert command[0] == "alprl-sandbox"
    args = build_parser().parse_args(command[1:])
    assert args.command == "serve" and args.port == 8080 and args.host == "0.0.0.0"


def test_dockerfile_slim_base_non_root_user_and_serve_cmd(dockerfile):
    assert dockerfile[0].startswith("FROM python:") and dockerfile[0].endswith("-slim")
    users = [line.split()[1] for line in dockerfile if line.startswith("USER ")]
    assert users and users[-1].split(":")[0] not in ("0", "root")
    cmd = [line for line in dockerfile if line.startswith("CMD ")][-1]
    assert '"alprl-sandbox", "serve"' in cmd and "8080" in cmd
    assert any(line.startswith("EXPOSE 8080") for line in dockerfile)


def test_dockerfile_installs_only_the_sandbox_extra(dockerfile):
    run = " ".join(line for line in dockerfile if line.startswith("RUN "))
    assert "['optional-dependencies']['sandbox']" in run and "--no-deps ." in run
    assert "torch" not in run
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["sandbox"]
    assert not any(dep.startswith(("torch", "transformers")) for dep in extra)


def test_dockerignore_keeps_the_context_small():
    ignored = (ROOT / ".dockerignore").read_text().split()
    for path in (".git", ".venv", "tests/", "trainer/"):
        assert path in ignored
