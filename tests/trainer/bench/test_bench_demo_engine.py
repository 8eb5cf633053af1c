"""bench/demo_engine.py and bench/step_profile.py with tiny counts: the demo recipe shrunk to a 2-layer model, a
40-episode SFT start, 2 RL steps of 2 × 2 episodes and 2 held-out tasks; the engine pair is the transformers
engine against `auto` (which picks it for this model on a CPU), so no vLLM start is paid here.

Checks each script's report (the rows, the runs, the engine `auto` chose, the JSON records) and one-line errors on
bad input; no figure is asserted, since timings on a shared machine say nothing about correctness.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.smoke

BENCH = Path(__file__).resolve().parents[3] / "bench"
TINY_MODEL = ["model.hidden_size=64", "model.num_layers=2", "model.num_heads=2", "model.num_kv_heads=1",
              "model.intermediate_size=128", "model.vocab_size=384"]
TINY_RUN = ["steps=2", "eval_tasks=2", "eval_samples=1", "rollout.prompts_per_step=2", "rollout.group_size=2"]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_demo_and_cell_run_with_each_engine(tmp_path, capsys):
    bench = _load("demo_engine")
    out = tmp_path / "bench.json"
    rc = bench.main(["--engines", "hf,auto", "--repeats", "1", "--cell-scale", "smoke", "--work",
                     str(tmp_path / "work"), "--out", str(out), *TINY_MODEL, "sft.num_examples=40", "sft.epochs=1",
                     f"sft.output_dir={tmp_path / 'sft'}", *TINY_RUN])
    text = capsys.readouterr().out
    assert rc == 0, text
    for kind in ("demo", "cell"):
        section = text.split(f"\n{kind}:\n")[1]
        assert section.startswith("| | hf | auto | ratio auto/hf |"), section
        for label in ("wall s", "start-up s", "RL step s", "generation s", "peak memory GiB",
                      "held-out success at the end"):
            assert re.search(rf"^\| *{re.escape(label)}[^|]*\|[^|]+\|[^|]+\|[^|]*\|$", section, re.M), (kind, label)
    records = json.loads(out.read_text())["records"]
    assert [(r["run"], r.get("engine")) for r in records] == [
        ("sft", None), ("demo", "hf"), ("cell", "hf"), ("demo", "auto"), ("cell", "auto")]
    assert all(r["rc"] == 0 for r in records)
    assert [r["engine_used"] for r in records[1:]] == ["hf", "hf", "hf", "hf"]  # auto's choice, read from its log
    demo = records[1]
    assert 0 <= demo["success_sft"] <= 1 and 0 <= demo["success"] <= 1 and demo["step_s"] > 0


@pytest.mark.parametrize("argv, says", [
    (["--engines", "hf,warp"], "--engines hf,warp: expected some of auto, vllm, hf"),
    (["--repeats", "0"], "--repeats 0: expected a positive number"),
    (["steps"], "overrides must be key=value"),
])
def test_bad_input_is_one_line(argv, says, capsys):
    assert _load("demo_engine").main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("demo_engine: error: ") and says in err[0], err


def test_step_profile_times_every_stage(tiny_model_dir, tmp_path, capsys):
    bench = _load("step_profile")
    out = tmp_path / "profile.json"
    rc = bench.main(["--config", "configs/math_tiny.yaml", "--steps", "3", "--out", str(out),
                     f"model.path={tiny_model_dir}", "rollout.engine=hf", "rollout.prompts_per_step=2",
                     "rollout.group_size=2", "rollout.max_response_tokens=8", "optim.micro_batch_size=2",
                     "diagnostics.every=1"])
    text = capsys.readouterr().out
    assert rc == 0, text
    data = json.loads(out.read_text())
    assert data["steps"] == [2, 3]
    mean = data["mean_s"]
    for label in ("rollouts", "old log-probs", "reference log-probs", "optimizer steps", "policy drift",
                  "weight sync", "step"):
        assert mean[label] > 0, (label, mean)
    assert mean["  env steps (thread-seconds)"] > 0
    # the timed stages lie inside the step: what no timer covers is small and not negative
    assert -1e-3 < data["uncovered_s"] < mean["step"], data
    assert re.search(r"^\| step \| [\d.]+ \| 100% \|$", text, re.M), text
