"""`alprl train` on a dataset file, end to end on the tiny TIR warm start (the issue's acceptance line), and
single-turn RL on alprl/Math-v0 from the same model."""

from __future__ import annotations

import json

import pytest
from tiny_tir import SMALL

from app.cli import main
from envs.datasets import fingerprint
from trainer.runtime.run_meta import RUN_META_FILE, read_run_meta, source_commit

pytestmark = pytest.mark.smoke


def write_math500(path, n):
    rows = [{"problem": f"Compute {100 + i} * {200 + i}.", "solution": "", "answer": str((100 + i) * (200 + i)),
             "subject": "Arithmetic", "level": 1, "unique_id": f"test/arithmetic/{i}.json",
             "split": "test" if i < 2 else "train"} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _train(tmp_path, sft_dir, capsys, *overrides):
    capsys.readouterr()
    code = main(["train", "--no-progress", *SMALL, f"sft.output_dir={sft_dir}", f"output_dir={tmp_path}",
                 "steps=2", "save_every=2", "eval_tasks=2", "eval_samples=1", *overrides])
    assert code == 0, capsys.readouterr().err
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    evaluated = [json.loads(line) for line in (tmp_path / "eval" / "step_2.jsonl").read_text().splitlines()]
    return records, evaluated


def test_train_runs_the_tiny_tir_recipe_on_a_dataset_file(tmp_path, sft_dir, capsys):
    data = write_math500(tmp_path / "arith.jsonl", 10)
    records, evaluated = _train(tmp_path / "run", sft_dir, capsys, f"env.dataset={data}",
                                "env.dataset_split_field=split")
    assert [r["step"] for r in records] == [1, 2]
    assert all(k in records[-1] for k in ("rollout/reward", "loss/policy", "eval/success"))
    assert [r["task_id"] for r in evaluated] == ["arith:test/arithmetic/0.json", "arith:test/arithmetic/1.json"]
    assert {r["task_type"] for r in evaluated} == {"math500"}
    # The bytes it trained on are named in the run's metadata and in the checkpoint's.
    for where in (tmp_path / "run", tmp_path / "run" / "checkpoints" / "step_2"):
        meta = read_run_meta(where)
        assert meta is not None, f"no {RUN_META_FILE} in {where}"
        assert meta["datasets"] == {"env.dataset": {"path": str(data.resolve()), "sha256_16": fingerprint(data)}}
        assert meta["source"] == source_commit()  # the code it ran: this checkout's commit (None outside git)


def test_train_runs_single_turn_math_from_a_model(tmp_path, sft_dir, capsys):
    data = write_math500(tmp_path / "arith.jsonl", 10)
    records, evaluated = _train(tmp_path / "run", sft_dir, capsys, "env.id=alprl/Math-v0", f"model.path={sft_dir}",
                                f"env.dataset={data}", "env.dataset_split_field=split")
    assert [r["step"] for r in records] == [1, 2] and "rollout/reward" in records[-1]
    assert records[-1]["rollout/turns"] == 1.0 and all(r["tool_calls"] == 0 for r in evaluated)


def test_a_resumed_run_warns_when_its_dataset_file_changed(tmp_path, sft_dir, capsys, caplog):
    data = write_math500(tmp_path / "arith.jsonl", 10)
    run = tmp_path / "run"
    _train(run, sft_dir, capsys, f"env.dataset={data}", "env.dataset_split_field=split")
    began = read_run_meta(run)["datasets"]["env.dataset"]["sha256_16"]
    write_math500(data, 12)  # edited after the run began
    code = main(["train", "--no-progress", "--resume", *SMALL, f"sft.output_dir={sft_dir}", f"output_dir={run}",
                 "steps=3", "save_every=3", "eval_tasks=0", f"env.dataset={data}", "env.dataset_split_field=split"])
    assert code == 0, capsys.readouterr().err
    assert read_run_meta(run)["datasets"]["env.dataset"]["sha256_16"] == began  # what the run began on
    assert read_run_meta(run / "checkpoints" / "step_3")["datasets"]["env.dataset"]["sha256_16"] == began
    warned = [r.getMessage() for r in caplog.records if "changed since this run began" in r.getMessage()]
    assert warned and began in warned[0] and fingerprint(data) in warned[0]
