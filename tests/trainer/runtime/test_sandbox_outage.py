"""A sandbox outage during training (issue 21, item 5): a real server behind `env.sandbox_url` is SIGKILLed
mid-run. The steps after the kill count `rollout/sandbox_errors` and train on none of those episodes' tokens;
with `env.sandbox_max_failing_steps=2` `alprl train` stops with one line and exit status 4, keeping the
checkpoint; once a server answers on the same port again, `--resume` runs to the end without sandbox errors."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from tiny_tir import SMALL

import trainer.loop as loop
from sandbox.deploy.local_server import start_server
from trainer.runtime.checkpoint import latest_checkpoint
from trainer.runtime.logger import read_metrics
from trainer.runtime.outage import EXIT_SANDBOX_DOWN, SandboxOutage
from trainer.setup.build import build_config

pytestmark = pytest.mark.smoke
STEPS, KILL_AFTER = 6, 1


def uid_base() -> int:
    # the top of this pid's slot-uid range of tests/sandbox/conftest.py (its servers count up from the bottom)
    return 30000 + (os.getpid() % 40) * 1500 + 1300


def cli_train(overrides: list[str]) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "app.cli", "train", "--no-progress", "--resume", *overrides]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def test_an_outage_is_masked_counted_stops_the_run_and_resume_continues(tmp_path, sft_dir, monkeypatch):
    with start_server(workers=2, max_sessions=0, uid_base=uid_base(), preload_heavy="") as srv:
        url = srv.url
        overrides = SMALL + [f"sft.output_dir={sft_dir}", f"output_dir={tmp_path}", f"env.sandbox_url={url}",
                             "env.sandbox_retry_s=0.3", "env.sandbox_max_failing_steps=2", "save_every=100",
                             f"steps={STEPS}"]
        episodes: dict[int, list[tuple[bool, list[int]]]] = {}
        learn = loop.learn

        def learn_then_kill(c, cfg, algos, trajs, step, sync=True):  # records what each step trains on
            episodes[step] = [(bool(t.info.get("sandbox_error")), list(t.loss_mask)) for t in trajs]
            result = learn(c, cfg, algos, trajs, step, sync=sync)
            if step == KILL_AFTER:  # the server and its zygotes, no graceful shutdown
                os.killpg(srv.proc.pid, signal.SIGKILL)
                srv.proc.wait(timeout=10)
            return result

        monkeypatch.setattr(loop, "learn", learn_then_kill)
        with pytest.raises(SandboxOutage, match=url):
            loop.train(build_config(None, overrides), show_progress=False)
        monkeypatch.undo()

    errors = {r["step"]: r["rollout/sandbox_errors"] for r in read_metrics(tmp_path)}
    assert errors == {1: 0.0, 2: errors[2], 3: errors[3]} and errors[2] > 0 and errors[3] > 0
    for step in (2, 3):
        hit = [mask for error, mask in episodes[step] if error]
        assert len(hit) == errors[step] and all(not any(mask) for mask in hit)  # none of their tokens trains
    assert latest_checkpoint(tmp_path).name == "step_3"  # saved before stopping (save_every=100)

    down = cli_train(overrides)  # steps 4 and 5 against the dead port
    lines = [line for line in down.stderr.splitlines() if line.strip()]
    assert down.returncode == EXIT_SANDBOX_DOWN, down.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("alprl train: error: the sandbox at " + url), down.stderr
    assert "--resume" in lines[0] and "step 5" in lines[0]
    assert latest_checkpoint(tmp_path).name == "step_5"

    port = int(url.rsplit(":", 1)[1])
    with start_server(port=port, workers=2, max_sessions=0, uid_base=uid_base() + 50, preload_heavy=""):
        back = cli_train(overrides)
    assert back.returncode == 0, back.stderr[-3000:]
    records = read_metrics(tmp_path)
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    assert records[-1]["rollout/sandbox_errors"] == 0.0
    assert records[-1]["rollout/tool_calls"] > 0  # the episodes did reach the sandbox again


def test_a_sandbox_that_refuses_the_key_ends_the_run_in_one_line(tmp_path, sft_dir):
    # the service requires SANDBOX_API_KEY and this trainer has none: no retries, no traceback, exit 2
    with start_server(workers=1, uid_base=uid_base() - 100, preload_heavy="", api_key="the-right-key") as srv:
        overrides = [*SMALL, f"sft.output_dir={sft_dir}", f"output_dir={tmp_path}", "steps=1",
                     f"env.sandbox_url={srv.url}"]
        env = {k: v for k, v in os.environ.items() if k != "SANDBOX_API_KEY"}
        proc = subprocess.run([sys.executable, "-m", "app.cli", "train", "--no-progress", *overrides],
                              capture_output=True, text=True, timeout=300, env=env)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert len(lines) == 1 and srv.url.split("//")[1] in lines[0] and "key" in lines[0].lower()
