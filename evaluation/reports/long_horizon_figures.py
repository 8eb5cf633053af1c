"""The long suite's figures over the whole horizon (PNG, base64): analogs of the ALP paper's Figures 1, 3 and 4, and
held-out success at every evaluation.

Every run (cell) is drawn, not only each arm's first seed: a spike is an event of one run, and a mean over seeds
would smear it. One colour per arm, one line style per seed; the steps `evaluation/long_horizon.py` counts as
spikes, envelope excursions (the dotted lines are the [0.5, 2] band) or collapses are marked ×. Keys:
`evaluation.long_horizon.SERIES`.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from evaluation.long_horizon import ENVELOPE_BAND, SERIES, Events, HorizonRun, step_series  # noqa: E402
from evaluation.reports.run_figures import Figure, png, run_color

ENVELOPE_FIGURE = "Figure 1 over the horizon: loss-ratio and r_byp P2-P98 envelopes per arm (last mini-batch)"
KL_FIGURE = "Figure 3 over the horizon: rollout→trainer KL and update KL per run (× spikes)"
DYNAMICS_FIGURE = "Figure 4 over the horizon: entropy and pre-clip grad norm per run (× grad-norm spikes)"
SUCCESS_FIGURE = "Held-out success at every evaluation per run (× collapses)"
SEED_STYLES = ("-", "--", ":", "-.")


def _arms(runs: Sequence[HorizonRun]) -> list[str]:
    return list(dict.fromkeys(r.arm for r in runs))


def _style(runs: Sequence[HorizonRun], run: HorizonRun) -> dict:
    arms, seeds = _arms(runs), sorted({r.seed for r in runs})
    return {"color": run_color(arms.index(run.arm), len(arms)),
            "linestyle": SEED_STYLES[seeds.index(run.seed) % len(SEED_STYLES)]}


def _label(run: HorizonRun) -> str:
    return f"{run.arm} s{run.seed}"


def _finish(ax, title: str, ylabel: str, legend: bool = True) -> None:
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("RL step")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if legend and ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=6, ncol=2)


def _line(ax, runs: Sequence[HorizonRun], run: HorizonRun, key: str, events: Events | None = None,
          positive: bool = False, marker: str | None = None) -> bool:
    """One run's series of `key` (positive values only on a log axis), its `events` marked ×; False if none."""
    points = [(s, v) for s, v in step_series(run.records, key) if v > 0 or not positive]
    if not points:
        return False
    style = _style(runs, run)
    ax.plot([s for s, _ in points], [v for _, v in points], lw=1, marker=marker, ms=3, label=_label(run), **style)
    if events is not None and events.steps:
        hit = dict(points)
        marked = [s for s in events.steps if s in hit]
        ax.plot(marked, [hit[s] for s in marked], "x", ms=7, mew=1.5, color=style["color"])
    return True


def envelope_figure(runs: Sequence[HorizonRun]) -> Figure:
    """Rows: the loss ratio and r_byp; one panel per arm (shared log y per row): each seed's P2-P98 band."""
    kinds = [(name, SERIES[f"{name}_p2"], SERIES[f"{name}_p98"]) for name in ("loss_ratio", "r_byp")
             if any(step_series(r.records, SERIES[f"{name}_p98"]) for r in runs)]
    if not kinds:
        return Figure(ENVELOPE_FIGURE, missing="no diag/ratio_loss_last/* or diag/ratio_byp_last/* in the runs")
    arms = _arms(runs)
    fig, axes = plt.subplots(len(kinds), len(arms), figsize=(3.2 * len(arms), 2.8 * len(kinds)), squeeze=False,
                             sharey="row", sharex=True)
    for row, (name, lo_key, hi_key) in zip(axes, kinds, strict=True):
        for ax, arm in zip(row, arms, strict=True):
            for run in (r for r in runs if r.arm == arm):
                lo, hi = dict(step_series(run.records, lo_key)), dict(step_series(run.records, hi_key))
                steps = [s for s in lo if s in hi and lo[s] > 0 and hi[s] > 0]  # log axis
                style = _style(runs, run)
                ax.fill_between(steps, [lo[s] for s in steps], [hi[s] for s in steps], color=style["color"],
                                alpha=0.15)
                for band in (lo, hi):
                    ax.plot(steps, [band[s] for s in steps], lw=0.8, label=f"seed {run.seed}" if band is lo
                            else None, **style)
                if name == "loss_ratio":  # the counted excursions, at the edge that left the band
                    out = [s for s in run.counts.envelope_excursions.steps if s in steps]
                    ax.plot(out, [lo[s] if lo[s] < 1 / ENVELOPE_BAND else hi[s] for s in out], "x", ms=7, mew=1.5,
                            color=style["color"])
            ax.axhline(1.0, color="grey", lw=0.8)
            if name == "loss_ratio":
                for edge in (1 / ENVELOPE_BAND, ENVELOPE_BAND):
                    ax.axhline(edge, color="grey", lw=0.6, ls=":")
            ax.set_yscale("log")
            _finish(ax, f"{arm}: {'loss ratio' if name == 'loss_ratio' else 'r_byp = π_θ/μ'}", "ratio P2-P98")
    fig.suptitle(ENVELOPE_FIGURE, fontsize=10)
    fig.tight_layout()
    return Figure(ENVELOPE_FIGURE, png(fig))


def kl_figure(runs: Sequence[HorizonRun]) -> Figure:
    """Rollout→trainer KL (k3) and the update KL (k3) per run over steps, log y, their spikes marked."""
    fig, (ax_kl, ax_upd) = plt.subplots(1, 2, figsize=(13.0, 3.8))
    drawn = [_line(ax_kl, runs, r, SERIES["kl"], r.counts.kl_spikes, positive=True) for r in runs]
    drawn += [_line(ax_upd, runs, r, SERIES["update_kl"], r.counts.update_kl_spikes, positive=True) for r in runs]
    if not any(drawn):
        plt.close(fig)
        return Figure(KL_FIGURE, missing="no rollout_corr/k3_kl or diag/policy_kl_k3 in the runs")
    for ax, title in ((ax_kl, "rollout→trainer KL(μ ‖ π_θold), k3"), (ax_upd, "update KL(π_θold ‖ π_θ), k3")):
        ax.set_yscale("log")
        _finish(ax, title, "KL (nats/token)", legend=ax is ax_kl)
    fig.suptitle(KL_FIGURE, fontsize=10)
    fig.tight_layout()
    return Figure(KL_FIGURE, png(fig))


def dynamics_figure(runs: Sequence[HorizonRun]) -> Figure:
    """Entropy (clean, after the update) and the pre-clip grad norm per run over steps, grad-norm spikes marked."""
    fig, (ax_ent, ax_grad) = plt.subplots(1, 2, figsize=(13.0, 3.8))
    drawn = [_line(ax_ent, runs, r, SERIES["entropy"]) for r in runs]
    drawn += [_line(ax_grad, runs, r, SERIES["grad_norm"], r.counts.grad_norm_spikes) for r in runs]
    if not any(drawn):
        plt.close(fig)
        return Figure(DYNAMICS_FIGURE, missing="no diag/entropy or actor/grad_norm in the runs")
    _finish(ax_ent, "entropy of π_θ (no noise)", "nats/token")
    _finish(ax_grad, "grad norm before clipping", "‖g‖", legend=False)
    fig.suptitle(DYNAMICS_FIGURE, fontsize=10)
    fig.tight_layout()
    return Figure(DYNAMICS_FIGURE, png(fig))


def success_figure(runs: Sequence[HorizonRun]) -> Figure:
    """Held-out success at every evaluation step per run, collapses marked."""
    fig, ax = plt.subplots(figsize=(8.0, 3.8))
    if not any([_line(ax, runs, r, SERIES["success"], r.counts.collapse, marker="o") for r in runs]):
        plt.close(fig)
        return Figure(SUCCESS_FIGURE, missing="no eval/success in the runs")
    _finish(ax, SUCCESS_FIGURE, "held-out success")
    fig.tight_layout()
    return Figure(SUCCESS_FIGURE, png(fig))


HORIZON_FIGURES = (envelope_figure, kl_figure, dynamics_figure, success_figure)
