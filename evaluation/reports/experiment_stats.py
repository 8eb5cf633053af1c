"""The numbers of an experiment report (`alprl experiment`): per arm over seeds and tasks, and paired comparisons.

An *arm* is a method under a setting; its cells are one run per seed. Each cell's held-out records (one per task
and sample) are tagged with its seed, and a *problem* is a (seed, task) pair: cells of the same seed played the
same tasks with the same sampling seeds. What a cell contributes is its endpoint: its last held-out evaluation, or,
in suites with periodic evaluation (the long ones), its records pooled over the evaluations in the second half of
training (steps ≥ half the run), so that one evaluation's swing does not decide a run.
- an arm's held-out success is the mean over its problems of the per-problem avg@n, with its interval over runs
  (the few-cluster t over seeds), the previous two-stage one and an evaluation-only one (seeds held fixed), and its
  per-seed means;
- a comparison (arm − baseline) is paired on the problems both arms played: the per-problem differences, their
  interval over runs (the few-cluster t over seeds) with its SE and p-value, the sign-flip p-value over seeds, the
  previous two-stage interval and the evaluation-only one, per-seed differences; `judged` gives the verdicts (Holm
  over the suite's primary comparisons, the rest exploratory, "no power" where the design could not have found the
  paper's effect) and detectable effects (evaluation/reports/experiment_inference.py).
pass@k (`evaluation.scores`) is averaged over problems for k = 1, 2, 4, ... up to the samples per task.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evaluation.reports.experiment_inference import (
    NO_POWER,
    cluster_summary,
    comparison_summary,
    corrected_verdicts,
    interval_summary,
)
from evaluation.reports.paper_effects import PaperEffect
from evaluation.scores import avg_at_k, bootstrap_ci, group_by_problem, k_values, pass_at_k

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


def per_problem_success(records: Sequence[Record]) -> dict[str, float]:
    """avg@n of each problem ("<seed>:<task>") over its samples."""
    return {str(p): avg_at_k([float(r["won"]) for r in g]) for p, g in group_by_problem(records, "problem").items()}


def arm_summary(records: Sequence[Record]) -> dict[str, Any]:
    """Held-out success of one arm (its cells' tagged records): mean, its interval over runs (the few-cluster t over
    seeds, as a comparison's), the previous two-stage one and the evaluation-only one, per seed, pass@k."""
    groups = group_by_problem(records, "problem")
    success = per_problem_success(records)
    stats, cluster = interval_summary(success), cluster_summary(success)
    n = min(len(g) for g in groups.values())
    wins = [sum(bool(r["won"]) for r in g[:n]) for g in groups.values()]
    (lo, hi), (previous_lo, previous_hi) = _rate(cluster["ci"]), _rate(stats["ci"])
    return {"success": stats["mean"], "ci_lo": lo, "ci_hi": hi, "previous_ci_lo": previous_lo,
            "previous_ci_hi": previous_hi,
            "eval_ci_lo": stats["eval_ci"][0], "eval_ci_hi": stats["eval_ci"][1], "problems": len(groups),
            "samples_per_task": n, "seeds": sorted({int(r["seed"]) for r in records}), "per_seed": stats["per_seed"],
            "pass_at_k": {str(k): statistics.fmean(pass_at_k(n, c, k) for c in wins) for k in k_values(n)},
            "failures": failure_kinds(records), "by_task_type": by_task_type(records)}


def _rate(interval: tuple[float, float] | None) -> tuple[float | None, float | None]:
    """A success rate's interval, cut to [0, 1]; (None, None) without one (one seed)."""
    return (None, None) if interval is None else (max(0.0, interval[0]), min(1.0, interval[1]))


SIMPLETIR_RESULT = re.compile(r"Code execution result: ([^\n]*)")
"""The tool result as the demo's TIR style (envs/tir/styles.py, simpletir) shows it in a reply."""


def failure_kinds(records: Sequence[Record]) -> dict[str, int] | None:
    """Why an arm's held-out samples failed, where the records carry TIR replies in the simpletir style: `copy` (the
    boxed answer is not the last tool result: the program was right or wrong, the copy differs), `no_tool_result`,
    `no_answer` (a tool result but no boxed answer), `wrong_program` (the boxed answer is the tool's result, and
    wrong), `no_reply_recorded`. None for records without replies (household, shop) or in another style."""
    failed = [r for r in records if not r["won"]]
    if not any("response" in r for r in failed):
        return None
    kinds = {"copy": 0, "no_tool_result": 0, "no_answer": 0, "wrong_program": 0, "no_reply_recorded": 0}
    for r in failed:
        if "response" not in r:  # an episode that ended before a reply was kept (an engine or sandbox error)
            kinds["no_reply_recorded"] += 1
            continue
        results = SIMPLETIR_RESULT.findall(str(r["response"]))
        answer = (r.get("extracted_answer") or "").strip()
        kind = ("no_tool_result" if not results else "no_answer" if not answer
                else "copy" if results[-1].strip() != answer else "wrong_program")
        kinds[kind] += 1
    return kinds if kinds["copy"] + kinds["no_answer"] + kinds["wrong_program"] > 0 else None


def by_task_type(records: Sequence[Record]) -> dict[str, float] | None:
    """Success per task type (mean over its problems), where the held-out set has more than one."""
    types = {str(r.get("task_type")) for r in records if "task_type" in r}
    if len(types) < 2:
        return None
    return {t: statistics.fmean(per_problem_success([r for r in records if str(r.get("task_type")) == t]).values())
            for t in sorted(types)}


def compare(arm: Sequence[Record], baseline: Sequence[Record], family: str = "exploratory", *,
            paper: PaperEffect | None = None, rng_seed: int = 0) -> dict[str, Any]:
    """arm − baseline on the problems both played: the difference with its interval over runs, SE and p-value,
    the sign-flip p-value, the previous two-stage interval and the evaluation-only one, per-seed differences and
    the paper's effect (`paper`, a primary comparison's); `judged`, over a report's comparisons together, adds the
    verdicts and detectable effects."""
    after, before = per_problem_success(arm), per_problem_success(baseline)
    shared = [p for p in after if p in before]
    if not shared:
        raise ValueError("compare: the two arms share no (seed, task) problem; evaluate the same seeds and tasks")
    stats = comparison_summary({p: after[p] - before[p] for p in shared}, rng_seed=rng_seed)
    lo, hi = stats["ci"] or (None, None)
    previous_lo, previous_hi = stats["previous_ci"] or (None, None)
    return {"arm_success": statistics.fmean(after[p] for p in shared),
            "baseline_success": statistics.fmean(before[p] for p in shared), "diff": stats["mean"],
            "mean": stats["mean"], "ci_lo": lo, "ci_hi": hi, "p_sign_flip": stats["p_sign_flip"],
            "previous_ci_lo": previous_lo, "previous_ci_hi": previous_hi, "eval_ci_lo": stats["eval_ci"][0],
            "eval_ci_hi": stats["eval_ci"][1], "per_seed": stats["per_seed"], "seeds": stats["seeds"],
            "df": stats["df"], "se": stats["se"], "p": stats["p"], "problems": len(shared), "family": family,
            "paper_effect": None if paper is None else paper.effect,
            "paper_effect_source": None if paper is None else paper.source}


def judged(comparisons: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One report's comparisons with their verdicts (Holm over the primary ones) and detectable effects, ready for
    report.json."""
    out = corrected_verdicts(comparisons)
    for c in out:
        c.pop("mean", None)
        corrected = c.pop("corrected_ci")
        c["corrected_ci_lo"], c["corrected_ci_hi"] = corrected if corrected is not None else (None, None)
    return out


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
    """One comparison in plain words, from its numbers alone: the family, the difference with its interval over
    runs (Holm-corrected for a primary one), the verdict and, when it finds nothing, what the design could detect
    (against the paper's effect, where the comparison has one)."""
    where = f"{c['family']}, {c['seeds']} seed{'s' if c['seeds'] != 1 else ''} × {c['problems'] // max(1, c['seeds'])}"
    head = f"At this scale ({scale_words}),"
    if c["verdict"].startswith("one seed"):
        return (f"{head} {arm} − {baseline}: {c['diff']:+.3f} held-out success ({c['arm_success']:.3f} vs "
                f"{c['baseline_success']:.3f}), evaluation-only interval [{c['eval_ci_lo']:+.3f}, "
                f"{c['eval_ci_hi']:+.3f}] ({where} tasks); one seed, so no verdict (run-to-run noise unmeasured).")
    if c.get("corrected_ci_lo") is not None:
        interval = (f"Holm-corrected {100 * (1 - c['holm_level']):.1f}% interval over runs "
                    f"[{c['corrected_ci_lo']:+.3f}, {c['corrected_ci_hi']:+.3f}]")
    else:
        interval = f"95% interval over runs [{c['ci_lo']:+.3f}, {c['ci_hi']:+.3f}]"
    numbers = (f"{c['diff']:+.3f} held-out success ({c['arm_success']:.3f} vs {c['baseline_success']:.3f}), "
               f"{interval} ({where} tasks)")
    detectable, paper = c.get("detectable"), c.get("paper_effect")
    if c["verdict"] == NO_POWER:
        reach = ("no difference is detectable with these seeds" if detectable > 1
                 else f"the design detects about ±{detectable:.3f}")
        against = "" if paper is None else f", more than the paper's {paper:+.3f} ({c['paper_effect_source']})"
        return (f"{head} {arm} − {baseline} is untested for want of power: {numbers}; {reach}{against}, so "
                "finding nothing says nothing.")
    if c["verdict"] == "inside the noise":
        detect = "" if detectable is None else f"; the design detects about ±{detectable:.3f}"
        against = "" if paper is None else f" (the paper's effect {paper:+.3f})"
        return f"{head} {arm} and {baseline} differ inside the noise: {numbers}{detect}{against}."
    return f"{head} {arm} is {c['verdict']} than {baseline}: {numbers}."
