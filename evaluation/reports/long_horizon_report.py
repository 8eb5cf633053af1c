"""The long suite's part of the experiment report: spike and collapse counts per run and per arm (report.json's
`long_horizon`, and its tables), beside the figures of evaluation/reports/long_horizon_figures.py.

`evaluation/reports/experiment_report.py` adds it, and renders it with the rest, for suites whose plan asks for it
(`horizon_report` in experiment.json: the long suite); the counts are defined in evaluation/long_horizon.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from evaluation.long_horizon import (
    COLLAPSE_DROP,
    ENVELOPE_BAND,
    EVENT_KINDS,
    GRAD_SPIKE_FACTOR,
    KL_SPIKE_FACTOR,
    SERIES,
    HorizonRun,
    first_reaching,
    horizon_run,
    pooled_counts,
    step_series,
)
from evaluation.reports.experiment_stats import read_jsonl

EVENT_NAMES = {"envelope_excursions": "envelope excursions", "kl_spikes": "KL spikes",
               "update_kl_spikes": "update-KL spikes", "grad_norm_spikes": "grad-norm spikes", "collapse": "collapses"}


def definitions() -> list[str]:
    """The count definitions, in the words the report prints above its tables."""
    return [f"Envelope excursion: a step whose last-mini-batch loss ratio has P2 below {1 / ENVELOPE_BAND:g} or P98 "
            f"above {ENVELOPE_BAND:g} (`{SERIES['loss_ratio_p2']}`, `{SERIES['loss_ratio_p98']}`): the envelope "
            "blowing up of the ALP paper's Figure 1, counted.",
            f"KL spike: a step whose rollout→trainer KL (`{SERIES['kl']}`) exceeds {KL_SPIKE_FACTOR:g}× the run's "
            f"median of it; update-KL spike: the same on `{SERIES['update_kl']}` (KL(π_θold ‖ π_θ) after the "
            "update; ~0 on steps whose groups had no reward difference, so its median is low and the count is high: "
            "read it with the run's median and largest update KL).",
            f"Grad-norm spike: a step whose pre-clip grad norm (`{SERIES['grad_norm']}`) exceeds "
            f"{GRAD_SPIKE_FACTOR:g}× the run's median.",
            f"Collapse: a held-out evaluation (`{SERIES['success']}`) more than {100 * COLLAPSE_DROP:g} points below "
            "the run's best so far.",
            "Each count comes with the step where it first appears (never: it did not)."]


def horizon_runs(cells: Sequence[dict[str, Any]]) -> list[HorizonRun]:
    """The finished cells (experiment_report.finished_cells) with their metrics records and counts."""
    return [horizon_run(c["cell"], c["arm"], int(c["seed"]), read_jsonl(Path(c["dir"]) / "metrics.jsonl"))
            for c in cells]


def reach_data(runs: Sequence[HorizonRun], reference: str, target: float) -> dict[str, Any]:
    """report.json's `long_horizon.reach`: per arm, each run's first evaluation at or above `target`, the endpoint
    of the `reference` arm (the synchronous result a method under lag claims to reach): how many steps each run
    needed to get there, the reference's own runs included."""
    arms: dict[str, dict[str, Any]] = {}
    for r in runs:
        first = first_reaching(step_series(r.records, SERIES["success"]), target)
        arm = arms.setdefault(r.arm, {"per_seed": {}, "reached": 0, "runs": 0})
        arm["per_seed"][str(r.seed)] = first
        arm["reached"] += first is not None
        arm["runs"] += 1
    return {"reference": reference, "target": target, "arms": arms}


def long_horizon_data(runs: Sequence[HorizonRun], reach: tuple[str, float] | None = None) -> dict[str, Any]:
    """report.json's `long_horizon`: the definitions, each run's counts and each arm's pooled over its seeds; with
    `reach` (reference arm, its endpoint), the steps each run took to reach that endpoint (`reach_data`)."""
    arms = {arm: pooled_counts([r.counts for r in runs if r.arm == arm]) for arm in dict.fromkeys(r.arm for r in runs)}
    per_run = [{"cell": r.cell, "arm": r.arm, "seed": r.seed, **asdict(r.counts)} for r in runs]
    data = {"definitions": definitions(), "keys": dict(SERIES), "runs": per_run, "arms": arms}
    return data | ({"reach": reach_data(runs, *reach)} if reach is not None else {})


def _f(value: float | None, fmt: str) -> str:
    return "–" if value is None else format(value, fmt)


def _at(step_value: Sequence | None, fmt: str = ".2e") -> str:
    return "–" if step_value is None else f"{format(step_value[1], fmt)} ({step_value[0]})"


def _first(step: int | None) -> str:
    return "never" if step is None else str(step)


ARM_HEADER = ["arm", *(h for kind in EVENT_KINDS for h in (f"{EVENT_NAMES[kind]} (runs with)", "first"))]
RUN_HEADER = ["cell", *(h for kind in EVENT_KINDS for h in (EVENT_NAMES[kind], "first")), "median KL",
              "median update KL", "max update KL (step)", "median grad norm", "best success", "final success"]
EXTREMES_HEADER = ["cell", "loss ratio P2 min (step)", "loss ratio P98 max (step)", "r_byp P2 min (step)",
                   "KL max (step)", "median KL"]


def arm_rows(data: dict[str, Any]) -> list[list[str]]:
    return [[arm, *(v for kind in EVENT_KINDS
                    for v in (f"{c[kind]['total']} ({c[kind]['runs_with']}/{c[kind]['runs']})",
                              _first(c[kind]["first_step"])))]
            for arm, c in data["arms"].items()]


def run_rows(data: dict[str, Any]) -> list[list[str]]:
    return [[r["cell"], *(v for kind in EVENT_KINDS for v in (str(r[kind]["count"]), _first(r[kind]["first_step"]))),
             _f(r["median_kl"], ".2e"), _f(r["median_update_kl"], ".2e"), _at(r["max_update_kl"]),
             _f(r["median_grad_norm"], ".3g"), _f(r["best_success"], ".3f"),
             _f(r["final_success"], ".3f")] for r in data["runs"]]


def extremes_rows(data: dict[str, Any]) -> list[list[str]]:
    return [[r["cell"], _at(r["min_loss_ratio_p2"], ".3g"), _at(r["max_loss_ratio_p98"], ".3g"),
             _at(r["min_r_byp_p2"], ".3g"), _at(r["max_kl"]), _f(r["median_kl"], ".2e")] for r in data["runs"]]


def reach_rows(reach: dict[str, Any]) -> list[list[str]]:
    return [[arm, f"{a['reached']}/{a['runs']}", ", ".join(_first(step) for step in a["per_seed"].values())]
            for arm, a in reach["arms"].items()]


REACH_HEADER = ["arm", "runs that reached it", "first step per seed"]
TITLE = "Over the whole horizon: spikes and collapses"


def horizon_tables(horizon: dict[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """(caption, header, rows) of the section's tables, for report.md and report.html: the counts per arm, then
    per run, then each run's envelope and KL extremes; with a reference arm, the steps each run took to reach it."""
    tables = [("Per arm, over its seeds: total (runs with at least one / runs), earliest first step.", ARM_HEADER,
               arm_rows(horizon)), ("Per run:", RUN_HEADER, run_rows(horizon)),
              ("Per run, how far the envelopes and the KL went (the step where they did):", EXTREMES_HEADER,
               extremes_rows(horizon))]
    if reach := horizon.get("reach"):
        tables.append((f"Steps to `{reach['reference']}`'s result (its endpoint, {reach['target']:.3f}): each run's "
                       "first held-out evaluation at or above it (never: none did); a reading without an interval.",
                       REACH_HEADER, reach_rows(reach)))
    return tables
