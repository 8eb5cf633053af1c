"""docker-compose.yml, sandbox/deploy/Dockerfile and the image script, checked statically (tests/docker runs them)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RUN_SLOT_CAPS = {"SETUID", "SETGID", "KILL", "CHOWN", "FOWNER", "DAC_OVERRIDE"}


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


@pytest.fixture(scope="module")
def dockerfile() -> list[str]:
    text = (ROOT / "sandbox" / "deploy" / "Dockerfile").read_text()
    return [line.strip() for line in text.replace("\\\n", " ").splitlines() if line.strip() and not line.startswith("#")]


def _bytes(size: str) -> int:
    number, unit = re.fullmatch(r"(\d+)([kmg]?)", size.lower()).groups()
    return int(number) * {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[unit]


def test_sandbox_service_is_hardened(compose):
    svc = compose["services"]["sandbox"]
    assert svc["read_only"] is True
    assert any(t.startswith("/tmp:") and "size=" in t and "nosuid" in t for t in svc["tmpfs"])
    # root in the container only to switch each run to its own uid: everything else dropped, runs lose the rest
    assert svc["cap_drop"] == ["ALL"] and set(svc["cap_add"]) <= RUN_SLOT_CAPS
    assert "ALPRL_SANDBOX_ALLOW_UNSAFE" not in svc["environment"]
    assert "no-new-privileges:true" in svc["security_opt"]
    assert not any("unconfined" in opt for opt in svc["security_opt"])
    assert 0 < svc["pids_limit"] <= 4096
    assert _bytes(svc["mem_limit"]) == _bytes(svc["memswap_limit"])  # no swap beyond the memory limit
    assert svc["cpus"] == "${SANDBOX_CPUS:-2}" and svc["init"] is True  # Docker refuses more than the host has
    assert str(svc["user"]) == "0:0"
    assert svc["ulimits"]["core"] == 0 and svc["ulimits"]["nofile"]["hard"] <= 65536
    assert "privileged" not in svc and "volumes" not in svc  # no docker.sock, no host bind mounts
    assert "ports" not in svc  # reachable only through the internal network / gateway


def test_sandbox_healthcheck_pings_v1_ping(compose):
    check = compose["services"]["sandbox"]["healthcheck"]
    assert "/v1/ping" in " ".join(check["test"]) and check["interval"] == "10s"


def test_sandbox_network_has_no_egress(compose):
    nets = compose["services"]["sandbox"]["networks"]
    assert nets and all(compose["networks"][n].get("internal") is True for n in nets)
    # no host address on the bridge: the host's own services are out of reach too
    assert all(compose["networks"][n]["driver_opts"]["com.docker.network.bridge.inhibit_ipv4"] == "true" for n in nets)
    gateway = compose["services"]["sandbox-gateway"]
    assert gateway["ports"] == ["127.0.0.1:${SANDBOX_HOST_PORT:-8080}:8080"] and set(nets) <= set(gateway["networks"])
    assert gateway["read_only"] is True and gateway["cap_drop"] == ["ALL"] and "cap_add" not in gateway
    assert gateway["image"] == compose["services"]["sandbox"]["image"]  # built here, nothing to pull
    from sandbox.deploy.cli import build_parser

    args = build_parser().parse_args(gateway["command"][1:])
    assert args.command == "gateway" and args.target == "sandbox:8080"


def test_replicas_are_configurable(compose):
    assert "replicas" in compose["services"]["sandbox"]["deploy"]


def test_compose_command_matches_the_cli(compose):
    from sandbox.deploy.cli import build_parser

    command = compose["services"]["sandbox"]["command"]
    assert command[0] == "alprl-sandbox"
    args = build_parser().parse_args(command[1:])
    assert args.command == "serve" and args.port == 8080 and args.host == "0.0.0.0"


def test_dockerfile_base_is_an_argument_and_serve_cmd(dockerfile):
    assert dockerfile[0] == "ARG BASE_IMAGE=python:3.11-slim" and dockerfile[1] == "FROM ${BASE_IMAGE}"
    assert not [line for line in dockerfile if line.startswith("USER ")]  # root: runs get uid slots
    cmd = [line for line in dockerfile if line.startswith("CMD ")][-1]
    assert '"alprl-sandbox", "serve"' in cmd and "8080" in cmd
    assert any(line.startswith("EXPOSE 8080") for line in dockerfile)


def test_image_installs_only_the_sandbox_extra_from_the_wheelhouse(dockerfile):
    run = " ".join(line for line in dockerfile if line.startswith("RUN "))
    assert run.count("--no-index") == 2 and "--no-deps ." in run and "torch" not in run
    script = (ROOT / "sandbox" / "deploy" / "build_image.sh").read_text()
    assert '["optional-dependencies"]["sandbox"]' in script and "--only-binary=:all:" in script
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["sandbox"]
    assert not any(dep.startswith(("torch", "transformers")) for dep in extra)


def test_namespace_override_adds_only_what_unshare_and_loopback_need(compose):
    override = yaml.safe_load((ROOT / "docker-compose.namespaces.yml").read_text())["services"]["sandbox"]
    assert set(override["cap_add"]) == RUN_SLOT_CAPS | {"SYS_ADMIN", "NET_ADMIN"}
    assert set(override) == {"cap_add"}  # no privileged, no unconfined seccomp


def test_dockerignore_keeps_the_context_small():
    ignored = (ROOT / ".dockerignore").read_text().split()
    for path in (".git", ".venv", "tests/", "trainer/", "build/*"):
        assert path in ignored
    assert "!build/sandbox-wheels" in ignored  # the wheelhouse is the one thing of build/ the image needs
