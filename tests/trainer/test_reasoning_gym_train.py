"""`alprl train` on reasoning-gym datasets (env.dataset=reasoning_gym:...), end to end on the tiny TIR warm start:
the train split is drawn, steps run, held-out evaluation plays the test split with reasoning-gym's scorer, and the
run's metadata names the source and the reasoning-gym version instead of a file fingerprint."""

from __future__ import annotations

import json

import pytest
from tiny_tir import SMALL

pytest.importorskip("reasoning_gym", reason="reasoning-gym not installed (the rg extra)")

import reasoning_gym  # noqa: E402

from app.cli import main  # noqa: E402
from envs.boxed import extract_boxed  # noqa: E402
from envs.datasets import reasoning_gym as rg  # noqa: E402
from trainer.runtime.run_meta import read_run_meta  # noqa: E402

pytestmark = pytest.mark.smoke
SOURCE = "reasoning_gym:basic_arithmetic,spell_backward"
OPTIONS = {"size": 8, "eval_size": 2}


def test_train_runs_on_reasoning_gym_and_evaluates_on_its_held_out_problems(tmp_path, sft_dir, capsys):
    run = tmp_path / "run"
    code = main(["train", "--no-progress", *SMALL, f"sft.output_dir={sft_dir}", f"output_dir={run}", "steps=2",
                 "save_every=2", "eval_tasks=4", "eval_samples=1", f"env.dataset={SOURCE}",
                 *(f"env.reasoning_gym.{k}={v}" for k, v in OPTIONS.items())])
    assert code == 0, capsys.readouterr().err
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2] and "rollout/reward" in records[-1]
    assert {"eval/success/basic_arithmetic", "eval/success/spell_backward"} <= set(records[-1])
    evaluated = [json.loads(line) for line in (run / "eval" / "step_2.jsonl").read_text().splitlines()]
    held_out = rg.load_split(SOURCE, "test", OPTIONS)
    assert [r["task_id"] for r in evaluated] == [p.id for p in held_out]  # round-robin over the two datasets
    for r, problem in zip(evaluated, held_out, strict=True):
        scorer = reasoning_gym.get_score_answer_fn(problem.name)
        assert r["reward"] == scorer(extract_boxed(r["response"]), problem.entry)
    meta = read_run_meta(run)["datasets"]
    assert meta == {"env.dataset": {"path": SOURCE, "sha256_16": f"reasoning-gym {rg.package_version()}"}}
