"""Run report: `<run>/report.html` with matplotlib PNG plots embedded (base64) and a JSON summary.

Reads `<run>/metrics.jsonl` (one record per step; step 0 holds the pre-RL evaluation), an optional
`<run>/summary.json` and the per-episode evaluation records `<run>/eval/step_<N>.jsonl`: each later evaluation is
compared with the first on the same tasks (`paired_difference`). Works on any run directory, so
`alprl report <run>` regenerates it.
"""

from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from evaluation.metrics import paired_difference  # noqa: E402


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _series(records: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    pts = [(r["step"], r[key]) for r in records if r.get(key) is not None]
    return [p[0] for p in pts], [p[1] for p in pts]


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def plot_lines(records: list[dict[str, Any]], keys: list[str], title: str, ylabel: str) -> str | None:
    """One PNG (base64) with a line per metric key; None if no key has data."""
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    drawn = False
    for key in keys:
        xs, ys = _series(records, key)
        if xs:
            ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, label=key)
            drawn = True
    if not drawn:
        plt.close(fig)
        return None
    ax.set_title(title)
    ax.set_xlabel("RL step")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _png(fig)


PLOTS = [
    (["rollout/reward"], "Training reward (rollout batches)", "mean reward"),
    (["eval/success"], "Held-out success (test split, averaged over samples)", "success rate"),
    (["rollout_corr/kl", "rollout_corr/k3_kl"], "Rollout vs trainer mismatch", "KL estimate (nats/token)"),
    (["actor/ppo_kl", "actor/clip_high", "actor/clip_low"], "Policy update", "value"),
    (["rollout/response_len", "rollout/sampled_tokens"], "Response length", "tokens"),
    (["rollout/tool_calls", "rollout/turns"], "Tool use", "per episode"),
]


def _step_of(eval_file: Path) -> int:
    return int(eval_file.stem.removeprefix("step_"))


def eval_changes(run: Path, key: str = "won") -> list[tuple[int, int, dict[str, float]]]:
    """(first step, later step, paired_difference of `key`) for every evaluation after the run's first one; empty
    when there is none or the records do not carry `key`."""
    files = sorted(run.glob("eval/step_*.jsonl"), key=_step_of)
    if len(files) < 2:
        return []
    first = read_jsonl(files[0])
    if any(key not in r for r in first):
        return []
    return [(_step_of(files[0]), _step_of(f), paired_difference(first, read_jsonl(f), success_key=key))
            for f in files[1:]]


def _changes_table(run: Path) -> str:
    """Success changes, and reward changes where rewards are not just success (WebShop's score)."""
    success = eval_changes(run)
    if not success:
        return ""
    reward = eval_changes(run, "reward")
    show_reward = len(reward) == len(success) and any(
        abs(r["after"] - s["after"]) > 1e-9 or abs(r["before"] - s["before"]) > 1e-9
        for (_, _, s), (_, _, r) in zip(success, reward, strict=True))
    cells = (("held-out success", success),) + ((("mean reward", reward),) if show_reward else ())
    head = "<tr><th>step</th><th>tasks</th>" + "".join(
        f"<th>{name}</th><th>change vs step {success[0][0]}</th><th>95% interval</th>" for name, _ in cells) + "</tr>"
    rows = ""
    for i, (_, step, d0) in enumerate(success):
        rows += f"<tr><td>{step}</td><td>{int(d0['problems'])}</td>"
        for _, changes in cells:
            d = changes[i][2]
            rows += (f"<td>{d['before']:.3f} &rarr; {d['after']:.3f}</td><td>{d['diff']:+.3f}</td>"
                     f"<td>[{d['diff_ci_lo']:+.3f}, {d['diff_ci_hi']:+.3f}]</td>")
        rows += "</tr>"
    return ("<h2>Held-out change</h2><p>Each evaluation against the first one on the same tasks (mean per-task "
            "change, bootstrap interval over tasks).</p>" f"<table>{head}{rows}</table>")


def write_report(run_dir: str | Path, title: str = "alprl run report") -> Path:
    """Render `<run>/report.html` from the run's metrics; returns its path."""
    run = Path(run_dir)
    records = read_jsonl(run / "metrics.jsonl")
    if not records:
        raise FileNotFoundError(f"no metrics in {run / 'metrics.jsonl'}; is {run} a run directory?")
    summary_path = run / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    parts = [f"<h1>{html.escape(title)}</h1>", f"<p>run directory: <code>{html.escape(str(run))}</code></p>"]
    if summary:
        rows = "".join(f"<tr><td>{html.escape(str(k))}</td><td>{html.escape(_fmt(v))}</td></tr>"
                       for k, v in summary.items())
        parts.append(f"<h2>Summary</h2><table>{rows}</table>")
    parts.append(_changes_table(run))
    for keys, plot_title, ylabel in PLOTS:
        image = plot_lines(records, keys, plot_title, ylabel)
        if image:
            parts.append(f"<h2>{html.escape(plot_title)}</h2><img alt='{html.escape(plot_title)}' "
                         f"src='data:image/png;base64,{image}'/>")
    style = ("body{font-family:sans-serif;max-width:900px;margin:2em auto}table{border-collapse:collapse}"
             "td{border:1px solid #ccc;padding:4px 8px}")
    out = run / "report.html"
    out.write_text(f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
                   f"<style>{style}</style></head><body>{''.join(parts)}</body></html>")
    return out


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
