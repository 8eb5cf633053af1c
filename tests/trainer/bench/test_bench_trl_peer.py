"""bench/trl_peer.py with tiny counts: a random tiny model as the warm start of both trainers, 2 steps, 1 seed,
alprl on the transformers engine, TRL's GRPOTrainer with HF generate, `alprl eval` of both final models on one task.

Checks the report's shape (the mapping, the table rows, the ratio lines, the token-for-token prompt check and the
task-order check, the records in the JSON) and one-line errors on bad input; no figure is asserted, since timings
on a shared machine say nothing about correctness.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.smoke

BENCH = Path(__file__).resolve().parents[3] / "bench" / "trl_peer.py"
TINY = ["rollout.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=8",
        "rollout.max_response_tokens=8", "optim.micro_batch_size=2"]
ROWS = ("runs ok", "start-up s", "step s", "generation s", "rest s", "wall s", "peak memory GiB",
        "generation tokens/s", "reward", "held-out success")


def _load_bench():
    pytest.importorskip("trl", reason="TRL not installed (bench extra)")
    spec = importlib.util.spec_from_file_location("trl_peer_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_bench_runs_both_trainers_on_alprls_prompts(tiny_model_dir, tmp_path, capsys):
    bench = _load_bench()
    out = tmp_path / "bench.json"
    rc = bench.main(["--model", str(tiny_model_dir), "--steps", "2", "--seeds", "0", "--alprl-engine", "hf",
                     "--eval-tasks", "1", "--eval-samples", "1", "--eval-engine", "hf", "--out", str(out), *TINY])
    text = capsys.readouterr().out
    assert rc == 0, text
    # the mapping opens the report
    for line in ("loss_type='bnpo'", "delta=10.0", "beta=0.001", "steps_per_generation=2", "not matched:"):
        assert line in text, line
    for label in ROWS:  # one row per figure, a cell per variant
        assert re.search(rf"^\| *{re.escape(label)}[^|]*\|[^|]+\|[^|]+\|$", text, re.M), label
    figure = r"\d+\.\d+x"
    assert re.search(rf"^ratio alprl\[hf\]/trl\[hf\]: start-up {figure}, step {figure}, wall {figure}, "
                     rf"memory {figure}, tokens/s {figure}$", text, re.M), text
    assert re.search(rf"^ratio alprl\[hf\]/best peer: start-up {figure} \(trl\[hf\]\), ", text, re.M), text
    assert re.search(r"^peer ahead: ", text, re.M), text
    assert re.search(r"^prompts checked token for token: .* \(4 prompts each, every row", text, re.M), text
    assert re.search(r"^task order checked: .* \(2 steps a run\)", text, re.M), text

    data = json.loads(out.read_text())
    records = data["records"]
    assert [(r["variant"], r["seed"], r["status"]) for r in records] == [("alprl[hf]", 0, "ok"), ("trl[hf]", 0, "ok")]
    assert records[1]["prompts_checked"] == 4 and records[1]["order_checked"] == 2
    for record in records:
        assert len(record["per_step"]) == 2
    assert set(data["summary"]) == {"alprl[hf]", "trl[hf]"}
    assert ["loss_type", "bnpo"] in [row[:2] for row in data["mapping"]["trl[hf]"]]
    assert data["records"][0]["eval_success"] is not None and data["records"][1]["eval_success"] is not None


@pytest.mark.parametrize("argv, says", [
    (["--alprl-engine", "hf,warp"], "--alprl-engine: unknown engine warp; valid: auto, vllm, hf"),
    (["algo.correction=tis"], "algo.correction='tis' has no TRL counterpart"),
    (["--seeds", "0,x"], "--seeds: expected comma-separated integers"),
])
def test_bad_input_is_one_line(argv, says, tiny_model_dir, capsys):
    bench = _load_bench()
    assert bench.main(["--model", str(tiny_model_dir), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("trl_peer: error: ") and says in err[0], err


def test_a_missing_warm_start_names_the_way_out(tmp_path, capsys):
    bench = _load_bench()
    assert bench.main([f"sft.output_dir={tmp_path / 'none'}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no warm start at" in err[0] and "--build-start" in err[0], err


def test_the_prompt_check_names_the_first_different_token():
    trl_side = _load_bench().TRL

    class Tokenizes:  # stands in for the trainer: only TRL's tokenization path is called
        def _tokenize_prompts(self, prompts):
            return [[1, 2, 3], [4, 5, 7]], None, {}

    rows = [{"prompt": [], "step": 1, "task_index": 10}, {"prompt": [], "step": 1, "task_index": 11}]
    assert trl_side.check_prompts(Tokenizes(), rows, [[1, 2, 3], [4, 5, 7]]) == 2
    with pytest.raises(SystemExit, match=r"row 1 \(step 1, task 11\) at token 2: TRL \[7\] vs alprl \[6\]"):
        trl_side.check_prompts(Tokenizes(), rows, [[1, 2, 3], [4, 5, 6]])
    with pytest.raises(SystemExit, match=r"generation 1 played tasks \[11, 10\], alprl's step 1 plays \[10, 11\]"):
        trl_side.check_order([{"tasks": [11, 10]}], rows, 1)
