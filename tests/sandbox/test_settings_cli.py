"""Settings from the environment, the `alprl-sandbox` command line, and the local-server helper."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from conftest import fresh_uid_base

from sandbox.deploy.cli import build_parser, main
from sandbox.deploy.local_server import ServerStartError, serve_in_background, start_server
from sandbox.settings import LAYERS, Settings, SettingsError, describe, env_name


def test_env_variables_map_onto_fields():
    s = Settings.from_env({"SANDBOX_WORKERS": "3", "SANDBOX_MAX_RUN_TIMEOUT_S": "12.5", "SANDBOX_LAYERS": "uid,net",
                           "ALPRL_SANDBOX_ALLOW_UNSAFE": "1", "MY_POD_NAME": "pod-7", "UNRELATED": "x"})
    assert (s.workers, s.max_run_timeout_s, s.allow_unsafe, s.pod_name) == (3, 12.5, True, "pod-7")
    assert s.requested_layers() == {"uid", "net"} and s.worker_count == 3
    assert Settings.from_env({}).requested_layers() == set(LAYERS)
    assert Settings.from_env({"SANDBOX_LAYERS": "none"}).requested_layers() == frozenset()


@pytest.mark.parametrize("env, fragment", [
    ({"SANDBOX_WORKERS": "many"}, "SANDBOX_WORKERS='many': expected a int"),
    ({"SANDBOX_OVERLOAD_STATUS": "500"}, "SANDBOX_OVERLOAD_STATUS=500: expected 429, 503 or 504"),
    ({"SANDBOX_LAYERS": "uid,gvisor"}, "unknown layer(s) ['gvisor']"),
    ({"SANDBOX_UID_BASE": "0"}, "never a system or root uid"),
    ({"SANDBOX_REQUIRE_SECCOMP": "1", "SANDBOX_LAYERS": "uid,net"}, "add 'seccomp' to the layers"),
    ({"ALPRL_SANDBOX_ALLOW_UNSAFE": "maybe"}, "ALPRL_SANDBOX_ALLOW_UNSAFE='maybe'"),
])
def test_bad_values_name_the_variable(env, fragment):
    with pytest.raises(SettingsError) as info:
        Settings.from_env(env)
    assert fragment in str(info.value)


def test_every_setting_is_documented_once():
    rows = describe()
    assert len(rows) == len(Settings.__dataclass_fields__)
    assert all(doc for _, _, doc in rows)
    assert env_name("allow_unsafe") == "ALPRL_SANDBOX_ALLOW_UNSAFE" and env_name("workers") == "SANDBOX_WORKERS"


def test_serve_help_lists_flags_and_environment(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["serve", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for text in ("--host", "--port", "--workers", "SANDBOX_MAX_QUEUE", "ALPRL_SANDBOX_ALLOW_UNSAFE"):
        assert text in out
    assert build_parser().parse_args(["serve", "--port", "0"]).port == 0


def test_bad_environment_exits_2_with_one_line(monkeypatch, capsys):
    monkeypatch.setenv("SANDBOX_MAX_QUEUE", "lots")
    assert main(["serve"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "SANDBOX_MAX_QUEUE='lots'" in err


def test_console_script_is_installed():
    script = Path(sys.executable).with_name("alprl-sandbox")
    assert script.exists(), "reinstall the project (pip install -e .) to get the alprl-sandbox script"
    out = subprocess.run([str(script), "serve", "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "SANDBOX_WORKERS" in out.stdout


def test_serve_in_background_starts_answers_and_stops():
    with start_server(workers=1, max_sessions=0, uid_base=fresh_uid_base(), preload_heavy="") as server:
        assert httpx.get(f"{server.url}/v1/ping").json() == "pong"
        pid = server.proc.pid
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_serve_in_background_reports_a_server_that_cannot_start():
    with pytest.raises(ServerStartError, match="SANDBOX_UID_BASE"):
        with serve_in_background(uid_base=5):
            pass
    with pytest.raises(TypeError, match="unknown setting 'wokers'"):
        with serve_in_background(wokers=2):
            pass
