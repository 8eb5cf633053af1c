"""`alprl eval`'s report: `summary.json`, `report.html` (tables and pass@k plots, PNGs embedded) and the terminal
table, all from the per-sample records and the run's settings.

Tables follow the papers' layout (the ALP paper's Table 1, Qwen2.5-Math's): one row per model, one column per
benchmark and an Average column (the unweighted mean over benchmarks), one table per figure: avg@k, maj@k, then
pass@k at k = 1, 2, 4, ..., k. Figures are percentages. The pass@k curve of each benchmark is drawn on a log2 k
axis. Plot style follows `evaluation.reports.run_report` (matplotlib Agg, 100 dpi, light grid).
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

from evaluation.scores import average_scores, benchmark_scores  # noqa: E402

SUMMARY_FILE = "summary.json"
REPORT_FILE = "report.html"


def summarize_eval(records: Mapping[str, Sequence[Mapping[str, Any]]], meta: Mapping[str, Any],
                   sources: Mapping[str, str],
                   ungradable: Mapping[str, Sequence[Mapping[str, Any]]] | None = None) -> dict[str, Any]:
    """The summary of one evaluation: scores per benchmark (in `records`' order), their Average, and `meta`.

    ungradable: benchmark → its played rows whose gold was graded as a string ({"file", "row", "index",
    "reason"}); each benchmark reports their count (`ungradable`) and the rows (`ungradable_rows`)."""
    ungradable = ungradable or {}
    per_bench = {name: {**benchmark_scores(rs), "source": sources.get(name, ""),
                        "ungradable": len(ungradable.get(name, ())),
                        "ungradable_rows": [dict(row) for row in ungradable.get(name, ())]}
                 for name, rs in records.items()}
    return {**dict(meta), "benchmarks": per_bench, "average": average_scores(per_bench)}


def ungradable_lines(summary: Mapping[str, Any]) -> list[str]:
    """One line per benchmark with ungradable rows, naming each: `math500: 5 gold answers graded as strings
    (math-verify cannot grade them): data.jsonl row 3 (index 2): unbalanced braces ...; ...`."""
    lines = []
    for name, bench in summary["benchmarks"].items():
        rows = bench.get("ungradable_rows") or []
        if rows:
            named = "; ".join(f"{Path(r['file']).name} row {r['row']} (index {r['index']}): {r['reason']}"
                              for r in rows)
            lines.append(f"{name}: {len(rows)} gold answer(s) graded as strings (math-verify cannot grade them): "
                         f"{named}")
    return lines


def metric_rows(summary: Mapping[str, Any]) -> list[tuple[str, list[float | None]]]:
    """(figure name, its value per benchmark then Average) for avg@k, maj@k and each pass@k."""
    benches = list(summary["benchmarks"].values())
    n = max(b["samples"] for b in benches)
    avg = summary["average"]
    rows: list[tuple[str, list[float | None]]] = [
        (f"avg@{n}", [b["avg"] for b in benches] + [avg["avg"]]),
        (f"maj@{n}", [b["maj"] for b in benches] + [avg["maj"]])]
    ks = sorted({int(k) for b in benches for k in b["pass"]})
    rows += [(f"pass@{k}", [b["pass"].get(str(k)) for b in benches] + [avg["pass"].get(str(k))]) for k in ks]
    return rows


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}"


def score_table(summary: Mapping[str, Any]):
    """The terminal table (rich): a row per figure, a column per benchmark and Average."""
    from rich.table import Table

    table = Table()
    table.add_column("")
    for name in [*summary["benchmarks"], "Average"]:
        table.add_column(name, justify="right")
    for metric, values in metric_rows(summary):
        table.add_row(metric, *(_pct(v) for v in values))
    return table


def plot_passk(name: str, scores: Mapping[str, Any]) -> bytes:
    """pass@k against k (log2 axis) of one benchmark."""
    ks = sorted(int(k) for k in scores["pass"])
    fig, ax = plt.subplots(figsize=(4.8, 3.4))
    ax.plot(ks, [100 * scores["pass"][str(k)] for k in ks], marker="o")
    ax.set_xscale("log", base=2)
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.set_ylim(-3, 103)
    ax.set_title(f"{name}: pass@k ({scores['problems']} problems)")
    ax.set_xlabel("k (samples)")
    ax.set_ylabel("pass@k (%)")
    ax.grid(alpha=0.3)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _html(summary: Mapping[str, Any], plots: Mapping[str, bytes]) -> str:
    names = list(summary["benchmarks"])
    label = str(summary.get("label", "model"))
    parts = [f"<h1>{html.escape(label)}</h1>",
             _table(["setting", "value"], [[k, v] for k, v in summary.items() if k not in ("benchmarks", "average")])]
    for metric, values in metric_rows(summary):
        parts += [f"<h2>{html.escape(metric)} (%)</h2>",
                  _table(["Model", *names, "Average"], [[label, *(_pct(v) for v in values)]])]
    details = [[name, b["problems"], b["samples"], f"{b['reward']:.3f}", f"{b['response_tokens']:.0f}",
                f"{b['turns']:.2f}", f"{b['tool_calls']:.2f}", _pct(b["answered"]), _pct(b["truncated"]),
                b.get("ungradable", 0), b["source"]]
               for name, b in summary["benchmarks"].items()]
    parts += ["<h2>Benchmarks</h2>",
              _table(["benchmark", "problems", "samples", "mean reward", "response tokens", "turns", "tool calls",
                      "answered (%)", "truncated (%)", "ungradable rows", "problems from"], details),
              *_ungradable_html(summary),
              "<h2>pass@k curves</h2>"]
    parts += [f"<img alt='pass@k of {html.escape(name)}' src='data:image/png;base64,"
              f"{base64.b64encode(png).decode()}'/>" for name, png in plots.items()]
    style = ("body{font-family:sans-serif;max-width:1000px;margin:2em auto}"
             "table{border-collapse:collapse;margin-bottom:1em}"
             "td,th{border:1px solid #ccc;padding:3px 7px;font-size:13px}img{max-width:49%}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(label)} evaluation</title>"
            f"<style>{style}</style></head><body>{''.join(parts)}</body></html>")


def _ungradable_html(summary: Mapping[str, Any]) -> list[str]:
    rows = [[name, r["file"], r["row"], r["index"], r["reason"]]
            for name, b in summary["benchmarks"].items() for r in b.get("ungradable_rows") or []]
    if not rows:
        return []
    return ["<h2>Ungradable rows (graded as strings)</h2>",
            "<p>Gold answers math-verify cannot grade: their samples are correct when the answer equals the gold "
            "as a string (whitespace removed).</p>",
            _table(["benchmark", "file", "row", "index", "reason"], rows)]


def write_eval_report(out_dir: str | Path, summary: Mapping[str, Any]) -> Path:
    """Write `summary.json`, `plots/passk_<benchmark>.png` and `report.html` into `out_dir`; returns the page."""
    out = Path(out_dir)
    (out / "plots").mkdir(parents=True, exist_ok=True)
    (out / SUMMARY_FILE).write_text(json.dumps(summary, indent=2))
    plots = {name: plot_passk(name, scores) for name, scores in summary["benchmarks"].items()}
    for i, (name, png) in enumerate(plots.items()):
        (out / "plots" / f"passk_{i}_{_file_safe(name)}.png").write_bytes(png)
    page = out / REPORT_FILE
    page.write_text(_html(summary, plots))
    return page


def _file_safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
