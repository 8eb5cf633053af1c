"""Robustness report: `<out>/robustness.html` (PNG plots embedded, base64), `robustness.json`, `plots/*.png`.

Inputs: the per-episode records of `robustness_sweep` (kept as `<out>/records.jsonl`) and optional metadata
(checkpoint, env, ...; kept as `<out>/meta.json`), so `write_robustness_report(out)` re-renders a report from
its directory alone. Plots: success vs perturbation scale per family (overall, bold, and per task type),
retention per family, and the probe KL (clean vs perturbed next-token distributions) when measured.
Plot style follows `evaluation.reports.run_report` (matplotlib Agg, 100 dpi, light grid).
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
    ax.set_title(f"Success vs {family} scale")
    ax.set_ylabel("success rate")
    ax.set_ylim(-0.03, 1.03)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    return _png_bytes(fig)


def plot_retention(curves: Mapping[str, Mapping[str, Any]]) -> bytes:
    """One panel per family: retention (perturbed / clean success) per scale; an empty bar where undefined."""
    fig, axes = plt.subplots(1, len(curves), figsize=(3.4 * len(curves), 3.2), squeeze=False)
    for ax, (family, curve) in zip(axes[0], curves.items(), strict=True):
        labels = ["clean", *(str(x) for x in curve["x"][1:])]
        values = [r if r is not None else 0.0 for r in curve["retention"]]
        ax.bar(range(len(labels)), values, color=["#888"] + ["#3a7"] * (len(labels) - 1))
        ax.set_xticks(range(len(labels)), labels, rotation=45, fontsize=7)
        ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
        ax.set_title(family)
        ax.grid(alpha=0.3, axis="y")
    axes[0][0].set_ylabel("retention (perturbed / clean)")
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
    return {"retention": "Retention (perturbed / clean success)",
            "probe_kl": "Probe KL: clean vs perturbed next-token distributions"}[plot_name]


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    return f"{value:.3g}" if isinstance(value, float) else html.escape(str(value))


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_fmt(v)}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _tables(summary: Mapping[str, Any]) -> str:
    table = summary["conditions"]
    extra = sorted({k for row in table for k in row if k.startswith("perturb_") or k == "probe_kl"})
    rows = [[r["family"], r["scale"], r["episodes"], r["success"],
             f"{r['success_ci'][0]:.3g}–{r['success_ci'][1]:.3g}", r["retention"], r["reward"],
             *(r.get(k) for k in extra)] for r in table]
    header = ["family", "scale", "episodes", "success", "95% CI", "retention", "reward", *extra]
    parts = ["<h2>Retention table</h2>", _table(header, rows)]
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
