"""The numbers of an experiment report (`alprl experiment`): per arm over seeds and tasks, and paired comparisons.

An *arm* is a method under a setting; its cells are one run per seed. Every cell's final held-out evaluation
(`<cell>/eval/step_<k>.jsonl`, one record per task and sample) is tagged with its seed, and a *problem* is a
(seed, task) pair: cells of the same seed played the same tasks with the same sampling seeds, so
- an arm's held-out success is the mean over its problems of the per-problem avg@n, with a 95% percentile
  bootstrap interval over problems (`scores.bootstrap_ci`). Resampling (seed, task) pairs, not seeds, treats the
  seeds' training runs as fixed: with 3 seeds a seed-level bootstrap would say little, so the per-seed means are
  listed beside it for the spread between runs;
- a comparison is `scores.paired_difference` over the problems both arms played (arm − baseline), and its verdict
  is "better" / "worse" when that interval excludes 0, else "inside the noise".
pass@k (`evaluation.scores`) is averaged over problems for k = 1, 2, 4, ... up to the samples per task.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evaluation.scores import avg_at_k, bootstrap_ci, group_by_problem, k_values, paired_difference, pass_at_k

Record = Mapping[str, Any]
TRAINING_KEYS = {  # what each training-side column is, from the cells' metrics.jsonl (mean over seeds)
    "reward_mean": ("rollout/reward", "mean"),
    "reward_last": ("rollout/reward", "last"),
    "mismatch_kl_mean": ("rollout_corr/kl", "mean"),
    "ratio_p98_max": ("diag/ratio_loss/p98", "max"),
    "r_mis_p98_mean": ("ratio/mis_token/p98", "mean"),
    "ppo_kl_mean": ("actor/ppo_kl", "mean"),  # on the update forward: under ALP the perturbed one, noise included
    "update_kl_mean": ("diag/policy_kl_k3", "mean"),  # KL(π_θold ‖ π_θ) after the step, clean (diagnostics steps)
    "entropy_last": ("diag/entropy", "last"),
    "step_s_mean": ("perf/step_s", "mean"),
    # ALP's perturbation against the sampler's own mismatch (the sensitivity and ablation suites)
    "rel_noise_mean": ("perturb/rel_noise_mean", "mean"),
    "dp_p75_mean": ("perturb/dp/p75", "mean"),
    "dp_p99_mean": ("perturb/dp/p99", "mean"),
    "mismatch_dp_p75_mean": ("ratio/abs_dp_p75", "mean"),
    "mismatch_dp_p99_mean": ("ratio/abs_dp_p99", "mean"),
    "sigma_drift": ("perturb/sigma_mean", "drift"),
    "ratio_p2_min": ("diag/ratio_loss/p2", "min"),
    # MIPU's screening (the mismatch suite): steps screened and candidates kept, per cell
    "mipu_screened": ("mipu/accepted", "count"),
    "mipu_kept": ("mipu/accepted", "sum"),
}
PERTURBATION_KEYS = ("rel_noise_mean", "dp_p75_mean", "dp_p99_mean", "sigma_drift")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def tag_problems(records: Sequence[Record], seed: int) -> list[dict[str, Any]]:
    """Each record with its seed and `problem` = "<seed>:<task index>", the unit the report resamples."""
    return [{**r, "seed": seed, "problem": f"{seed}:{r['index']}"} for r in records]


def arm_summary(records: Sequence[Record]) -> dict[str, Any]:
    """Held-out success of one arm (its cells' tagged records): mean, interval, per seed, pass@k."""
    groups = group_by_problem(records, "problem")
    per_problem = {p: avg_at_k([float(r["won"]) for r in g]) for p, g in groups.items()}
    lo, hi = bootstrap_ci(list(per_problem.values()))
    seeds = sorted({int(r["seed"]) for r in records})
    per_seed = {str(s): statistics.fmean(v for p, v in per_problem.items() if p.startswith(f"{s}:")) for s in seeds}
    n = min(len(g) for g in groups.values())
    wins = [sum(bool(r["won"]) for r in g[:n]) for g in groups.values()]
    return {"success": statistics.fmean(per_problem.values()), "ci_lo": lo, "ci_hi": hi,
            "problems": len(per_problem), "samples_per_task": n, "seeds": seeds, "per_seed": per_seed,
            "pass_at_k": {str(k): statistics.fmean(pass_at_k(n, c, k) for c in wins) for k in k_values(n)}}


def verdict(lo: float, hi: float) -> str:
    """better / worse when the paired interval excludes 0, else inside the noise."""
    if lo > 0:
        return "better"
    if hi < 0:
        return "worse"
    return "inside the noise"


def compare(arm: Sequence[Record], baseline: Sequence[Record]) -> dict[str, Any]:
    """arm − baseline on the problems both played, with its 95% interval and verdict."""
    d = paired_difference(baseline, arm, problem_key="problem")
    return {"arm_success": d["after"], "baseline_success": d["before"], "diff": d["diff"],
            "ci_lo": d["diff_ci_lo"], "ci_hi": d["diff_ci_hi"], "problems": int(d["problems"]),
            "verdict": verdict(d["diff_ci_lo"], d["diff_ci_hi"])}


def _reduce(values: list[float], how: str) -> float | None:
    if not values:
        return None
    reducers = {"mean": statistics.fmean, "max": max, "min": min, "last": lambda v: v[-1], "sum": sum, "count": len,
                "drift": lambda v: v[-1] / v[0] if v[0] else None}  # σ's last logged value over its first
    return reducers[how](values)


def training_summary(metric_runs: Sequence[Sequence[Record]]) -> dict[str, float | None]:
    """Training-side figures of one arm: each reduced over a cell's steps, then averaged over its cells."""
    out: dict[str, float | None] = {}
    for name, (key, how) in TRAINING_KEYS.items():
        per_cell = []
        for records in metric_runs:
            values = [float(r[key]) for r in records if r.get("step", 0) > 0 and isinstance(r.get(key), int | float)
                      and math.isfinite(r[key])]
            reduced = _reduce(values, how)
            if reduced is not None:
                per_cell.append(reduced)
        out[name] = statistics.fmean(per_cell) if per_cell else None
    return out


def mipu_rollbacks(metric_runs: Sequence[Sequence[Record]]) -> list[int]:
    """Steps whose MIPU candidate was rolled back, per cell (cells without MIPU's screening left out)."""
    return [sum(1 for r in records if r.get("step", 0) > 0 and r.get("mipu/accepted") == 0)
            for records in metric_runs if any("mipu/accepted" in r for r in records)]


def robustness_summary(records: Sequence[Record]) -> list[dict[str, Any]]:
    """Per (family, scale) of the robustness sweeps of an arm's cells (tagged records): success with its interval
    over problems, and retention = success / clean success (None when the clean success is 0)."""
    by_condition: dict[str, list[Record]] = {}
    for r in records:
        by_condition.setdefault(str(r["condition"]), []).append(r)
    clean = next((rs for c, rs in by_condition.items() if c.startswith("clean")), None)
    clean_success = _success(clean) if clean else None
    rows = []
    for condition, rs in by_condition.items():
        per_problem = [avg_at_k([float(r["won"]) for r in g]) for g in group_by_problem(rs, "problem").values()]
        lo, hi = bootstrap_ci(per_problem)
        success = statistics.fmean(per_problem)
        rows.append({"condition": condition, "family": rs[0]["family"], "scale": str(rs[0]["scale"]),
                     "success": success, "ci_lo": lo, "ci_hi": hi, "problems": len(per_problem),
                     "retention": success / clean_success if clean_success else None})
    return rows


def _success(records: Sequence[Record]) -> float:
    return statistics.fmean(avg_at_k([float(r["won"]) for r in g])
                            for g in group_by_problem(records, "problem").values())


def sentence(arm: str, baseline: str, c: Mapping[str, Any], scale_words: str) -> str:
    """One comparison in plain words, from its numbers alone."""
    numbers = (f"{c['diff']:+.3f} held-out success ({c['arm_success']:.3f} vs {c['baseline_success']:.3f}), "
               f"95% interval [{c['ci_lo']:+.3f}, {c['ci_hi']:+.3f}] over {c['problems']} seed-task pairs")
    if c["verdict"] == "inside the noise":
        return f"At this scale ({scale_words}), {arm} and {baseline} differ inside the noise: {numbers}."
    return f"At this scale ({scale_words}), {arm} is {c['verdict']} than {baseline}: {numbers}."
