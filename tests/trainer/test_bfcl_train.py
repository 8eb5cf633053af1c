"""`alprl sft` and `alprl train` on BFCL (`env.id=alprl/BFCL-v0`), end to end in process: the ground-truth player's
warm start on a tiny model, three GRPO steps whose episodes play BFCL's entries through the BFCL agent on the
transformers engine, and held-out evaluation on BFCL's test entries scored by its checker.

Minutes are the prompt's: the episode's 32 function docs run to thousands of tokens on the tiny vocabulary."""

from __future__ import annotations

import json
import math

import pytest

from app.cli import main

pytestmark = pytest.mark.smoke
TINY = ["env.id=alprl/BFCL-v0", "env.task_types=[base]", "rollout.engine=hf", "model.hidden_size=64",
        "model.num_layers=2", "model.num_heads=2", "model.num_kv_heads=1", "model.intermediate_size=128",
        "sft.num_examples=6", "sft.epochs=1", "sft.batch_size=3", "rollout.prompts_per_step=1",
        "rollout.group_size=2", "rollout.max_new_tokens=24", "rollout.max_response_tokens=800",
        "optim.micro_batch_size=2"]


def test_grpo_trains_three_steps_on_bfcl_and_evaluates_with_its_checker(tmp_path, capsys):
    run = tmp_path / "run"
    common = [*TINY, f"output_dir={run}", f"sft.output_dir={tmp_path / 'sft'}"]
    assert main(["sft", "--no-progress", *common]) == 0, capsys.readouterr().err
    warm = json.loads((tmp_path / "sft" / "sft_meta.json").read_text())
    assert warm["expert_success"] == 1.0  # the ground-truth player wins every entry by BFCL's checker
    code = main(["train", "--no-progress", *common, "steps=3", "save_every=3", "eval_tasks=2", "eval_samples=1"])
    assert code == 0, capsys.readouterr().err
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if r["step"] > 0]
    assert [r["step"] for r in steps] == [1, 2, 3]
    assert all(math.isfinite(r["loss/policy"]) and r["rollout/turns"] >= 1 for r in steps)
    evaluated = [json.loads(line) for line in (run / "eval" / "step_3.jsonl").read_text().splitlines()]
    assert [r["task_id"] for r in evaluated] == ["test/0", "test/1"]  # BFCL's first two base entries
    assert all(r["reward"] in (0.0, 1.0) for r in evaluated)
    # `alprl eval --bench bfcl:...`: one benchmark per category, BFCL's checker scoring each episode
    out = tmp_path / "eval"
    assert main(["eval", "--model", str(run / "checkpoints" / "step_3"), "--bench", "bfcl:base,miss_param",
                 "--tasks", "2", "--k", "1", "--engine", "hf", "--out", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "bfcl:base" in printed and "bfcl:miss_param" in printed
    summary = json.loads((out / "summary.json").read_text())
    for name in ("bfcl:base", "bfcl:miss_param"):
        assert summary["benchmarks"][name]["problems"] == 2 and 0.0 <= summary["benchmarks"][name]["avg"] <= 1.0
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert {r["bench"] for r in records} == {"bfcl:base", "bfcl:miss_param"}


def test_bfcl_names_each_category_as_a_benchmark():
    from app.eval_plan import parse_benches

    assert parse_benches(["bfcl"]) == [(f"bfcl:{c}", "") for c in ("base", "miss_func", "miss_param", "long_context")]
    assert parse_benches(["bfcl:base,miss_func,a=F.jsonl"]) == [("bfcl:base", ""), ("bfcl:miss_func", ""),
                                                                 ("a", "F.jsonl")]
    with pytest.raises(ValueError, match="BFCL's multi-turn categories are"):
        parse_benches(["bfcl:simple"])
