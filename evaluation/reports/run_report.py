"""Run report: `report.html` with matplotlib PNG plots embedded (base64), for one run or several overlaid.

Reads `<run>/metrics.jsonl` (one record per step; step 0 holds the pre-RL evaluation; the steps the infrastructure
failed over `rollout.max_infra_frac` carry `rollout/infra_over_bound` and are listed in their own section), an optional
`<run>/summary.json`, the per-episode evaluation records `<run>/eval/step_<N>.jsonl` (each later evaluation is
compared with the first on the same tasks, `paired_difference`) and the scatter samples under `<run>/diagnostics/`.
The diagnostic figures live in `evaluation/reports/run_figures.py`; a figure the run(s) have no data for is left out with
one line saying why. Several runs (e.g. presets from one start) share each figure's axes with a legend; the report
goes to the first run's directory unless `out` says otherwise. Works on any run directory, so `alprl report <run>...`
regenerates it.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from evaluation.reports.run_figures import FIGURES, Figure, RunData, png, run_color, series
from evaluation.scores import paired_difference  # noqa: E402


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def plot_lines(runs: list[RunData], keys: list[str], title: str, ylabel: str) -> str | None:
    """One PNG (base64) with a line per (run, metric key); None if no key has data."""
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    drawn = False
    for i, run in enumerate(runs):
        for key, style in zip(keys, ("-", "--", ":", "-."), strict=False):
            xs, ys = series(run.records, key)
            if xs:
                color = run_color(i, len(runs)) if len(runs) > 1 else None
                label = key if len(runs) == 1 else run.label if len(keys) == 1 else f"{run.label}: {key}"
                ax.plot(xs, ys, style if len(runs) > 1 else "-", color=color, marker="o" if len(xs) < 30 else None,
                        label=label)
                drawn = True
    if not drawn:
        plt.close(fig)
        return None
    ax.set_title(title)
    ax.set_xlabel("RL step")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if len(runs) > 3:  # many overlaid runs: the legend beside the axes, where it covers no curve
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    else:
        ax.legend(fontsize=8)
    return png(fig)


PLOTS = [
    (["rollout/reward"], "Training reward (rollout batches)", "mean reward"),
    (["eval/success"], "Held-out success (test split, averaged over samples)", "success rate"),
    (["rollout_corr/kl", "rollout_corr/k3_kl"], "Rollout vs trainer mismatch", "KL estimate (nats/token)"),
    (["actor/ppo_kl", "actor/clip_high", "actor/clip_low"], "Policy update", "value"),
    (["rollout/response_len", "rollout/sampled_tokens"], "Response length", "tokens"),
    (["rollout/tool_calls", "rollout/turns"], "Tool use", "per episode"),
    # GiGPO runs only (trainer/objective/gigpo.py): how many step groups the batch had, and the two advantage levels
    (["gigpo/anchor_states", "gigpo/anchor_group_size_mean"], "GiGPO anchor states (step groups of ≥ 2)",
     "states / steps per state"),
    (["gigpo/anchor_step_frac", "gigpo/step_adv_abs_mean"], "GiGPO: share of steps in an anchor group, and |A^S|",
     "value"),
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


def _changes_table(run: Path, label: str = "") -> str:
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
    heading = "Held-out change" + (f": {html.escape(label)}" if label else "")
    return (f"<h2>{heading}</h2><p>Each evaluation against the first one on the same tasks (mean per-task "
            "change, bootstrap interval over tasks).</p>" f"<table>{head}{rows}</table>")


def load_runs(run_dirs: list[str | Path]) -> list[RunData]:
    """Each run's records, labelled by its directory name (the full path where two names are the same)."""
    paths = [Path(d) for d in run_dirs]
    names = [p.name for p in paths]
    runs = []
    for path, name in zip(paths, names, strict=True):
        records = read_jsonl(path / "metrics.jsonl")
        if not records:
            raise FileNotFoundError(f"no metrics in {path / 'metrics.jsonl'}; is {path} a run directory?")
        runs.append(RunData(name if names.count(name) == 1 else str(path), path, records))
    return runs


def _image(title: str, image: str) -> str:
    return (f"<h2>{html.escape(title)}</h2><img alt='{html.escape(title)}' "
            f"src='data:image/png;base64,{image}'/>")


def _figure_html(fig: Figure) -> str:
    if fig.image is None:
        return f"<p class='missing'>{html.escape(fig.title)} left out: {html.escape(fig.missing)}.</p>"
    note = f"<p class='note'>{html.escape(fig.missing)}</p>" if fig.missing else ""
    return _image(fig.title, fig.image) + note


INFRA_FRAC, OVER_BOUND = "rollout/infra_frac", "rollout/infra_over_bound"
"""The share of a step's episodes the infrastructure failed, and the mark of a step over `rollout.max_infra_frac`
(trainer/runtime/outage.py)."""


def _infra_kinds(record: dict[str, Any]) -> str:
    prefix = "rollout/infra_failures/"
    return ", ".join(f"{k.removeprefix(prefix)} {v:g}" for k, v in record.items() if k.startswith(prefix) and v)


def _infra_html(run: RunData, several: bool) -> str:
    """The steps whose episodes the infrastructure failed: their share per step, the steps over the bound marked
    in red and listed with their reasons; empty for a run the infrastructure never failed."""
    steps, shares = series(run.records, INFRA_FRAC)
    if not any(shares):
        return ""
    marked = [r for r in run.records if r.get(OVER_BOUND)]
    fig, ax = plt.subplots(figsize=(6.4, 3.0))
    ax.bar(steps, shares, color="#999999", label="share of the step's episodes")
    if marked:
        ax.bar([r["step"] for r in marked], [r[INFRA_FRAC] for r in marked], color="#c0392b",
               label="over rollout.max_infra_frac")
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("RL step")
    ax.set_ylabel("share failed")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    title = "Infrastructure failures" + (f": {run.label}" if several else "")
    rows = "".join(f"<tr><td>{r['step']}</td><td>{r[INFRA_FRAC]:.0%}</td><td>{html.escape(_infra_kinds(r))}</td>"
                   "</tr>" for r in marked)
    table = (f"<p>Steps over rollout.max_infra_frac: {', '.join(str(r['step']) for r in marked)} (each warned of "
             "during the run; rollout.infra_patience of them in a row stop it).</p><table><tr><th>step</th>"
             f"<th>share failed</th><th>episodes by reason</th></tr>{rows}</table>") if marked else \
        "<p>No step was over rollout.max_infra_frac.</p>"
    return (_image(title, png(fig)) + "<p>Episodes the infrastructure failed (a sandbox, engine or harness error, "
            "the rollout's timeout, a context the policy did not fill) train on none of their tokens.</p>" + table)


def _summary_html(run: RunData, several: bool) -> str:
    summary_path = run.path / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    if not summary:
        return ""
    rows = "".join(f"<tr><td>{html.escape(str(k))}</td><td>{html.escape(_fmt(v))}</td></tr>"
                   for k, v in summary.items())
    return f"<h2>Summary{': ' + html.escape(run.label) if several else ''}</h2><table>{rows}</table>"


def write_report(run_dirs: str | Path | list[str | Path], title: str = "alprl run report",
                 out: str | Path | None = None) -> Path:
    """Render `report.html` from one run's metrics, or several runs overlaid; returns its path (`out`, else
    `<first run>/report.html`)."""
    runs = load_runs([run_dirs] if isinstance(run_dirs, (str, Path)) else list(run_dirs))
    several = len(runs) > 1
    dirs = ", ".join(f"<code>{html.escape(str(r.path))}</code>" for r in runs)
    parts = [f"<h1>{html.escape(title)}</h1>", f"<p>run director{'ies' if several else 'y'}: {dirs}</p>"]
    parts += [_summary_html(run, several) for run in runs]
    parts += [_changes_table(run.path, run.label if several else "") for run in runs]
    parts += [_infra_html(run, several) for run in runs]
    parts += [_figure_html(make(runs)) for make in FIGURES]
    for keys, plot_title, ylabel in PLOTS:
        image = plot_lines(runs, keys, plot_title, ylabel)
        if image:
            parts.append(_image(plot_title, image))
    style = ("body{font-family:sans-serif;max-width:1300px;margin:2em auto}table{border-collapse:collapse}"
             "td{border:1px solid #ccc;padding:4px 8px}img{max-width:100%}.missing{color:#666}")
    path = Path(out) if out is not None else runs[0].path / "report.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
                    f"<style>{style}</style></head><body>{''.join(parts)}</body></html>")
    return path


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
