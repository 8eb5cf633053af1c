"""The long suite's report section on synthetic cells: counts per run and per arm in report.json/md, the figures
over the horizon in report.html, and no section for suites that do not ask for it."""

from __future__ import annotations

import json
from pathlib import Path

from evaluation.reports.experiment_report import write_experiment_report
from evaluation.reports.long_horizon_figures import (
    DYNAMICS_FIGURE,
    ENVELOPE_FIGURE,
    KL_FIGURE,
    SUCCESS_FIGURE,
)

STEPS = 12


def _metrics(seed: int, kl_spike: int | None, grad_spike: int | None, success: dict[int, float],
             blow_up: int | None = None) -> list[dict]:
    records = []
    for step in range(1, STEPS + 1):
        w = 0.05 * (1 + step / STEPS)
        rec = {"step": step, "rollout_corr/k3_kl": 1e-3 * (30 if step == kl_spike else 1 + 0.01 * seed),
               "diag/policy_kl_k3": 2e-3, "actor/grad_norm": 0.5 * (8 if step == grad_spike else 1),
               "diag/entropy": 0.3 - 0.01 * step, "rollout/reward": 0.5}
        rec |= {f"diag/ratio_{kind}_last/{q}": 1 + sign * w for kind in ("loss", "byp")
                for q, sign in (("p2", -1), ("p98", 1))}
        if step == blow_up:
            rec["diag/ratio_loss_last/p2"] = 1e-3
        if step in success:
            rec["eval/success"] = success[step]
        records.append(rec)
    return records


def _cell(out: Path, method: str, seed: int, records: list[dict]) -> dict:
    name = f"{method}__lag2__seed{seed}"
    run = out / name
    (run / "eval").mkdir(parents=True)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (run / "eval" / f"step_{STEPS}.jsonl").write_text("".join(
        json.dumps({"index": i, "won": (i + seed) % 2 == 0}) + "\n" for i in range(4)))
    info = {"cell": name, "arm": f"{method}/lag2", "method": method, "setting": "lag2", "seed": seed,
            "final_eval": f"eval/step_{STEPS}.jsonl", "final_metrics": {"eval/success": 0.5}, "wall_s": 60.0}
    (run / "cell.json").write_text(json.dumps(info))
    return {"name": name, "arm": info["arm"], "method": method, "setting": "lag2", "seed": seed}


def _experiment(tmp_path: Path, horizon_report: bool) -> Path:
    out = tmp_path / "long"
    out.mkdir()
    steady = {4: 0.5, 8: 0.55, 12: 0.6}
    cells = [_cell(out, "grpo", 0, _metrics(0, None, None, steady, blow_up=9)),
             _cell(out, "grpo", 1, _metrics(1, None, None, steady)),
             _cell(out, "token_mis", 0, _metrics(0, 7, 3, {4: 0.6, 8: 0.3, 12: 0.35})),  # collapsed at 8 and 12
             _cell(out, "token_mis", 1, _metrics(1, 5, None, steady))]
    plan = {"suite": "long", "doc": "d", "claim": "", "scale": "smoke", "config": "configs/demo.yaml",
            "horizon_report": horizon_report, "seeds": [0, 1], "steps": STEPS, "start": "sft", "overrides": [],
            "settings": {"lag2": ["rollout.policy_lag=2"]}, "arms": ["grpo/lag2", "token_mis/lag2"],
            "comparisons": [["token_mis/lag2", "grpo/lag2"]], "cells": cells}
    (out / "experiment.json").write_text(json.dumps(plan))
    return out


def test_the_long_report_counts_spikes_and_collapses_per_run_and_per_arm(tmp_path):
    out = _experiment(tmp_path, horizon_report=True)
    write_experiment_report(out)
    horizon = json.loads((out / "report.json").read_text())["long_horizon"]
    runs = {r["cell"]: r for r in horizon["runs"]}
    mis0 = runs["token_mis__lag2__seed0"]
    assert (mis0["kl_spikes"]["count"], mis0["kl_spikes"]["first_step"]) == (1, 7)
    assert (mis0["grad_norm_spikes"]["count"], mis0["grad_norm_spikes"]["first_step"]) == (1, 3)
    assert mis0["collapse"]["steps"] == [8, 12] and mis0["best_success"] == 0.6 and mis0["final_success"] == 0.35
    assert runs["grpo__lag2__seed0"]["envelope_excursions"]["steps"] == [9]
    assert runs["grpo__lag2__seed0"]["min_loss_ratio_p2"] == [9, 1e-3]
    assert mis0["envelope_excursions"]["count"] == 0 and mis0["max_kl"] == [7, 0.03]
    assert all(runs[f"grpo__lag2__seed{s}"][k]["count"] == 0 for s in (0, 1)
               for k in ("kl_spikes", "grad_norm_spikes", "collapse"))
    mis = horizon["arms"]["token_mis/lag2"]
    assert mis["kl_spikes"] == {"total": 2, "runs_with": 2, "runs": 2, "first_step": 5}
    assert mis["collapse"] == {"total": 2, "runs_with": 1, "runs": 2, "first_step": 8}
    assert horizon["keys"]["kl"] == "rollout_corr/k3_kl"
    md = (out / "report.md").read_text()
    assert "## Over the whole horizon: spikes and collapses" in md and "more than 20 points below" in md
    assert "| token_mis/lag2 | 0 (0/2) | never | 2 (2/2) | 5 |" in md
    assert "| grpo/lag2 | 1 (1/2) | 9 | 0 (0/2) | never |" in md
    assert "| grpo__lag2__seed0 | 0.001 (9) |" in md  # the envelope's extreme and its step
    page = (out / "report.html").read_text()
    for title in (ENVELOPE_FIGURE, KL_FIGURE, DYNAMICS_FIGURE, SUCCESS_FIGURE):
        assert f"<img alt='{title}'" in page


def test_with_a_reference_arm_the_report_counts_the_steps_each_run_took_to_reach_its_endpoint(tmp_path):
    out = _experiment(tmp_path, horizon_report=True)
    plan = json.loads((out / "experiment.json").read_text())
    (out / "experiment.json").write_text(json.dumps(plan | {"reach": "grpo/lag2"}))
    slow = _metrics(1, None, None, {4: 0.3, 8: 0.45, 12: 0.5})  # token_mis seed 1 gets there at its last evaluation
    short = _metrics(1, None, None, {4: 0.4, 8: 0.45, 12: 0.49})  # grpo seed 1 never does
    for cell, records in (("token_mis__lag2__seed1", slow), ("grpo__lag2__seed1", short)):
        (out / cell / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    write_experiment_report(out)
    data = json.loads((out / "report.json").read_text())
    reach = data["long_horizon"]["reach"]
    assert reach["reference"] == "grpo/lag2" and reach["target"] == data["arms"]["grpo/lag2"]["success"] == 0.5
    assert reach["arms"]["grpo/lag2"] == {"per_seed": {"0": 4, "1": None}, "reached": 1, "runs": 2}
    assert reach["arms"]["token_mis/lag2"] == {"per_seed": {"0": 4, "1": 12}, "reached": 2, "runs": 2}
    md = (out / "report.md").read_text()
    assert "Steps to `grpo/lag2`'s result (its endpoint, 0.500)" in md and "| token_mis/lag2 | 2/2 | 4, 12 |" in md
    assert "| grpo/lag2 | 1/2 | 4, never |" in md


def test_without_a_reference_arm_there_is_no_reach_table(tmp_path):
    out = _experiment(tmp_path, horizon_report=True)
    write_experiment_report(out)
    assert "reach" not in json.loads((out / "report.json").read_text())["long_horizon"]
    assert "Steps to" not in (out / "report.md").read_text()


def test_other_suites_have_no_long_horizon_section(tmp_path):
    out = _experiment(tmp_path, horizon_report=False)
    write_experiment_report(out)
    assert "long_horizon" not in json.loads((out / "report.json").read_text())
    assert "Over the whole horizon" not in (out / "report.md").read_text()
    assert ENVELOPE_FIGURE not in (out / "report.html").read_text()
