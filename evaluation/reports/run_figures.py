"""The run report's diagnostic figures (numbered as in the ALP paper), each over one or several runs on shared axes.

Every figure function takes the runs (`RunData`: a label, its directory and its metrics.jsonl records) and returns a
`Figure`: a base64 PNG, or none with the one line the report prints instead (old runs log none of the `diag/*`
keys, a run without ALP has no σ). Metric keys, as `trainer/` logs them:
- Figures 1-2: `diag/ratio_{loss,mis}/{p2,p50,p98}` (first mini-batch of a step), `diag/ratio_loss_last/...` (last),
  and per rollout-probability bin `diag/ratio_{kind}/bin{j}/{p2,p98}` for μ bins `BIN_EDGES` (null when empty);
- dynamics: `rollout/reward`, `diag/grad_norm_preclip` (else `actor/grad_norm`), `diag/entropy`,
  `rollout_corr/k3_kl` (else `rollout_corr/kl`),
  `diag/policy_kl_k1` / `_k3`;
- Figure 8: `perturb/sigma/<layer>` (agents/perturbation.py) and `perturb/dp/p75`, `p99` (else
  `perturb/delta_p_p75`), and per layer group `perturb/dp/layer<i>/p99`;
- Figure 10: `<run>/diagnostics/scatter_step_<k>.npz` (trainer/diagnostics/scatter.py);
- Figure 5: the last `<run>/eval/step_<k>.jsonl` with ≥ 2 samples per task, through `evaluation.scores`.
"""

from __future__ import annotations

import base64
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from evaluation.scores import k_values, pass_at_k  # noqa: E402

BIN_EDGES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
COLORS = plt.rcParams["axes.prop_cycle"].by_key()["color"]


def run_color(i: int, n: int):
    """The colour of run `i` of `n` overlaid runs: distinct for up to 20 (tab10, then tab20), a colormap past."""
    if n <= len(COLORS):
        return COLORS[i % len(COLORS)]
    if n <= 20:
        return plt.get_cmap("tab20")(i)
    return plt.get_cmap("turbo")(i / max(n - 1, 1))


@dataclass
class RunData:
    label: str
    path: Path
    records: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Figure:
    title: str
    image: str | None = None
    missing: str = ""


def png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def series(records: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of `key` where it is logged and finite."""
    pts = [(r["step"], float(r[key])) for r in records
           if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])]
    return [p[0] for p in pts], [p[1] for p in pts]


def _first_key(run: RunData, *keys: str) -> str | None:
    return next((k for k in keys if series(run.records, k)[0]), None)


def _finish(ax, title: str, xlabel: str, ylabel: str) -> None:
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)


def envelope_over_steps(runs: list[RunData]) -> Figure:
    """Figure 1: the P2-P98 band (and P50) of the loss ratio and of r_mis, step by step."""
    title = "Figure 1: ratio envelope over steps (P2-P98, line P50)"
    kinds = [k for k in ("loss", "mis") if any(series(r.records, f"diag/ratio_{k}/p98")[0] for r in runs)]
    if not kinds:
        return Figure(title, missing="no diag/ratio_loss/* or diag/ratio_mis/* metrics in the run(s)")
    fig, axes = plt.subplots(1, len(kinds), figsize=(6.4 * len(kinds), 3.6), squeeze=False)
    for ax, kind in zip(axes[0], kinds, strict=True):
        for i, run in enumerate(runs):
            color = run_color(i, len(runs))
            for suffix, style in (("", "-"), ("_last", "--")):
                lo, hi = (series(run.records, f"diag/ratio_{kind}{suffix}/{s}") for s in ("p2", "p98"))
                if not lo[0] or lo[0] != hi[0]:
                    continue
                name = f"{run.label} " if len(runs) > 1 else ""
                part = "last mini-batch" if suffix else "first mini-batch"
                if suffix:
                    ax.plot(lo[0], lo[1], style, color=color, lw=1, label=f"{name}{part} P2/P98")
                    ax.plot(hi[0], hi[1], style, color=color, lw=1)
                else:
                    ax.fill_between(lo[0], lo[1], hi[1], color=color, alpha=0.25, label=f"{name}{part} P2-P98")
                    mid = series(run.records, f"diag/ratio_{kind}/p50")
                    if mid[0]:
                        ax.plot(mid[0], mid[1], color=color, lw=1.5, label=f"{name}P50")
        ax.axhline(1.0, color="grey", lw=0.8)
        _finish(ax, {"loss": "loss ratio", "mis": "r_mis (π_train(θ_old) / μ)"}[kind], "RL step", "ratio")
    return Figure(title, png(fig))


def _bin_steps(run: RunData, kind: str) -> list[dict[str, Any]]:
    return [r for r in run.records if any(isinstance(r.get(f"diag/ratio_{kind}/bin{j}/p98"), (int, float))
                                          for j in range(len(BIN_EDGES) - 1))]


def _bin_value(rec: dict[str, Any], kind: str, j: int, stat: str) -> float:
    v = rec.get(f"diag/ratio_{kind}/bin{j}/{stat}")
    return float(v) if isinstance(v, (int, float)) else np.nan  # an empty bin is null: a gap in the line


def envelope_by_bin(runs: list[RunData]) -> Figure:
    """Figure 2: the P2-P98 band per rollout-probability bin, at the first and the last logged step."""
    title = "Figure 2: ratio envelope by rollout-probability bin (first and last step)"
    kinds = [k for k in ("loss", "mis") if any(_bin_steps(r, k) for r in runs)]
    if not kinds:
        return Figure(title, missing="no per-bin diag/ratio_*/bin<j>/* metrics in the run(s)")
    centers = [(a + b) / 2 for a, b in zip(BIN_EDGES, BIN_EDGES[1:], strict=False)]
    fig, axes = plt.subplots(1, len(kinds), figsize=(6.4 * len(kinds), 3.6), squeeze=False)
    for ax, kind in zip(axes[0], kinds, strict=True):
        for i, run in enumerate(runs):
            rows = _bin_steps(run, kind)
            if not rows:
                continue
            for rec, style in ((rows[0], ":"), (rows[-1], "-")) if len(rows) > 1 else ((rows[0], "-"),):
                lo = [_bin_value(rec, kind, j, "p2") for j in range(len(centers))]
                hi = [_bin_value(rec, kind, j, "p98") for j in range(len(centers))]
                color = run_color(i, len(runs))
                name = f"{run.label} " if len(runs) > 1 else ""
                ax.plot(centers, lo, style, color=color, marker="o", label=f"{name}step {rec['step']}")
                ax.plot(centers, hi, style, color=color, marker="o")
                ax.fill_between(centers, lo, hi, color=color, alpha=0.12)
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xticks(BIN_EDGES)
        _finish(ax, f"{kind} ratio P2/P98 by μ bin", "rollout probability μ", "ratio")
    return Figure(title, png(fig))


# The rollout-trainer KL panel plots k3 (never negative, as the update-KL panel's dashed line): k1's per-step mean
# goes below 0 where the sampler puts more mass on the sampled tokens and reads as noise; k1 only for runs logged
# before k3 was.
DYNAMICS = (("reward", ("rollout/reward",)), ("grad norm (pre-clip)", ("diag/grad_norm_preclip", "actor/grad_norm")),
            ("entropy", ("diag/entropy",)), ("rollout-trainer KL (k3)", ("rollout_corr/k3_kl", "rollout_corr/kl")),
            ("policy-update KL", ("diag/policy_kl_k1", "diag/policy_kl_k3")),
            ("token staleness (versions)", ("rollout/token_staleness_mean", "rollout/token_staleness_max")))
FIRST_LOGGED_ONLY = ("grad norm (pre-clip)", "rollout-trainer KL (k3)")
"""Panels that plot the first of their keys a run logs, the others standing in for older runs."""


def dynamics(runs: list[RunData]) -> Figure:
    """Training dynamics: reward, grad norm, entropy, rollout-trainer KL, policy-update KL and the sampled tokens'
    staleness in policy versions (mean solid, max dashed), one panel each."""
    title = "Training dynamics"
    panels = []
    for name, keys in DYNAMICS:
        per_run = [(run, [k for k in keys if series(run.records, k)[0]]) for run in runs]
        if name in FIRST_LOGGED_ONLY:  # e.g. actor/grad_norm only where the pre-clip norm is not logged
            per_run = [(run, ks[:1]) for run, ks in per_run]
        if any(ks for _, ks in per_run):
            panels.append((name, per_run))
    if not panels:
        return Figure(title, missing="none of reward, grad norm, entropy or KL is logged")
    cols = min(3, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.0 * rows), squeeze=False)
    overlaid = len(runs) > 1  # then one legend of runs under the panels: per-panel ones would cover the curves
    handles: dict[str, Any] = {}
    for ax, (name, per_run) in zip(axes.flat, panels, strict=False):
        for i, (run, keys) in enumerate(per_run):
            for key, style in zip(keys, ("-", "--"), strict=False):
                xs, ys = series(run.records, key)
                line, = ax.plot(xs, ys, style, color=run_color(i, len(runs)), marker="o" if len(xs) < 30 else None,
                                ms=3, label=None if overlaid else key)
                handles.setdefault(run.label, line)
        two = next((ks for _, ks in per_run if len(ks) > 1), None)  # a panel of two keys: solid and dashed
        shown = f"{name} ({two[0].rsplit('/', 1)[-1]} solid, {two[1].rsplit('/', 1)[-1]} dashed)" \
            if overlaid and two else name
        _finish(ax, shown, "RL step", "")
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.tight_layout()
    if overlaid:
        fig.legend(list(handles.values()), list(handles), loc="upper center", bbox_to_anchor=(0.5, 0.0),
                   ncol=min(4, len(handles)), fontsize=8, frameon=False)
    missing = [name for name, _ in DYNAMICS if name not in {p[0] for p in panels}]
    return Figure(title, png(fig), missing=f"not logged: {', '.join(missing)}" if missing else "")


def sigma_and_dp(runs: list[RunData]) -> Figure:
    """Figure 8: ALP's σ per layer over steps, and the perturbation's |Δp| (P75, P99, per layer group)."""
    title = "Figure 8: ALP noise scale σ per layer and |Δp|"
    sig = {run.label: sorted({k for r in run.records for k in r if k.startswith("perturb/sigma/")}) for run in runs}
    dp = {run.label: _first_key(run, "perturb/dp/p75", "perturb/delta_p_p75") for run in runs}
    if not any(sig.values()) and not any(dp.values()):
        return Figure(title, missing="no perturb/sigma/* or |Δp| metrics (a run without ALP's perturbation)")
    fig, (ax_s, ax_d) = plt.subplots(1, 2, figsize=(12.8, 3.6))
    for i, run in enumerate(runs):
        for j, key in enumerate(sig[run.label]):
            xs, ys = series(run.records, key)
            layer = key.removeprefix("perturb/sigma/")
            if len(runs) > 1:
                ax_s.plot(xs, ys, color=run_color(i, len(runs)), alpha=0.7, label=run.label if j == 0 else None)
            else:
                ax_s.plot(xs, ys, color=COLORS[j % len(COLORS)], label=layer)
        if dp[run.label]:
            color = run_color(i, len(runs))
            xs, ys = series(run.records, dp[run.label])
            ax_d.plot(xs, ys, color=color, marker="o" if len(xs) < 30 else None, ms=3,
                      label=run.label if len(runs) > 1 else "P75")
            xs, ys = series(run.records, dp[run.label].replace("p75", "p99"))
            if xs:  # on a confident policy most sampled tokens have p ≈ 1 and a P75 of 0: the tail says more
                ax_d.plot(xs, ys, color=color, ls="--", label=None if len(runs) > 1 else "P99")
            if len(runs) == 1:  # each layer group's noise alone (on the diagnostics steps)
                groups = sorted({k for r in run.records for k in r
                                 if k.startswith("perturb/dp/layer") and k.endswith("/p99")},
                                key=lambda k: int(k.split("/")[2].removeprefix("layer")))
                for j, key in enumerate(groups):
                    xs, ys = series(run.records, key)
                    ax_d.plot(xs, ys, color=COLORS[(j + 1) % len(COLORS)], ls=":", marker="x", ms=4,
                              label=f"{key.split('/')[2]}… alone, P99")
    _finish(ax_s, "σ per layer", "RL step", "σ")
    _finish(ax_d, "|Δp| (perturbed vs unperturbed, sampled tokens): P75 solid, P99 dashed", "RL step", "|Δp|")
    return Figure(title, png(fig))


def scatter_files(run: Path) -> list[tuple[int, Path]]:
    files = [(int(f.stem.removeprefix("scatter_step_")), f) for f in run.glob("diagnostics/scatter_step_*.npz")]
    return sorted(files)


def scatter(runs: list[RunData]) -> Figure:
    """Figure 10: π_train(θ_old) against μ for the first and the last saved sample of each run, with r and y = x."""
    title = "Figure 10: trainer vs rollout token probability (sampled tokens)"
    picks = [(run, [files[0], files[-1]] if len(files) > 1 else files)
             for run in runs if (files := scatter_files(run.path))]
    if not picks:
        return Figure(title, missing="no diagnostics/scatter_step_<k>.npz samples in the run(s)")
    cols = max(len(p) for _, p in picks)
    fig, axes = plt.subplots(len(picks), cols, figsize=(4.0 * cols, 4.0 * len(picks)), squeeze=False)
    for row, (run, files) in enumerate(picks):
        for ax, (step, path) in zip(axes[row], files, strict=False):
            data = np.load(path)
            x, y = data["rollout_p"], data["train_p"]
            ax.scatter(x, y, s=2, alpha=0.3, color=COLORS[row % len(COLORS)], rasterized=True)
            ax.plot([0, 1], [0, 1], color="black", lw=0.8, label="y = x")
            r = np.corrcoef(x, y)[0, 1] if len(x) > 1 and x.std() > 0 and y.std() > 0 else float("nan")
            name = f"{run.label}, " if len(runs) > 1 else ""
            ax.set_xlim(0, 1)
            ax.set_ylim(0, 1)
            _finish(ax, f"{name}step {step}: r = {r:.4f} (n = {len(x)})", "μ (rollout)", "π_train(θ_old)")
        for ax in axes[row][len(files):]:
            ax.axis("off")
    fig.tight_layout()
    return Figure(title, png(fig))


def _eval_groups(path: Path) -> dict[int, list[bool]]:
    groups: dict[int, list[bool]] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            groups.setdefault(int(r["index"]), []).append(bool(r["won"]))
    return groups


def last_multi_sample_eval(run: Path) -> tuple[int, dict[int, list[bool]]] | None:
    """(step, wins per task) of the last evaluation with at least 2 samples of every task; None if there is none."""
    files = sorted(run.glob("eval/step_*.jsonl"), key=lambda f: int(f.stem.removeprefix("step_")))
    for f in reversed(files):
        groups = _eval_groups(f)
        if groups and min(len(g) for g in groups.values()) >= 2:
            return int(f.stem.removeprefix("step_")), groups
    return None


def pass_curve(groups: dict[int, list[bool]]) -> tuple[list[int], list[float]]:
    """Mean unbiased pass@k over tasks for k = 1, 2, 4, ... up to the smallest sample count."""
    n_min = min(len(g) for g in groups.values())
    ks = k_values(n_min)
    return ks, [float(np.mean([pass_at_k(len(g), sum(g), k) for g in groups.values()])) for k in ks]


def pass_at_k_figure(runs: list[RunData]) -> Figure:
    """Figure 5: pass@k of the last held-out evaluation with ≥ 2 samples per task."""
    title = "Figure 5: held-out pass@k (last evaluation)"
    found = [(run, ev) for run in runs if (ev := last_multi_sample_eval(run.path))]
    if not found:
        return Figure(title, missing="no evaluation with at least 2 samples per task (eval_samples >= 2)")
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for i, (run, (step, groups)) in enumerate(found):
        ks, ys = pass_curve(groups)
        name = f"{run.label}, " if len(runs) > 1 else ""
        ax.plot(ks, ys, marker="o", color=run_color(i, len(runs)), label=f"{name}step {step}, {len(groups)} tasks")
    ax.set_xscale("log", base=2)
    ax.set_ylim(0, 1.02)
    _finish(ax, "pass@k (unbiased estimator)", "k", "pass@k")
    return Figure(title, png(fig))


FIGURES = (envelope_over_steps, envelope_by_bin, dynamics, sigma_and_dp, scatter, pass_at_k_figure)
