"""The sandbox check every command that plays episodes makes before it starts (trainer/setup/sandbox_check.py), on
real servers at loopback ports: a port nothing listens on, a live server, one that wants an API key; and each
command refusing a dead `env.sandbox_url` with one line and exit 2, having written nothing."""

from __future__ import annotations

import os
import socket

import pytest

from app.cli import main
from sandbox.deploy.local_server import start_server
from trainer.config.errors import ConfigError
from trainer.setup.build import build_config
from trainer.setup.sandbox_check import evaluation_sandbox, sandbox_problem, states_sandbox_url

KEY = "the-right-key"


def uid_base() -> int:
    # this pid's slot of tests/trainer/runtime/test_sandbox_outage.py's scheme, below the ranges used there
    return 30000 + (os.getpid() % 40) * 1500 + 500


def dead_url() -> str:
    with socket.socket() as s:  # a loopback port nothing listens on once the socket closes
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture(scope="module")
def keyed_url():
    with start_server(workers=1, max_sessions=0, uid_base=uid_base(), preload_heavy="", api_key=KEY) as srv:
        yield srv.url


def test_a_dead_port_is_down_and_the_line_says_how_to_start_it_or_drop_it():
    gone = dead_url()
    problem = sandbox_problem(gone)
    assert problem is not None and problem.down and problem.url == gone
    line = problem.line()
    port = gone.rsplit(":", 1)[1]
    assert line.startswith(f"env.sandbox_url: the sandbox at {gone} does not answer (GET /v1/ping: ")
    assert f"start it (alprl sandbox serve --port {port})" in line and line.endswith("(env.sandbox_url=)")
    assert "\n" not in line


def test_the_key_is_checked_where_the_service_guards_it(keyed_url, monkeypatch):
    monkeypatch.delenv("SANDBOX_API_KEY", raising=False)
    none = sandbox_problem(keyed_url)  # the ping is open: only the guarded route tells
    assert none is not None and not none.down and "SANDBOX_API_KEY is not set" in none.line()
    monkeypatch.setenv("SANDBOX_API_KEY", "a-wrong-key")
    wrong = sandbox_problem(keyed_url)
    assert wrong is not None and not wrong.down and "the one SANDBOX_API_KEY holds" in wrong.line()
    monkeypatch.setenv("SANDBOX_API_KEY", KEY)
    assert sandbox_problem(keyed_url) is None
    gone = dead_url()
    assert sandbox_problem(f"{keyed_url},{gone}").url == gone  # every endpoint of a list must answer


def test_evaluation_falls_back_in_process_only_for_the_runs_own_gone_service(keyed_url, monkeypatch):
    gone = dead_url()
    inherited = build_config(None, [f"env.sandbox_url={gone}"])
    assert gone in evaluation_sandbox(inherited, stated=False) and inherited.env.sandbox_url == ""
    with pytest.raises(ConfigError, match="does not answer"):  # stated on the command line: it must answer
        evaluation_sandbox(build_config(None, [f"env.sandbox_url={gone}"]), stated=True)
    monkeypatch.delenv("SANDBOX_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="SANDBOX_API_KEY"):  # the service is there: a wrong key is no fallback
        evaluation_sandbox(build_config(None, [f"env.sandbox_url={keyed_url}"]), stated=False)
    monkeypatch.setenv("SANDBOX_API_KEY", KEY)
    live = build_config(None, [f"env.sandbox_url={keyed_url}"])
    assert evaluation_sandbox(live, stated=True) is None and live.env.sandbox_url == keyed_url
    assert states_sandbox_url(["eval_samples=2", " env.sandbox_url = "]) and not states_sandbox_url(["env.id=x"])


@pytest.mark.parametrize("command", ["train", "demo", "experiment", "eval", "robustness"])
def test_every_command_that_plays_episodes_refuses_a_dead_sandbox_in_one_line(command, tmp_path, tiny_model_dir,
                                                                              capsys):
    gone, out = dead_url(), tmp_path / "out"
    argv = {"train": ["train", f"output_dir={out}"],
            "demo": ["demo", f"output_dir={out}", f"sft.output_dir={out / 'sft'}"],
            "experiment": ["experiment", "--exploratory", "alp", "--scale", "smoke", "--out", str(out)],
            "eval": ["eval", "--model", str(tiny_model_dir), "--bench", "tir", "--tasks", "2", "--out", str(out)],
            "robustness": ["robustness", "--checkpoint", str(tiny_model_dir), "--out", str(out)]}[command]
    model_files = sorted(p.name for p in tiny_model_dir.iterdir())
    assert main([*argv, f"env.sandbox_url={gone}"]) == 2
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1 and not captured.out, captured
    assert lines[0].startswith(f"alprl {command}: error: env.sandbox_url: the sandbox at {gone} does not answer")
    assert not out.exists() and sorted(p.name for p in tiny_model_dir.iterdir()) == model_files
