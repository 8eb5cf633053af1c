"""The experiment report's own charts (PNG, base64): held-out success per arm, the robustness sweep per family, and
held-out success and |Δp| against σ0 (ALP Figure 9) for arms that differ in the perturbation's σ0.

The σ0, its mode and learning rate of an arm are read from its setting's overrides (`perturb.sigma_init`,
`perturb.sigma_mode`, `perturb.lr`) in report.json's `settings`; arms whose setting names no σ0 are left out.
"""

from __future__ import annotations

from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from evaluation.reports.run_figures import png


def arm_bounds(arm: dict[str, Any]) -> tuple[float, float]:
    """An arm's 95% interval over runs, or its evaluation-only one where one seed measured no run-to-run noise."""
    if arm.get("ci_lo") is not None:
        return arm["ci_lo"], arm["ci_hi"]
    return arm.get("eval_ci_lo", arm["success"]), arm.get("eval_ci_hi", arm["success"])


def success_chart(data: dict[str, Any]) -> str | None:
    """Held-out success per arm with its 95% interval over runs (PNG, base64)."""
    arms = data["arms"]
    if not arms:
        return None
    fig, ax = plt.subplots(figsize=(max(4.0, 1.1 * len(arms)), 3.4))
    names = list(arms)
    means = [arms[n]["success"] for n in names]
    errs = [[m - arm_bounds(arms[n])[0] for n, m in zip(names, means, strict=True)],
            [arm_bounds(arms[n])[1] - m for n, m in zip(names, means, strict=True)]]
    ax.bar(range(len(names)), means, yerr=errs, capsize=4, color="#4c72b0")
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("held-out success")
    ax.set_title(f"Held-out success, 95% interval over runs ({data['scale_words']})", fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    return png(fig)


ROBUSTNESS_FIGURE = "Robustness sweep: success per family and scale"


def robustness_chart(data: dict[str, Any]) -> str | None:
    """Success with its 95% interval against perturbation scale, one panel per family, one line per arm (PNG,
    base64); the clean success is each line's first point (noise, prune) or a dashed level (quant)."""
    arms = {name: a["robustness"] for name, a in data["arms"].items() if a.get("robustness")}
    families = [f for f in ("noise", "prune", "quant") if any(r["family"] == f for rows in arms.values() for r in rows)]
    if not families:
        return None
    fig, axes = plt.subplots(1, len(families), figsize=(4.2 * len(families), 3.4), squeeze=False)
    for ax, family in zip(axes[0], families, strict=True):
        for i, (name, rows) in enumerate(arms.items()):
            clean = next((r for r in rows if r["family"] == "clean"), None)
            points = [r for r in rows if r["family"] == family]
            if family != "quant" and clean is not None:
                points = [clean, *points]
            xs = range(len(points)) if family == "quant" else [float(r["scale"]) for r in points]
            ys = [r["success"] for r in points]
            err = [[y - r["ci_lo"] for y, r in zip(ys, points, strict=True)],
                   [r["ci_hi"] - y for y, r in zip(ys, points, strict=True)]]
            line = ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=name,
                               alpha=0.85)  # arms overlap at shared scales: translucent
            if family == "quant" and clean is not None:
                ax.axhline(clean["success"], ls="--", lw=1, color=line[0].get_color())
            if family == "quant" and i == 0:
                ax.set_xticks(list(xs), [r["scale"] for r in points], fontsize=8)
        ax.set_title(family + (" (dashed: clean)" if family == "quant" else ""), fontsize=9)
        ax.set_xlabel("scale" if family != "quant" else "format")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("success (95% interval)")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(ROBUSTNESS_FIGURE, fontsize=10)
    fig.tight_layout()
    return png(fig)


SIGMA_FIGURE = "Figure 9: held-out success, |Δp| and σ drift against σ0"


def _setting_values(overrides: list[str]) -> dict[str, str]:
    return dict(o.split("=", 1) for o in overrides if "=" in o)


def sigma_lines(data: dict[str, Any]) -> dict[str, list[tuple[float, dict[str, Any]]]]:
    """Arms grouped into lines "method, mode, η_σ" of (σ0, arm summary) sorted by σ0; only perturbed arms whose
    setting names σ0."""
    lines: dict[str, list[tuple[float, dict[str, Any]]]] = {}
    for name, arm in data["arms"].items():
        method, _, setting = name.partition("/")
        values = _setting_values(data["settings"].get(setting, []))
        if "perturb.sigma_init" not in values or values.get("perturb.enabled") == "false":
            continue
        label = f"{method}, {values.get('perturb.sigma_mode', 'absolute')}, η_σ {values.get('perturb.lr', '?')}"
        lines.setdefault(label, []).append((float(values["perturb.sigma_init"]), arm))
    return {k: sorted(v, key=lambda p: p[0]) for k, v in lines.items() if len(v) > 1}


def sigma_response_chart(data: dict[str, Any]) -> str | None:
    """Three panels against σ0 (log scale), one line per method/mode/η_σ: held-out success with its interval;
    |Δp| P99 of the perturbation with the sampler's own |π_old − μ| P99 dashed; σ's drift over the run."""
    lines = sigma_lines(data)
    if not lines:
        return None
    fig, (ax_s, ax_d, ax_r) = plt.subplots(1, 3, figsize=(14.0, 3.6))
    ax_d.set_yscale("log")  # |Δp| spans decades, as σ0 does
    mismatch = []
    for label, points in lines.items():
        xs = [x for x, _ in points]
        ys = [a["success"] for _, a in points]
        err = [[y - arm_bounds(a)[0] for y, (_, a) in zip(ys, points, strict=True)],
               [arm_bounds(a)[1] - y for y, (_, a) in zip(ys, points, strict=True)]]
        ax_s.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=label, alpha=0.85)
        dp = [(x, v) for x, a in points if (v := a["training"].get("dp_p99_mean")) is not None and v > 0]
        ax_d.plot([x for x, _ in dp], [v for _, v in dp], marker="o", label=label)  # log axis: positive only
        drift = [(x, a["training"].get("sigma_drift")) for x, a in points]
        ax_r.plot([x for x, v in drift if v is not None], [v for _, v in drift if v is not None], marker="o",
                  label=label)
        mismatch += [a["training"]["mismatch_dp_p99_mean"] for _, a in points
                     if a["training"].get("mismatch_dp_p99_mean") is not None]
    if mismatch:
        level = sum(mismatch) / len(mismatch)
        ax_d.axhline(level, ls="--", color="k", lw=1, label="sampler |π_old − μ| P99")
        ax_d.set_ylim(top=max(ax_d.get_ylim()[1], 3 * level))
    for ax, title, ylabel in ((ax_s, "held-out success (95% interval)", "success"),
                              (ax_d, "|Δp| P99 of the perturbation (mean over steps)", "|Δp|"),
                              (ax_r, "σ drift over the run (last / first)", "σ_last / σ0")):
        ax.set_xscale("log")
        ax.set_xlabel("σ0")
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
    ax_s.legend(fontsize=7)
    ax_d.legend(fontsize=7)
    fig.suptitle(SIGMA_FIGURE, fontsize=10)
    fig.tight_layout()
    return png(fig)
