"""Robustness report: `<out>/robustness.html` (PNG plots embedded, base64), `robustness.json`, `plots/*.png`.

Inputs: the per-episode records of `robustness_sweep` (kept as `<out>/records.jsonl`) and optional metadata
(checkpoint, env, ...; kept as `<out>/meta.json`), so `write_robustness_report(out)` re-renders a report from
its directory alone. Plots: success vs perturbation scale per family (overall, bold, with its 95% interval over
tasks, and per task type), the paired change in success against clean per family, retention per family (both with
their intervals, `evaluation.robustness_metrics` defines them), and the probe KL (clean vs perturbed next-token
distributions) when measured. `text_table` is the same table for a terminal (`alprl robustness` prints it).
Plot style follows `evaluation.reports.run_report` (matplotlib Agg, 100 dpi, light grid); every interval is drawn
in `INTERVAL_COLOR` and nothing else is, so a reader (and the browser test) can tell them from the data.
"""

from __future__ import annotations

import base64
import html
import io
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from evaluation.reports.run_report import read_jsonl
from evaluation.robustness_metrics import summarize_robustness  # noqa: E402

INTERVAL_COLOR = "#b5179e"  # not in matplotlib's default cycle (the per-type lines) nor the bars' colours


def _png_bytes(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _xaxis(ax, curve: Mapping[str, Any], label: str) -> list[float]:
    """x positions of a curve: the scales themselves, or 0..n-1 with the labels as ticks."""
    if curve["numeric"]:
        ax.set_xlabel(label)
        return curve["x"]
    positions = list(range(len(curve["x"])))
    ax.set_xticks(positions, curve["x"])
    ax.set_xlabel(label)
    return positions


def plot_success(family: str, curve: Mapping[str, Any]) -> bytes:
    """Success vs scale for one family: overall (bold) and each task type (thin)."""
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    xs = _xaxis(ax, curve, f"{family} scale")
    for task_type, ys in curve["per_type"].items():
        pts = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None]
        if pts:
            ax.plot(*zip(*pts, strict=True), marker=".", linewidth=1, alpha=0.8, label=task_type)
    # drawn last, on top: with few tasks the per-type lines often coincide with the overall one
    ax.plot(xs, curve["success"], marker="o", linewidth=2.5, color="black", label="all tasks", zorder=5)
    ax.set_ylim(-0.03, 1.03)
    _whiskers(ax, xs, curve["success"], curve["success_ci"], label="95% interval over tasks")
    ax.set_title(f"Success vs {family} scale")
    ax.set_ylabel("success rate")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    return _png_bytes(fig)


def _whiskers(ax, xs: Sequence[float], values: Sequence[float | None], cis: Sequence[Sequence[float | None] | None],
              scale: float = 1.0, label: str | None = None) -> None:
    """Interval whiskers (with caps) at xs; a point without an interval gets none; an upper bound of None
    (unbounded) reaches the top of the axes and is marked ∞ there."""
    top = ax.get_ylim()[1]
    for x, value, ci in zip(xs, values, cis, strict=True):
        if value is None or ci is None:
            continue
        lo, hi = ci[0] * scale, top if ci[1] is None else ci[1] * scale
        ax.errorbar([x], [value * scale], yerr=[[value * scale - lo], [hi - value * scale]], fmt="none",
                    ecolor=INTERVAL_COLOR, elinewidth=2, capsize=4, capthick=2, zorder=6, label=label)
        label = None  # one legend entry
        if ci[1] is None:
            ax.annotate("∞", (x, top), xytext=(5, -3), textcoords="offset points", ha="left", va="top",
                        fontsize=10, color=INTERVAL_COLOR)


def plot_retention(curves: Mapping[str, Mapping[str, Any]]) -> bytes:
    """One panel per family: retention (perturbed / clean success) per scale with its 95% interval; an empty bar
    where undefined."""
    fig, axes = plt.subplots(1, len(curves), figsize=(3.4 * len(curves), 3.2), squeeze=False)
    finite = [v for c in curves.values() for ci in c["retention_ci"] if ci for v in ci if v is not None]
    top = 1.05 * max([1.2, *finite, *(r for c in curves.values() for r in c["retention"] if r is not None)])
    for ax, (family, curve) in zip(axes[0], curves.items(), strict=True):
        labels = ["clean", *(str(x) for x in curve["x"][1:])]
        values = [r if r is not None else 0.0 for r in curve["retention"]]
        ax.bar(range(len(labels)), values, color=["#888"] + ["#3a7"] * (len(labels) - 1))
        ax.set_ylim(0.0, top)
        _whiskers(ax, range(len(labels)), curve["retention"], curve["retention_ci"])
        ax.set_xticks(range(len(labels)), labels, rotation=45, fontsize=7)
        ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
        ax.set_title(family)
        ax.grid(alpha=0.3, axis="y")
    axes[0][0].set_ylabel("retention (perturbed / clean)")
    return _png_bytes(fig)


def plot_change(curves: Mapping[str, Mapping[str, Any]]) -> bytes:
    """One panel per family: success − clean success in points per scale, with its paired 95% interval."""
    fig, axes = plt.subplots(1, len(curves), figsize=(3.4 * len(curves), 3.2), squeeze=False, sharey=True)
    bounds = [100 * v for c in curves.values() for ci in c["change_ci"] if ci for v in ci]
    axes[0][0].set_ylim(min([-5.0, *bounds]) - 3, max([5.0, *bounds]) + 3)
    for ax, (family, curve) in zip(axes[0], curves.items(), strict=True):
        xs = _xaxis(ax, curve, "scale")
        ax.axhline(0.0, color="black", linewidth=0.8, linestyle="--")
        ax.plot(xs, [100 * c for c in curve["change"]], marker="o", color="black", linewidth=1.5, zorder=5)
        _whiskers(ax, xs, curve["change"], curve["change_ci"], scale=100.0)
        ax.set_title(family)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("change vs clean (points)")
    return _png_bytes(fig)


def plot_probe_kl(curves: Mapping[str, Mapping[str, Any]]) -> bytes | None:
    """KL(clean ‖ perturbed) per token on the probe prompts vs scale, per family; None if unmeasured."""
    measured = {f: c for f, c in curves.items() if any(v is not None for v in c["probe_kl"])}
    if not measured:
        return None
    fig, axes = plt.subplots(1, len(measured), figsize=(3.4 * len(measured), 3.2), squeeze=False)
    for ax, (family, curve) in zip(axes[0], measured.items(), strict=True):
        xs = _xaxis(ax, curve, "scale")
        ax.plot(xs, [v if v is not None else float("nan") for v in curve["probe_kl"]], marker="o")
        ax.set_title(family)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("KL(clean || perturbed), nats/token")
    return _png_bytes(fig)


def _heading(plot_name: str) -> str:
    if plot_name.startswith("success_"):
        return f"Success vs {plot_name.removeprefix('success_')} scale"
    return {"retention": "Retention (perturbed / clean success), 95% interval over tasks",
            "change": "Change in success against clean (paired by task and sample), 95% interval over tasks",
            "probe_kl": "Probe KL: clean vs perturbed next-token distributions"}[plot_name]


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    return f"{value:.3g}" if isinstance(value, float) else html.escape(str(value))


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_fmt(v)}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _number(value: float | None, scale: float, digits: int, signed: bool) -> str:
    if value is None:
        return "∞"  # an interval bound of None is unbounded (robustness_metrics)
    return f"{value * scale:+.{digits}f}" if signed else f"{value * scale:.{digits}f}"


def _interval(ci: Sequence[float | None] | None, scale: float = 1.0, digits: int = 1, signed: bool = False) -> str:
    if ci is None:
        return "—"
    return f"[{_number(ci[0], scale, digits, signed)}, {_number(ci[1], scale, digits, signed)}]"


def condition_cells(row: Mapping[str, Any]) -> dict[str, str]:
    """A condition's figures as text, the same in the page and the terminal: success in %, the paired change
    against clean in points, retention as a ratio, each with its 95% interval ("—" where there is none)."""
    clean = row["family"] == "clean"
    return {"success %": f"{100 * row['success']:.1f}", "success CI": _interval(row["success_ci"], 100.0),
            "change, points": "—" if clean else f"{100 * row['change']:+.1f}",
            "change CI": _interval(row["change_ci"], 100.0, signed=True),
            "retention": "—" if row["retention"] is None else f"{row['retention']:.2f}",
            "retention CI": _interval(row["retention_ci"], digits=2),
            "probe KL": "—" if row.get("probe_kl") is None else f"{row['probe_kl']:.4g}"}


def text_table(summary: Mapping[str, Any]) -> str:
    """The condition table for a terminal: condition, success, change against clean and retention with their 95%
    intervals, probe KL; columns aligned, a legend line below."""
    header = ["condition", "success % [95% CI]", "change vs clean, points [95% CI]", "retention [95% CI]",
              "probe KL"]
    rows = []
    for row in summary["conditions"]:
        cells = condition_cells(row)
        rows.append([str(row["condition"]), f"{cells['success %']} {cells['success CI']}",
                     f"{cells['change, points']} {cells['change CI']}".removesuffix(" —"),
                     f"{cells['retention']} {cells['retention CI']}".removesuffix(" —"), cells["probe KL"]])
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in [header, *rows]]
    return "\n".join([*lines, "intervals: 95% bootstrap over tasks; change and retention pair each episode with the "
                                "clean one of the same task and sample"])


def _tables(summary: Mapping[str, Any]) -> str:
    table = summary["conditions"]
    extra = sorted({k for row in table for k in row if k.startswith("perturb_") or k == "probe_kl"})
    figures = ["success %", "success CI", "change, points", "change CI", "retention", "retention CI"]
    rows = [[r["family"], r["scale"], r["episodes"], *(condition_cells(r)[k] for k in figures), r["reward"],
             *(r.get(k) for k in extra)] for r in table]
    header = ["family", "scale", "episodes", "success %", "95% CI", "change vs clean, points", "95% CI (paired)",
              "retention", "95% CI", "reward", *extra]
    parts = ["<h2>Conditions: success, change against clean, retention</h2>",
             "<p>Intervals: 95% bootstrap over tasks. The change against clean and the retention pair each episode "
             "with the clean one of the same task and sample seed, so how hard each task is cancels.</p>",
             _table(header, rows)]
    types = list(table[0]["per_type"])
    if types:
        cell = [[r["family"], r["scale"], *(f"{_fmt(r['per_type'].get(t, {}).get('success'))} "
                                             f"({_fmt(r['per_type'].get(t, {}).get('retention'))})"
                                             for t in types)] for r in table]
        parts += ["<h2>Per task type: success (retention)</h2>", _table(["family", "scale", *types], cell)]
    curves = summary["curves"]
    parts += ["<h2>Degradation summary</h2>",
              _table(["family", "retention AUC", "mean retention"],
                     [[f, c["retention_auc"], c["mean_retention"]] for f, c in curves.items()])]
    return "".join(parts)


def write_robustness_report(out_dir: str | Path, records: Sequence[Mapping[str, Any]] | None = None,
                            meta: Mapping[str, Any] | None = None,
                            title: str = "alprl robustness report") -> Path:
    """Write records (if given), JSON summary, PNGs and the HTML page into `out_dir`; returns the HTML."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if records is not None:
        (out / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        (out / "meta.json").write_text(json.dumps(dict(meta or {}), indent=2))
    records = read_jsonl(out / "records.jsonl")
    if not records:
        raise FileNotFoundError(f"no robustness records in {out / 'records.jsonl'}; "
                                "run robustness_sweep (or alprl robustness) first")
    meta_path = out / "meta.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    summary = summarize_robustness(records)
    (out / "robustness.json").write_text(json.dumps({"meta": meta, **summary}, indent=2))
    plots = {f"success_{f}": plot_success(f, c) for f, c in summary["curves"].items()}
    if summary["curves"]:
        plots["change"] = plot_change(summary["curves"])
        plots["retention"] = plot_retention(summary["curves"])
        kl = plot_probe_kl(summary["curves"])
        if kl:
            plots["probe_kl"] = kl
    (out / "plots").mkdir(exist_ok=True)
    for name, png in plots.items():
        (out / "plots" / f"{name}.png").write_bytes(png)
    facts = {**meta, "clean success": summary["clean_success"]}
    parts = [f"<h1>{html.escape(title)}</h1>", _table(["key", "value"], [[k, v] for k, v in facts.items()])]
    parts += [f"<h2>{html.escape(_heading(name))}</h2><img alt='{html.escape(name)}' "
              f"src='data:image/png;base64,{base64.b64encode(png).decode()}'/>"
              for name, png in plots.items()]
    parts.append(_tables(summary))
    style = ("body{font-family:sans-serif;max-width:1000px;margin:2em auto}"
             "table{border-collapse:collapse;margin-bottom:1em}"
             "td,th{border:1px solid #ccc;padding:3px 7px;font-size:13px}img{max-width:100%}")
    page = out / "robustness.html"
    page.write_text(f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
                    f"<style>{style}</style></head><body>{''.join(parts)}</body></html>")
    return page
