"""docker-compose.yml → `docker run` flags: the bench's container runs with the compose file's own hardening."""

from __future__ import annotations

import pytest

from sandbox.deploy.compose_flags import docker_run_flags, service_config


def test_sandbox_service_flags_carry_the_compose_hardening(monkeypatch):
    monkeypatch.delenv("SANDBOX_WORKERS", raising=False)
    monkeypatch.setenv("SANDBOX_CPUS", "1.5")
    flags = docker_run_flags("sandbox", environment={"SANDBOX_MAX_QUEUE": "9"})
    svc = service_config("sandbox")
    assert {f"--cap-add={c}" for c in svc["cap_add"]} <= set(flags) and "--cap-drop=ALL" in flags
    assert {"--read-only", "--init", "--user=0:0", "--security-opt=no-new-privileges:true"} <= set(flags)
    assert "--tmpfs=/tmp:rw,size=256m,nosuid,nodev" in flags and "--ulimit=core=0:0" in flags
    assert "--cpus=1.5" in flags  # ${SANDBOX_CPUS:-2} interpolated from the environment, as compose does
    env = [flags[i + 1] for i, f in enumerate(flags) if f == "-e"]
    assert "SANDBOX_WORKERS=4" in env  # the default of ${SANDBOX_WORKERS:-4}
    assert "SANDBOX_MAX_QUEUE=9" in env and "SANDBOX_MAX_QUEUE=512" not in env  # the caller's entry wins


def test_list_form_environment_and_unknown_service(tmp_path):
    compose = tmp_path / "compose.yml"
    compose.write_text("services:\n  svc:\n    environment: ['A=1', 'B=${MISSING:-x}']\n    pids_limit: 7\n")
    flags = docker_run_flags("svc", path=compose)
    assert flags == ["--pids-limit=7", "-e", "A=1", "-e", "B=x"]
    with pytest.raises(KeyError, match="no service 'other'"):
        service_config("other", path=compose)
