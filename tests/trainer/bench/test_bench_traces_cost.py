"""bench/traces_cost.py on two run folders written as `alprl train` writes them (metrics.jsonl, eval/step_*.jsonl,
run_meta.json, alprl_config.yaml): the held-out change, the per-step means and the ratios to the baseline."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml

BENCH = Path(__file__).resolve().parents[3] / "bench" / "traces_cost.py"
_spec = importlib.util.spec_from_file_location("traces_cost_bench", BENCH)
traces_cost = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(traces_cost)


def run_dir(root: Path, name: str, tokens: float, traces: float, won_after: list[bool], strip: bool) -> Path:
    run = root / name
    (run / "eval").mkdir(parents=True)
    steps = [{"step": k, "rollout/reward": 0.5, "perf/batch_tokens": tokens, "rollout/traces_per_episode": traces,
              "perf/step_s": 2.0 * traces, "perf/rollout_s": 1.0, "perf/update_s": traces,
              "rollout/sampled_tokens": 40.0} for k in (1, 2)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [{"step": 0, "eval/success": 0.5},
                                                                             *steps]))
    for step, won in ((0, [True, False, False, False]), (2, won_after)):
        (run / "eval" / f"step_{step}.jsonl").write_text(
            "".join(json.dumps({"index": i, "sample": 0, "won": w}) + "\n" for i, w in enumerate(won)))
    (run / "run_meta.json").write_text(json.dumps({"source": {"commit": "abc", "dirty": False}}))
    for step in (1, 2):  # as every checkpoint keeps the run config
        (run / "checkpoints" / f"step_{step}").mkdir(parents=True)
        (run / "checkpoints" / f"step_{step}" / "alprl_config.yaml").write_text(
            yaml.safe_dump({"env": {"think_history": ("strip" if strip else "keep") if step == 2 else "old"}}))
    return run


def test_the_run_against_its_one_stream_twin(tmp_path, capsys):
    base = run_dir(tmp_path, "keep", 1000.0, 1.0, [True, True, False, False], strip=False)
    strip = run_dir(tmp_path, "strip", 1500.0, 2.0, [True, True, True, False], strip=True)
    out = tmp_path / "traces.json"
    assert traces_cost.main(["--baseline", str(base), "--run", str(strip), "--out", str(out)]) == 0
    figures = json.loads(out.read_text())
    (run,) = figures["runs"]
    assert run["ratio_to_baseline"]["perf/batch_tokens"] == pytest.approx(1.5)
    assert run["ratio_to_baseline"]["perf/step_s"] == pytest.approx(2.0)
    assert run["held_out"]["before"] == 0.25 and run["held_out"]["after"] == 0.75
    assert run["held_out"]["diff"] == pytest.approx(0.5) and run["held_out"]["last_step"] == 2
    assert run["settings"]["env.think_history"] == "strip" and run["source"]["commit"] == "abc"
    assert figures["baseline"]["step_means"]["rollout/traces_per_episode"] == 1.0
    printed = capsys.readouterr().out
    assert "traces/episode 2.00" in printed and "perf/batch_tokens x1.50" in printed


def test_a_run_without_two_evaluations_is_one_clear_error(tmp_path):
    run = run_dir(tmp_path, "keep", 1000.0, 1.0, [True], strip=False)
    (run / "eval" / "step_2.jsonl").unlink()
    with pytest.raises(SystemExit, match="fewer than two held-out evaluations"):
        traces_cost.summarize(run)
