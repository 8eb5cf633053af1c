"""Reductions of robustness-sweep records (`evaluation.robustness.robustness_sweep`): success per condition,
retention = perturbed / clean success, degradation curves and their area, per task type.

Definitions (per condition = one (family, scale); per task type the same on that type's records only):
- success: mean of `won` over the condition's episodes (= avg@n when every task has n samples), with a
  95% bootstrap interval over tasks (`index`);
- change: success − clean success, the mean over tasks of the paired per-task change. Every condition plays the
  clean run's tasks with the same sampling seeds, so its episodes are paired with the clean ones by (`index`,
  `sample`); its 95% interval bootstraps the per-task changes over tasks, which cancels how hard each task is
  (`evaluation.scores`, "intervals"). A condition whose (task, sample) pairs are not the clean run's is an error;
- retention: success / clean success; None when the clean success is 0 (undefined, not 0 or 1); its 95% interval
  resamples tasks with their clean and perturbed success together (`bootstrap_ratio_ci`: a resample without clean
  success has no finite ratio, so when 2.5% of them or more have none the upper bound is None, unbounded);
- the clean row itself: change 0 and retention 1 by definition, with no interval (None);
- degradation curve of a family: the clean point (scale 0, or the label "clean") followed by its scales;
  `retention_auc` (numeric scales only): trapezoidal area under retention vs scale over [0, max scale],
  divided by max scale, so 1.0 = no degradation anywhere on the grid; `mean_retention`: the plain mean over
  the family's scales (defined for labelled scales such as "int8" too).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from evaluation.scores import bootstrap_ci, bootstrap_ratio_ci, group_by_problem

Record = Mapping[str, Any]


def conditions(records: Sequence[Record]) -> list[tuple[str, Any]]:
    """(family, scale) pairs in order of first appearance."""
    seen: dict[tuple[str, str], tuple[str, Any]] = {}
    for r in records:
        seen.setdefault((r["family"], str(r["scale"])), (r["family"], r["scale"]))
    return list(seen.values())


def _success(records: Sequence[Record]) -> float:
    return statistics.fmean(float(r["won"]) for r in records)


def _ratio(num: float | None, den: float | None) -> float | None:
    return None if num is None or not den else num / den


def _by_type(records: Sequence[Record]) -> dict[str, list[Record]]:
    groups: dict[str, list[Record]] = defaultdict(list)
    for r in records:
        if r.get("task_type"):
            groups[str(r["task_type"])].append(r)
    return dict(sorted(groups.items()))


def _episodes(recs: Sequence[Record]) -> dict[tuple[Any, Any], float]:
    """`won` of each (task, sample) of one condition's records."""
    out: dict[tuple[Any, Any], float] = {}
    for r in recs:
        if "sample" not in r:
            raise ValueError(f"robustness record of {r['condition']} has no 'sample' field (keys: {sorted(r)}); "
                             "pairing with the clean run needs each episode's task `index` and `sample`")
        key = (r["index"], r["sample"])
        if key in out:
            raise ValueError(f"{r['condition']}: task {key[0]} sample {key[1]} appears twice")
        out[key] = float(r["won"])
    return out


def paired_tasks(clean: Sequence[Record], recs: Sequence[Record]) -> tuple[list[float], list[float]]:
    """Per task, in the clean run's order: (clean success, this condition's success), each the mean over the samples
    both played; a condition that did not play exactly the clean run's (task, sample) pairs is an error."""
    before, after = _episodes(clean), _episodes(recs)
    if before.keys() != after.keys():
        missing, extra = sorted(before.keys() - after.keys(), key=str), sorted(after.keys() - before.keys(), key=str)
        raise ValueError(f"{recs[0]['condition']} did not play the clean run's episodes (missing (task, sample) "
                         f"{missing[:3]}, extra {extra[:3]}): every condition must play the same tasks and samples")
    tasks: dict[Any, list[tuple[Any, Any]]] = defaultdict(list)
    for key in before:
        tasks[key[0]].append(key)
    return ([statistics.fmean(before[k] for k in keys) for keys in tasks.values()],
            [statistics.fmean(after[k] for k in keys) for keys in tasks.values()])


def _condition_row(recs: Sequence[Record], clean: Sequence[Record] | None,
                   clean_row: Mapping[str, Any] | None) -> dict[str, Any]:
    first = recs[0]
    per_task = [statistics.fmean(float(r["won"]) for r in g) for g in group_by_problem(recs).values()]
    lo, hi = bootstrap_ci(per_task)
    row = {"family": first["family"], "scale": first["scale"], "condition": first["condition"],
           "episodes": len(recs), "success": _success(recs), "success_ci": [lo, hi],
           "reward": statistics.fmean(float(r["reward"]) for r in recs)}
    row |= {k: v for k, v in first.items() if k.startswith("perturb_") or k == "probe_kl"}
    row["retention"] = _ratio(row["success"], clean_row["success"] if clean_row else row["success"])
    row |= {"change": 0.0, "change_ci": None, "retention_ci": None}  # clean against itself: no interval
    if clean is not None:
        before, after = paired_tasks(clean, recs)
        diffs = [a - b for a, b in zip(after, before, strict=True)]
        row["change"] = statistics.fmean(diffs)
        row["change_ci"] = list(bootstrap_ci(diffs))
        if row["retention"] is not None:
            row["retention_ci"] = list(bootstrap_ratio_ci(after, before))
    row["per_type"] = {}
    for task_type, group in _by_type(recs).items():
        success = _success(group)
        clean_t = clean_row["per_type"].get(task_type, {}).get("success") if clean_row else success
        row["per_type"][task_type] = {"success": success, "episodes": len(group),
                                      "retention": _ratio(success, clean_t)}
    return row


def condition_table(records: Sequence[Record]) -> list[dict[str, Any]]:
    """One row per condition (clean first): success, CI, reward, the paired change against clean and retention
    with their CIs, achieved perturbation, types."""
    if not records:
        raise ValueError("condition_table: no records")
    groups: dict[tuple[str, str], list[Record]] = defaultdict(list)
    for r in records:
        groups[(r["family"], str(r["scale"]))].append(r)
    if not any(f == "clean" for f, _ in groups):
        raise ValueError("condition_table: no clean records (family 'clean'); retention needs the clean run")
    clean_recs = next(g for (f, _), g in groups.items() if f == "clean")
    clean = _condition_row(clean_recs, None, None)
    others = [(f, s) for f, s in conditions(records) if f != "clean"]
    return [clean] + [_condition_row(groups[(f, str(s))], clean_recs, clean) for f, s in others]


def _auc(scales: list[float], values: list[float | None]) -> float | None:
    """Trapezoid area of values over scales (scales[0] = 0, sorted), divided by the scale range."""
    if None in values or len(scales) < 2 or scales[-1] <= 0:
        return None
    area = sum((x1 - x0) * (y0 + y1) / 2
               for x0, x1, y0, y1 in zip(scales, scales[1:], values, values[1:], strict=False))
    return area / scales[-1]


def degradation_curves(table: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per family: x (scales, clean first), success, change and retention with their CIs, probe KL, per-type
    success, AUC and mean retention.

    Numeric families put the clean point at scale 0 and are sorted by scale; labelled ones ("int8") keep
    their grid order after a "clean" label.
    """
    clean = next(row for row in table if row["family"] == "clean")
    out: dict[str, dict[str, Any]] = {}
    for family in dict.fromkeys(row["family"] for row in table if row["family"] != "clean"):
        rows = [row for row in table if row["family"] == family]
        numeric = all(isinstance(row["scale"], int | float) for row in rows)
        if numeric:
            rows = sorted(rows, key=lambda row: float(row["scale"]))
        points = [clean, *rows]
        if numeric:
            xs: list = [0.0, *(float(r["scale"]) for r in rows)]
        else:
            xs = ["clean", *(str(r["scale"]) for r in rows)]
        retention = [p["retention"] for p in points]
        types = clean["per_type"].keys()
        out[family] = {
            "numeric": numeric, "x": xs, "success": [p["success"] for p in points],
            "success_ci": [p["success_ci"] for p in points], "change": [p["change"] for p in points],
            "change_ci": [p["change_ci"] for p in points], "retention": retention,
            "retention_ci": [p["retention_ci"] for p in points],
            "probe_kl": [p.get("probe_kl") for p in points],
            "per_type": {t: [p["per_type"].get(t, {}).get("success") for p in points] for t in types},
            "retention_auc": _auc(xs, retention) if numeric else None,
            "mean_retention": (None if None in retention[1:] else statistics.fmean(retention[1:])),
        }
    return out


def summarize_robustness(records: Sequence[Record]) -> dict[str, Any]:
    """Everything the report and its JSON need: the condition table and the per-family curves."""
    table = condition_table(records)
    return {"clean_success": table[0]["success"], "conditions": table, "curves": degradation_curves(table)}
