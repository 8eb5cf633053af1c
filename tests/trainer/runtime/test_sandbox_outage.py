"""A sandbox outage during training: a real server behind `env.sandbox_url` is SIGKILLed mid-run.

The steps after the kill fail their tool-calling episodes on the sandbox: each such step trains on none of those
episodes' tokens, is marked in its metrics record (`rollout/infra_over_bound`) and in the run report, and prints one
warning line naming the kind and the count; `rollout.infra_patience=2` such steps stop the run with a checkpoint.
`alprl train --resume` against the dead port is refused before it starts (one line, exit 2, nothing written); once a
server answers on the same port again, it runs to the end with the same result as an uninterrupted run from that
checkpoint (here: a copy of the run directory resumed beside it)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file
from tiny_tir import SMALL

import trainer.loop as loop
from app.cli import main
from evaluation.reports.run_report import write_report
from sandbox.deploy.local_server import start_server
from trainer.runtime.checkpoint import latest_checkpoint
from trainer.runtime.logger import read_metrics
from trainer.runtime.outage import InfraOutage
from trainer.setup.build import build_config

pytestmark = pytest.mark.smoke
STEPS, KILL_AFTER = 5, 1
SAME = ("rollout/reward", "rollout/tool_calls", "rollout/infra_frac", "loss/policy", "actor/grad_norm")
"""What an uninterrupted run and the resumed one must agree on, step by step."""


def uid_base() -> int:
    # the top of this pid's slot-uid range of tests/sandbox/conftest.py (its servers count up from the bottom)
    return 30000 + (os.getpid() % 40) * 1500 + 1300


def cli_train(overrides: list[str]) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "app.cli", "train", "--no-progress", "--resume", *overrides]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def files_under(path) -> dict[str, int]:
    return {str(p.relative_to(path)): p.stat().st_mtime_ns for p in path.rglob("*")}


def test_an_outage_warns_stops_with_a_checkpoint_and_resume_continues(tmp_path, sft_dir, monkeypatch, capsys):
    run, twin = tmp_path / "run", tmp_path / "twin"
    with start_server(workers=2, max_sessions=0, uid_base=uid_base(), preload_heavy="") as srv:
        url = srv.url
        # the tiny model answers without the tool in a third to a half of its episodes, which no outage fails:
        # a bound of a quarter puts every step after the kill over it
        common = SMALL + [f"sft.output_dir={sft_dir}", f"env.sandbox_url={url}", "env.sandbox_retry_s=0.3",
                          "rollout.max_infra_frac=0.25", "rollout.infra_patience=2", "save_every=100",
                          f"steps={STEPS}", "torch_threads=1"]
        episodes: dict[int, list[tuple[str | None, list[int]]]] = {}
        learn = loop.learn

        def learn_then_kill(c, cfg, algos, trajs, step, sync=True):  # records what each step trains on
            episodes[step] = [(t.infra_failure, list(t.loss_mask)) for t in trajs]
            result = learn(c, cfg, algos, trajs, step, sync=sync)
            if step == KILL_AFTER:  # the server and its zygotes, no graceful shutdown
                os.killpg(srv.proc.pid, signal.SIGKILL)
                srv.proc.wait(timeout=10)
            return result

        monkeypatch.setattr(loop, "learn", learn_then_kill)
        with pytest.raises(InfraOutage, match=f"the sandbox at {url} failed .*, 2 steps in a row") as stop:
            loop.train(build_config(None, [*common, f"output_dir={run}"]), show_progress=False)
        monkeypatch.undo()

    assert "the checkpoint of step 3 is kept" in str(stop.value) and "--resume" in str(stop.value)
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("alprl: warning:")]
    assert len(warnings) == 1 and warnings[0].startswith(f"alprl: warning: the sandbox at {url} failed ")
    records = {r["step"]: r for r in read_metrics(run)}
    sandbox = {step: r["rollout/infra_failures/sandbox_error"] for step, r in records.items()}
    assert f"step 2's episodes (sandbox {sandbox[2]:g})" in warnings[0]  # the kind and the count
    assert "this is 1" in warnings[0] and "rollout.infra_patience" in warnings[0]
    assert {s: r["rollout/infra_over_bound"] for s, r in records.items()} == {1: 0.0, 2: 1.0, 3: 1.0}
    assert sandbox[1] == 0 and all(records[s]["rollout/infra_frac"] > 0.25 for s in (2, 3))
    for step in (2, 3):  # the failed episodes train on none of their tokens
        hit = [mask for reason, mask in episodes[step] if reason == "sandbox_error"]
        assert len(hit) == sandbox[step] and all(not any(mask) for mask in hit)
    assert latest_checkpoint(run).name == "step_3"  # saved before stopping (save_every=100)
    report = write_report(run).read_text()
    assert "Infrastructure failures" in report and "Steps over rollout.max_infra_frac: 2, 3 " in report

    before = files_under(run)  # the port is dead: refused before anything starts
    assert main(["train", "--no-progress", "--resume", *common, f"output_dir={run}"]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"alprl train: error: env.sandbox_url: the sandbox at {url} "
                                                   "does not answer"), lines
    assert "alprl sandbox serve --port" in lines[0] and "env.sandbox_url=" in lines[0]
    assert files_under(run) == before

    shutil.copytree(run, twin)
    port = int(url.rsplit(":", 1)[1])
    with start_server(port=port, workers=2, max_sessions=0, uid_base=uid_base() + 50, preload_heavy=""):
        back = cli_train([*common, f"output_dir={run}"])
        assert back.returncode == 0, back.stderr[-3000:]
        loop.train(build_config(None, [*common, f"output_dir={twin}"]), resume=True, show_progress=False)
    resumed, uninterrupted = read_metrics(run), read_metrics(twin)
    assert [r["step"] for r in resumed] == [r["step"] for r in uninterrupted] == list(range(1, STEPS + 1))
    for a, b in zip(resumed[3:], uninterrupted[3:], strict=True):
        assert a["rollout/infra_frac"] == 0.0 and a["rollout/tool_calls"] > 0  # the sandbox answers again
        assert {k: a[k] for k in SAME} == pytest.approx({k: b[k] for k in SAME}, abs=1e-6)
    weights = [load_file(str(d / "checkpoints" / f"step_{STEPS}" / "model.safetensors")) for d in (run, twin)]
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])


def test_a_sandbox_that_refuses_the_key_is_refused_before_the_run_starts(tmp_path, sft_dir, monkeypatch, capsys):
    # the service requires SANDBOX_API_KEY and this trainer has none: one line naming the URL and the key, exit 2
    monkeypatch.delenv("SANDBOX_API_KEY", raising=False)
    with start_server(workers=1, uid_base=uid_base() - 100, preload_heavy="", api_key="the-right-key") as srv:
        code = main(["train", "--no-progress", *SMALL, f"sft.output_dir={sft_dir}", f"output_dir={tmp_path / 'run'}",
                     "steps=1", f"env.sandbox_url={srv.url}"])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, lines
    assert srv.url in lines[0] and "SANDBOX_API_KEY is not set" in lines[0] and "env.sandbox_url=" in lines[0]
    assert not (tmp_path / "run").exists()
