"""What a long run did step by step: spikes and collapse, counted over one run's per-step series (pure, no I/O).

The ALP paper's long-horizon claims (its Figures 1, 3, 4): Seq-Bypass's importance-ratio envelope blows up while
ALP's stays tight, MIS shows KL spikes that ALP avoids, and ALP's entropy is higher but controlled. The counts here
turn "spikes" and "collapse" into numbers a report can table, each with the step where it first appears:

- a *KL spike* is a step whose rollout→trainer KL (k3, `rollout_corr/k3_kl`) exceeds `KL_SPIKE_FACTOR` (10) times
  the run's own median of it; the same rule on the update KL (`diag/policy_kl_k3`) gives *update-KL spikes*;
- a *grad-norm spike* is a step whose pre-clip gradient norm (`actor/grad_norm`, what `clip_grad_norm_` returns)
  exceeds `GRAD_SPIKE_FACTOR` (5) times the run's median;
- an *envelope excursion* is a step whose last-mini-batch loss ratio leaves [1/`ENVELOPE_BAND`, `ENVELOPE_BAND`]
  ([0.5, 2]) at its envelope: P2 below 0.5 or P98 above 2, Figure 1's "blow-up" as a count;
- a *collapse* is a held-out evaluation (`eval/success`) more than `COLLAPSE_DROP` (20 points) below the run's
  best so far (the best of that evaluation and the ones before it). Best so far, not the best of the whole run: an
  early evaluation before the run learned is not a collapse; at the last evaluation the two are the same.

Relative to the run's own median, so a method whose KL is ten times higher throughout is not a string of spikes,
and runs of different methods are counted by one rule. A run whose median is 0 (or that logged nothing) has no
spikes: ten times zero would flag any noise.

`SERIES` names the metric keys the report reads per step; `step_series` reads one from a run's metrics records.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

KL_SPIKE_FACTOR = 10.0
GRAD_SPIKE_FACTOR = 5.0
COLLAPSE_DROP = 0.20
"""Held-out success is a fraction, so 20 points is 0.20."""
ENVELOPE_BAND = 2.0
"""A loss ratio off by 2× either way at P2 or P98: for the lag-2 demo's first steps the envelope is ~[0.74, 1.14]."""
_TOLERANCE = 1e-9  # 0.9 − 0.7 is 0.20000000000000007 in floats: exactly 20 points is not "more than 20"

SERIES = {
    # the last mini-batch's ratios: the loss ratio there carries both the sampler's mismatch and the step's own
    # drift (the first mini-batch's r_byp is r_mis itself, θ = θ_old); ALP logs them every `diagnostics.every`
    # steps, which the long suite sets to 1
    "loss_ratio_p2": "diag/ratio_loss_last/p2",
    "loss_ratio_p98": "diag/ratio_loss_last/p98",
    "r_byp_p2": "diag/ratio_byp_last/p2",
    "r_byp_p98": "diag/ratio_byp_last/p98",
    "kl": "rollout_corr/k3_kl",  # rollout→trainer KL(μ ‖ π_θold), k3, every step
    "update_kl": "diag/policy_kl_k3",  # KL(π_θold ‖ π_θ) after the step's last mini-batch, clean forward
    "grad_norm": "actor/grad_norm",  # before clipping
    "entropy": "diag/entropy",  # π_θ after the update, without ALP's noise
    "success": "eval/success",  # held-out, on the steps the run evaluated
}
"""Per-step quantity → the metrics.jsonl key it is read from (trainer/diagnostics/ratio_diagnostics.py, mismatch_metrics.py,
policy_drift.py, update.py, loop.py)."""

Series = Sequence[tuple[int, float]]
"""(step, value) pairs in step order, finite values only."""


@dataclass(frozen=True)
class Events:
    """Steps of a run where something happened."""

    count: int
    first_step: int | None
    """The step where it first happened; None if it never did."""
    steps: tuple[int, ...] = ()


def step_series(records: Sequence[Mapping[str, Any]], key: str) -> list[tuple[int, float]]:
    """(step, value) of `key` in a run's metrics records where it is a finite number, one per step (the last
    record of a step wins), in step order."""
    by_step = {}
    for r in records:
        value = r.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            by_step[int(r["step"])] = float(value)
    return sorted(by_step.items())


def _events(steps: list[int]) -> Events:
    return Events(len(steps), steps[0] if steps else None, tuple(steps))


def spikes(series: Series, factor: float) -> Events:
    """Steps whose value exceeds `factor` × the median of the whole series (none when that median is ≤ 0)."""
    if not series:
        return _events([])
    threshold = factor * statistics.median(v for _, v in series)
    if threshold <= 0:
        return _events([])
    return _events([step for step, v in series if v > threshold])


def excursions(low: Series, high: Series, band: float = ENVELOPE_BAND) -> Events:
    """Steps where the envelope's lower edge `low` (P2) is below 1/`band` or its upper edge `high` (P98) above it."""
    return _events(sorted({step for step, v in low if v < 1 / band} | {step for step, v in high if v > band}))


def _extreme(series: Series, pick) -> tuple[int, float] | None:
    """(step, value) of the series' `pick` (min or max) value, the earliest step on a tie; None for no series."""
    return pick(series, key=lambda sv: sv[1], default=None)


def collapses(success: Series, drop: float = COLLAPSE_DROP) -> Events:
    """Evaluations more than `drop` below the best success of that evaluation and the ones before it."""
    best, found = -math.inf, []
    for step, value in success:
        best = max(best, value)
        if best - value > drop + _TOLERANCE:
            found.append(step)
    return _events(found)


def first_reaching(success: Series, target: float) -> int | None:
    """The step of the first evaluation whose success is at least `target` (None: no evaluation reached it)."""
    return next((step for step, value in success if value >= target - _TOLERANCE), None)


@dataclass(frozen=True)
class RunCounts:
    """One run's counts (module docstring) and the levels they are relative to."""

    envelope_excursions: Events
    kl_spikes: Events
    update_kl_spikes: Events
    grad_norm_spikes: Events
    collapse: Events
    median_kl: float | None
    median_update_kl: float | None
    max_update_kl: tuple[int, float] | None
    """(step, value) of the run's largest update KL: its scale, where the median of a quantity that is ~0 on
    every step without a reward difference in its groups makes "10× the median" a low bar."""
    median_grad_norm: float | None
    max_kl: tuple[int, float] | None
    """(step, value) of the largest rollout→trainer KL: a spike's size, which a count against the median hides."""
    min_loss_ratio_p2: tuple[int, float] | None
    max_loss_ratio_p98: tuple[int, float] | None
    min_r_byp_p2: tuple[int, float] | None
    """The envelopes' extremes over the horizon, (step, value): how far an excursion went."""
    best_success: float | None
    final_success: float | None


EVENT_KINDS = ("envelope_excursions", "kl_spikes", "update_kl_spikes", "grad_norm_spikes", "collapse")


def _median(series: Series) -> float | None:
    return statistics.median(v for _, v in series) if series else None


def run_counts(records: Sequence[Mapping[str, Any]]) -> RunCounts:
    """The counts of one run from its metrics records (metrics.jsonl, one per step)."""
    kl, grad = step_series(records, SERIES["kl"]), step_series(records, SERIES["grad_norm"])
    update_kl, success = step_series(records, SERIES["update_kl"]), step_series(records, SERIES["success"])
    low, high = step_series(records, SERIES["loss_ratio_p2"]), step_series(records, SERIES["loss_ratio_p98"])
    return RunCounts(envelope_excursions=excursions(low, high), kl_spikes=spikes(kl, KL_SPIKE_FACTOR),
                     update_kl_spikes=spikes(update_kl, KL_SPIKE_FACTOR),
                     grad_norm_spikes=spikes(grad, GRAD_SPIKE_FACTOR), collapse=collapses(success),
                     median_kl=_median(kl), median_update_kl=_median(update_kl),
                     max_update_kl=_extreme(update_kl, max), median_grad_norm=_median(grad),
                     max_kl=_extreme(kl, max), min_loss_ratio_p2=_extreme(low, min),
                     max_loss_ratio_p98=_extreme(high, max),
                     min_r_byp_p2=_extreme(step_series(records, SERIES["r_byp_p2"]), min),
                     best_success=max((v for _, v in success), default=None),
                     final_success=success[-1][1] if success else None)


def pooled_counts(runs: Sequence[RunCounts]) -> dict[str, dict[str, int | None]]:
    """Per event kind over the runs of one arm (its seeds): `total` events, `runs_with` at least one of `runs`,
    and the earliest `first_step` over them (None if no run had one)."""
    out = {}
    for kind in EVENT_KINDS:
        events = [getattr(r, kind) for r in runs]
        firsts = [e.first_step for e in events if e.first_step is not None]
        out[kind] = {"total": sum(e.count for e in events), "runs_with": sum(e.count > 0 for e in events),
                     "runs": len(events), "first_step": min(firsts) if firsts else None}
    return out


@dataclass(frozen=True)
class HorizonRun:
    """One finished cell as the long-horizon table and figures see it: its metrics records and counts."""

    cell: str
    arm: str
    seed: int
    records: Sequence[Mapping[str, Any]]
    counts: RunCounts


def horizon_run(cell: str, arm: str, seed: int, records: Sequence[Mapping[str, Any]]) -> HorizonRun:
    return HorizonRun(cell, arm, seed, records, run_counts(records))
