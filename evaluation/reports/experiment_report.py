"""The comparison report of `alprl experiment`: `<out>/report.json`, `report.md` and `report.html`.

Reads `<out>/experiment.json` (the plan: arms, cells, comparisons, scale) and each finished cell's `cell.json`, final
held-out records, `metrics.jsonl` and robustness records (`evaluation/reports/experiment_stats.py` reduces them). Cells not
finished yet are listed as missing, so a report can be written at any point (`write_experiment_report(out)`). The
HTML adds a success-with-intervals chart and the run report's figures (evaluation/reports/run_figures.py and the
training curves of evaluation/reports/run_report.py) with one line per arm, drawn from the cells of the first seed. A last
table names each cell's source commit (cell.json's, from its run_meta.json), start time, minutes and held-out success.
Where the plan asks for it (the long suite), spike and collapse counts per arm and per run and figures over the whole
horizon with every run drawn come before those figures (evaluation/reports/long_horizon_report.py).
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

from evaluation.reports.experiment_figures import (
    ROBUSTNESS_FIGURE,
    SIGMA_FIGURE,
    robustness_chart,
    sigma_response_chart,
    success_chart,
)
from evaluation.reports.experiment_stats import (
    PERTURBATION_KEYS,
    arm_summary,
    compare,
    judged,
    mipu_rollbacks,
    read_jsonl,
    robustness_summary,
    sentence,
    tag_problems,
    training_summary,
)
from evaluation.reports.long_horizon_figures import HORIZON_FIGURES
from evaluation.reports.long_horizon_report import TITLE as HORIZON_TITLE
from evaluation.reports.long_horizon_report import horizon_runs, horizon_tables, long_horizon_data
from evaluation.reports.paper_effects import paper_effect
from evaluation.reports.run_figures import FIGURES, RunData
from evaluation.reports.run_report import PLOTS, plot_lines

CELL_FILE = "cell.json"
ENDPOINT_LAST = "the last held-out evaluation"
ENDPOINT_SECOND_HALF = "the mean held-out success over the evaluations in the second half of training (steps ≥ half)"


def finished_cells(out: Path, plan: dict[str, Any]) -> list[dict[str, Any]]:
    """cell.json of each planned cell that has one, in plan order."""
    found = []
    for cell in plan["cells"]:
        path = out / cell["name"] / CELL_FILE
        if path.is_file():
            found.append(json.loads(path.read_text()) | {"dir": str(out / cell["name"])})
    return found


def endpoint_files(run: Path, cell: dict[str, Any], steps: int | None) -> list[Path]:
    """The held-out evaluations a cell's endpoint pools: with periodic evaluation in a run of `steps` steps, every
    one at a step ≥ half of them (the second half of training); otherwise (steps None) its final one."""
    if steps is None:
        return [run / cell["final_eval"]] if cell.get("final_eval") else []
    files = {int(f.stem.split("_")[1]): f for f in (run / "eval").glob("step_*.jsonl")}
    return [files[k] for k in sorted(files) if k > 0 and 2 * k >= steps]


def borrowed_cells(out: Path, plan: dict[str, Any]) -> list[dict[str, Any]]:
    """The finished cells of the experiments the plan's `compare_with` names (directories relative to `out`, run
    on the same seeds, tasks and start), each arm and cell named with its directory's: "grpo/lag2 (alp_math_tiny)".
    A follow-up run compares its arms with an earlier run's this way instead of training them again."""
    found = []
    for other in plan.get("compare_with", []):
        source = (out / other).resolve()
        for cell in finished_cells(source, json.loads((source / "experiment.json").read_text())):
            found.append(cell | {"arm": f"{cell['arm']} ({source.name})", "cell": f"{cell['cell']} ({source.name})"})
    return found


def arm_records(cells: list[dict[str, Any]], periodic_steps: int | None = None) -> dict[str, dict[str, list]]:
    """Per arm: the tagged endpoint records (`eval`), the tagged last-evaluation records (`last`), the
    robustness records and each cell's metrics records."""
    arms: dict[str, dict[str, list]] = {}
    for cell in cells:
        run = Path(cell["dir"])
        slot = arms.setdefault(cell["arm"], {"eval": [], "last": [], "metrics": [], "robustness": []})
        for path in endpoint_files(run, cell, periodic_steps and int(cell.get("steps", periodic_steps))):
            slot["eval"] += tag_problems(read_jsonl(path), cell["seed"])
        if cell.get("final_eval"):
            slot["last"] += tag_problems(read_jsonl(run / cell["final_eval"]), cell["seed"])
        slot["metrics"].append(read_jsonl(run / "metrics.jsonl"))
        slot["robustness"] += tag_problems(read_jsonl(run / "robustness" / "records.jsonl"), cell["seed"])
    return arms


def cell_rows_data(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per finished cell: the code it ran (cell.json's `source`, copied from its run_meta.json; None for cells of
    older versions or outside git), when it started, its minutes and its final held-out success."""
    rows = []
    for cell in cells:
        source = cell.get("source") or {}
        rows.append({"cell": cell["cell"], "commit": source.get("commit"), "dirty": source.get("dirty"),
                     "started": cell.get("started"), "minutes": round(float(cell.get("wall_s", 0)) / 60, 1),
                     "success": cell.get("final_metrics", {}).get("eval/success")})
    return rows


def cell_rows(data: dict[str, Any]) -> list[list[str]]:
    return [[c["cell"], (c["commit"][:10] + (" (edited)" if c["dirty"] else "")) if c["commit"] else "–",
             c["started"] or "–", f"{c['minutes']:.1f}", _f(c["success"])] for c in data["cells"]]


CELL_HEADER = ["cell", "source commit", "started", "minutes", "held-out success"]


def scale_words(plan: dict[str, Any], arms: dict[str, Any]) -> str:
    """What the finished arms measured (the sentences quote it), not what the plan asks for: an experiment stopped
    after one of three seeds compares one seed."""
    tasks = max((a["problems"] // max(1, len(a["seeds"])) for a in arms.values()), default=0)
    seeds = max((len(a["seeds"]) for a in arms.values()), default=len(plan["seeds"]))
    return (f"{plan['scale']} scale, {plan['steps']} RL steps, {seeds} seed{'s' if seeds > 1 else ''} × {tasks} "
            "held-out tasks")


def judged_comparisons(plan: dict[str, Any], records: dict[str, dict[str, list]], arms: dict[str, Any],
                       kind: str) -> list[dict[str, Any]]:
    """The plan's comparisons whose arms both finished, on the records of `kind` (eval: the endpoint; last: the
    last evaluation), each in its declared family, judged together (Holm over the primary ones)."""
    primary = {tuple(p) for p in plan.get("primary", plan["comparisons"])}
    found = []
    for arm, baseline in plan["comparisons"]:
        if arm in arms and baseline in arms:
            declared = (arm, baseline) in primary  # only a declared claim is held to its paper's effect
            found.append({"arm": arm, "baseline": baseline, **compare(
                records[arm][kind], records[baseline][kind], "primary" if declared else "exploratory",
                paper=paper_effect(plan["suite"], arm, baseline) if declared else None)})
    return judged(found)


def report_data(out: str | Path) -> dict[str, Any]:
    """Everything report.json holds: the plan, per-arm summaries, comparisons and their sentences."""
    out = Path(out)
    plan = json.loads((out / "experiment.json").read_text())
    if (plan.get("source") or {}).get("exploratory"):  # cells from code no one can check out: no verdict rests on
        plan = {**plan, "primary": []}  # them, every comparison reads exploratory
    cells = finished_cells(out, plan) + borrowed_cells(out, plan)
    periodic = bool(plan.get("horizon_report"))
    records = arm_records(cells, int(plan["steps"]) if periodic else None)
    arms = {}
    for arm in plan["arms"]:
        got = records.get(arm)
        if not got or not got["eval"]:
            continue
        arms[arm] = arm_summary(got["eval"]) | {"training": training_summary(got["metrics"])}
        if periodic and got["last"]:
            arms[arm]["last_eval_success"] = arm_summary(got["last"])["success"]
        if rollbacks := mipu_rollbacks(got["metrics"]):
            arms[arm]["mipu_rolled_back_per_seed"] = rollbacks
        if got["robustness"]:
            arms[arm]["robustness"] = robustness_summary(got["robustness"])
    words = scale_words(plan, arms)
    comparisons = judged_comparisons(plan, records, arms, "eval")
    for c in comparisons:
        c["summary"] = sentence(c["arm"], c["baseline"], c, words)
    # the last evaluation alone is a secondary endpoint where the primary one pools the second half
    last = [{**c, "family": "secondary"} for c in judged_comparisons(plan, records, arms, "last")] if periodic else []
    done = {c["cell"] for c in cells}
    reach = (plan["reach"], arms[plan["reach"]]["success"]) if plan.get("reach") in arms else None
    horizon = {"long_horizon": long_horizon_data(horizon_runs(cells), reach)} if plan.get("horizon_report") else {}
    return {"suite": plan["suite"], "doc": plan["doc"], "claim": plan.get("claim", ""), "scale": plan["scale"], "steps": plan["steps"],
            "seeds": plan["seeds"], "config": plan["config"], "start": plan["start"], "overrides": plan["overrides"],
            "settings": plan["settings"], "scale_words": words, "arms": arms, "comparisons": comparisons,
            "endpoint": ENDPOINT_SECOND_HALF if periodic else ENDPOINT_LAST, "comparisons_last_eval": last,
            "cells_finished": len(done), "cells_planned": len(plan["cells"]),
            "cells_missing": [c["name"] for c in plan["cells"] if c["name"] not in done],
            "wall_s": sum(float(c.get("wall_s", 0)) for c in cells), "cells": cell_rows_data(cells)} | horizon \
        | ({"provenance": {k: plan[k] for k in ("source", "declared") if k in plan}} if "declared" in plan else {})


def _detectable(value: float | None) -> str:
    """A detectable difference of success rates past 1 is none at all."""
    return "–" if value is None else "none (> 1)" if value > 1 else f"{value:.3f}"


def _f(value: Any, fmt: str = ".3f") -> str:
    return "–" if value is None else format(value, fmt)


def arm_rows(data: dict[str, Any]) -> list[list[str]]:
    rows = []
    for name, a in data["arms"].items():
        t = a["training"]
        top_k = max(a["pass_at_k"], key=int)
        rows.append([name, _f(a["success"]), f"[{_f(a['ci_lo'])}, {_f(a['ci_hi'])}]",
                     f"[{_f(a.get('previous_ci_lo'))}, {_f(a.get('previous_ci_hi'))}]",
                     f"[{_f(a.get('eval_ci_lo'))}, {_f(a.get('eval_ci_hi'))}]",
                     ", ".join(f"{v:.3f}" for v in a["per_seed"].values()), f"{_f(a['pass_at_k'][top_k])} (k={top_k})",
                     str(a["problems"]), _f(t["reward_mean"]), _f(t["reward_last"]), _f(t["mismatch_kl_mean"], ".2e"),
                     _f(t["ratio_p98_max"]), _f(t["r_mis_p98_mean"]), _f(t["ppo_kl_mean"], ".2e"),
                     _f(t.get("update_kl_mean"), ".2e"), _f(t["entropy_last"]), _f(t["step_s_mean"], ".1f")])
    return rows


ARM_HEADER = ["arm (method/setting)", "held-out success", "95% interval over runs", "previous interval (two-stage)",
              "evaluation only", "per seed", "pass@k", "seed-task pairs",
              "train reward (mean)", "(last)", "mismatch KL (mean)", "loss ratio P98 (max)", "r_mis P98 (mean)",
              "loss ppo_kl (mean)", "update KL, clean k3 (mean)", "entropy (last)", "s/step"]
"""`loss ppo_kl` is the policy loss's own log-ratio mean, on the update forward (perturbed under ALP, so it carries
the noise); `update KL, clean` is KL(π_θold ‖ π_θ) after the step on the unperturbed model, from the diagnostics
steps (`diag/policy_kl_k3`)."""
COMPARISON_HEADER = ["arm", "baseline", "family", "difference", "95% interval over runs", "Holm-corrected",
                     "previous interval (two-stage)", "sign-flip p", "evaluation only", "per seed", "detectable",
                     "paper's effect", "seeds × tasks", "verdict"]
"""`95% interval over runs`: the few-cluster t over seeds, floored at the evaluation-only SE; `Holm-corrected`: the
same at the level Holm's step-down tested this primary comparison at; `previous interval`: the two-stage bootstrap
interval the reports gave before, for one release; `sign-flip p`: the randomization p-value over seeds;
`evaluation only`: seeds held fixed; `detectable`: the difference this design finds with 80% power at the
comparison's strictest level; `paper's effect`: what the paper reports for a primary comparison
(evaluation/reports/paper_effects.py)."""


def comparison_rows(comparisons: list[dict[str, Any]]) -> list[list[str]]:
    def interval(lo: Any, hi: Any) -> str:
        return "–" if lo is None else f"[{lo:+.3f}, {hi:+.3f}]"

    return [[c["arm"], c["baseline"], c["family"], f"{c['diff']:+.3f}", interval(c["ci_lo"], c["ci_hi"]),
             interval(c.get("corrected_ci_lo"), c.get("corrected_ci_hi")),
             interval(c.get("previous_ci_lo"), c.get("previous_ci_hi")), _f(c.get("p_sign_flip")),
             interval(c.get("eval_ci_lo"), c.get("eval_ci_hi")),
             ", ".join(f"{v:+.3f}" for v in c.get("per_seed", {}).values()), _detectable(c.get("detectable")),
             _f(c.get("paper_effect"), "+.3f"), f"{c['seeds']} × {c['problems'] // max(1, c['seeds'])}",
             c["verdict"]] for c in comparisons]


def robustness_rows(data: dict[str, Any]) -> list[list[str]]:
    return [[name, r["condition"], _f(r["success"]), f"[{_f(r['ci_lo'])}, {_f(r['ci_hi'])}]", _f(r["retention"])]
            for name, a in data["arms"].items() for r in a.get("robustness", [])]


FAILURE_HEADER = ["arm", "failed samples", "copy", "no tool result", "no answer", "wrong program", "no reply kept"]
FAILURE_NOTE = ("`copy`: the boxed answer is not the last tool result; `no tool result`: no program ran; `no answer`: "
                "no boxed answer; `wrong program`: the boxed answer is the tool's result and it is wrong "
                "(evaluation/reports/experiment_stats.py `failure_kinds`). Shares of the failed samples.")


def failure_rows(data: dict[str, Any]) -> list[list[str]]:
    rows = []
    for name, a in data["arms"].items():
        kinds = a.get("failures")
        if kinds:
            total = sum(kinds.values())
            rows.append([name, str(total), *(f"{kinds[k] / total:.0%}" for k in
                                              ("copy", "no_tool_result", "no_answer", "wrong_program",
                                               "no_reply_recorded"))])
    return rows


def task_type_rows(data: dict[str, Any]) -> list[list[str]]:
    """Header then one row per arm, where the held-out set has several task types."""
    typed = {name: a["by_task_type"] for name, a in data["arms"].items() if a.get("by_task_type")}
    if not typed:
        return []
    types = sorted({t for v in typed.values() for t in v})
    return [["arm", *types], *([name, *(_f(v.get(t)) for t in types)] for name, v in typed.items())]


PERTURBATION_HEADER = ["arm", "realized noise rms(h̃−h)/rms(h)", "|Δp| P75", "|Δp| P99", "sampler |π_old−μ| P75",
                       "(P99)", "σ drift (last/first)", "loss ratio P2 (min)", "P98 (max)", "held-out success"]


def perturbation_rows(data: dict[str, Any]) -> list[list[str]]:
    """ALP's perturbation beside the sampler's own mismatch, per arm (means over steps and cells); none when no arm
    was perturbed."""
    arms = data["arms"]
    if not any(a["training"].get(k) is not None for a in arms.values() for k in PERTURBATION_KEYS):
        return []
    rows = []
    for name, a in arms.items():
        t = a["training"]
        rows.append([name, _f(t.get("rel_noise_mean"), ".2e"), _f(t.get("dp_p75_mean"), ".2e"),
                     _f(t.get("dp_p99_mean"), ".2e"), _f(t.get("mismatch_dp_p75_mean"), ".2e"),
                     _f(t.get("mismatch_dp_p99_mean"), ".2e"), _f(t.get("sigma_drift"), ".4f"),
                     _f(t.get("ratio_p2_min")), _f(t.get("ratio_p98_max")), _f(a["success"])])
    return rows


MIPU_HEADER = ["arm", "steps screened (per cell)", "kept", "rolled back", "rolled back, per seed", "held-out success"]


def mipu_rows(data: dict[str, Any]) -> list[list[str]]:
    """MIPU's accept / rollback counts per arm (means over its cells; per seed beside them); none without MIPU."""
    rows = []
    for name, a in data["arms"].items():
        t = a["training"]
        if not t.get("mipu_screened"):
            continue
        per_seed = ", ".join(f"{v:g}" for v in a.get("mipu_rolled_back_per_seed", []))
        rows.append([name, _f(t["mipu_screened"], ".1f"), _f(t["mipu_kept"], ".1f"),
                     _f(t["mipu_screened"] - t["mipu_kept"], ".1f"), per_seed, _f(a["success"])])
    return rows


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def _intro(data: dict[str, Any]) -> list[str]:
    missing = data["cells_missing"]
    claim = [f"The papers' claim under test: {data['claim']}."] if data["claim"] else []
    return [f"Suite `{data['suite']}`: {data['doc']}.", *claim,
            f"Recipe `{data['config']}`, {data['scale_words']}; every cell starts from `{data['start']}`.",
            f"Cells finished: {data['cells_finished']} of {data['cells_planned']}"
            + (f" (missing: {', '.join(missing)})" if missing else "") + ".",
            *_provenance(data),
            f"Endpoint: {data.get('endpoint', ENDPOINT_LAST)}.",
            "A comparison's interval over runs: the few-cluster t over seeds (CR1 with S − 1 degrees of freedom, "
            "Cameron & Miller 2015, §VI), floored at the evaluation-only SE; beside it the previous interval "
            "(the two-stage bootstrap, seeds then tasks, which counts the tasks' noise twice; shown for one "
            "release), the sign-flip p-value over seeds and the evaluation-only interval (seeds held fixed); "
            "differences are paired on the same seeds and tasks; an arm's success has the same three intervals. "
            "Verdicts: Holm's correction over the suite's primary comparisons, the rest exploratory; a "
            "comparison that finds nothing reads \"no power\" where its detectable difference exceeds its "
            "paper's effect or 1 (evaluation/reports/experiment_inference.py)."]


def _provenance(data: dict[str, Any]) -> list[str]:
    """When the comparisons were declared and what code the cells ran from (app/experiments/provenance.py); nothing
    for experiments begun before those records."""
    record = data.get("provenance")
    if not record:
        return []
    declared, source = record["declared"], record.get("source") or {}
    after = declared.get("after_cells")
    when = (f"Comparisons declared {declared['at']} (plan hash `{declared['hash']}`, commit "
            f"`{(declared.get('commit') or 'none')[:7]}`)" + (f", after {after} cells had finished" if after else
                                                            ", before the first cell ran"))
    code = f"cells from `{(source.get('commit') or 'no git checkout')[:7]}`"
    if source.get("exploratory"):
        code += f", exploratory ({source['exploratory']}): every comparison reads exploratory"
    return [f"{when}; {code}."]


def markdown(data: dict[str, Any]) -> str:
    bullets = [f"- {c['summary']}" for c in data["comparisons"]] or ["- No comparison has both arms finished yet."]
    parts = [f"# alprl experiment: {data['suite']}", "\n\n".join(_intro(data)), "## Summary", "\n".join(bullets)]
    parts += ["## Held-out success per arm", _md_table(ARM_HEADER, arm_rows(data))]
    if data["comparisons"]:
        parts += ["## Paired differences", _md_table(COMPARISON_HEADER, comparison_rows(data["comparisons"]))]
    if data.get("comparisons_last_eval"):
        parts += ["## Paired differences at the last evaluation (secondary endpoint)",
                  _md_table(COMPARISON_HEADER, comparison_rows(data["comparisons_last_eval"]))]
    if failures := failure_rows(data):
        parts += ["## Why held-out samples failed", FAILURE_NOTE, _md_table(FAILURE_HEADER, failures)]
    if types := task_type_rows(data):
        parts += ["## Held-out success per task type", _md_table(types[0], types[1:])]
    if robustness_rows(data):
        parts += ["## Robustness of the final checkpoints",
                  _md_table(["arm", "condition", "success", "95% interval", "retention"], robustness_rows(data))]
    if perturbation_rows(data):
        parts += ["## The perturbation against the sampler's mismatch", _md_table(PERTURBATION_HEADER,
                                                                                  perturbation_rows(data))]
    if mipu := mipu_rows(data):
        parts += ["## MIPU's screening: candidates kept and rolled back", _md_table(MIPU_HEADER, mipu)]
    if data.get("long_horizon"):
        parts += [f"## {HORIZON_TITLE}", "\n".join(f"- {d}" for d in data["long_horizon"]["definitions"])]
        parts += [x for caption, header, rows in horizon_tables(data["long_horizon"])
                  for x in (caption, _md_table(header, rows))]
    parts += ["## Settings", _md_table(["setting", "overrides"],
                                       [[k, " ".join(v) or "(the recipe's)"] for k, v in data["settings"].items()])]
    if data["cells"]:
        parts += ["## Cells", _md_table(CELL_HEADER, cell_rows(data))]
    return "\n\n".join(parts) + "\n"


def first_seed_runs(out: Path, data: dict[str, Any]) -> list[RunData]:
    """One run per arm (its cell of the first seed that finished), labelled by the arm, for the overlaid figures."""
    plan = json.loads((out / "experiment.json").read_text())
    runs: dict[str, RunData] = {}
    for cell in finished_cells(out, plan):
        run = Path(cell["dir"])
        records = read_jsonl(run / "metrics.jsonl")
        if cell["arm"] not in runs and records:
            runs[cell["arm"]] = RunData(cell["arm"], run, records)
    return list(runs.values())


def _html_table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in r) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _img(title: str, image: str) -> str:
    return f"<h2>{html.escape(title)}</h2><img alt='{html.escape(title)}' src='data:image/png;base64,{image}'/>"


def horizon_html(out: Path, data: dict[str, Any]) -> list[str]:
    """The long suite's counts (definitions, per arm, per run) and its figures over the whole horizon, every run
    drawn (evaluation/reports/long_horizon_figures.py)."""
    if not data.get("long_horizon"):
        return []
    parts = [f"<h2>{html.escape(HORIZON_TITLE)}</h2><ul>"
             + "".join(f"<li>{html.escape(d)}</li>" for d in data["long_horizon"]["definitions"]) + "</ul>"]
    for caption, header, rows in horizon_tables(data["long_horizon"]):
        parts += [f"<p>{html.escape(caption)}</p>", _html_table(header, rows)]
    runs = horizon_runs(finished_cells(out, json.loads((out / "experiment.json").read_text())))
    for make in HORIZON_FIGURES:
        fig = make(runs)
        parts.append(_img(fig.title, fig.image) if fig.image else
                     f"<p class='missing'>{html.escape(fig.title)} left out: {html.escape(fig.missing)}.</p>")
    return parts


def figures_html(out: Path, data: dict[str, Any]) -> list[str]:
    parts = []
    chart = success_chart(data)
    if chart:
        parts.append(_img("Held-out success per arm", chart))
    sweep = robustness_chart(data)
    if sweep:
        parts.append(_img(ROBUSTNESS_FIGURE, sweep))
    response = sigma_response_chart(data)
    if response:
        parts.append(_img(SIGMA_FIGURE, response))
    runs = first_seed_runs(out, data)
    if not runs:
        return parts
    parts.append("<p>The figures below draw one run per arm (its first finished seed).</p>")
    for make in FIGURES:
        fig = make(runs)
        parts.append(_img(fig.title, fig.image) if fig.image else
                     f"<p class='missing'>{html.escape(fig.title)} left out: {html.escape(fig.missing)}.</p>")
    for keys, title, ylabel in PLOTS:
        image = plot_lines(runs, keys, title, ylabel)
        if image:
            parts.append(_img(title, image))
    return parts


def render_html(out: Path, data: dict[str, Any]) -> str:
    parts = [f"<h1>alprl experiment: {html.escape(data['suite'])}</h1>"]
    parts += [f"<p>{html.escape(p)}</p>" for p in _intro(data)]
    parts.append("<h2>Summary</h2><ul>" + ("".join(f"<li>{html.escape(c['summary'])}</li>"
                                                    for c in data["comparisons"])
                                           or "<li>No comparison has both arms finished yet.</li>") + "</ul>")
    parts += ["<h2>Held-out success per arm</h2>", _html_table(ARM_HEADER, arm_rows(data))]
    if data["comparisons"]:
        parts += ["<h2>Paired differences</h2>", _html_table(COMPARISON_HEADER, comparison_rows(data["comparisons"]))]
    if data.get("comparisons_last_eval"):
        parts += ["<h2>Paired differences at the last evaluation (secondary endpoint)</h2>",
                  _html_table(COMPARISON_HEADER, comparison_rows(data["comparisons_last_eval"]))]
    if failures := failure_rows(data):
        parts += ["<h2>Why held-out samples failed</h2>", f"<p>{html.escape(FAILURE_NOTE)}</p>",
                  _html_table(FAILURE_HEADER, failures)]
    if types := task_type_rows(data):
        parts += ["<h2>Held-out success per task type</h2>", _html_table(types[0], types[1:])]
    if robustness_rows(data):
        parts += ["<h2>Robustness of the final checkpoints</h2>",
                  _html_table(["arm", "condition", "success", "95% interval", "retention"], robustness_rows(data))]
    if perturbation_rows(data):
        parts += ["<h2>The perturbation against the sampler's mismatch</h2>",
                  _html_table(PERTURBATION_HEADER, perturbation_rows(data))]
    parts += horizon_html(out, data)
    parts += figures_html(out, data)
    if data["cells"]:
        parts += ["<h2>Cells</h2>", _html_table(CELL_HEADER, cell_rows(data))]
    style = ("body{font-family:sans-serif;max-width:1300px;margin:2em auto}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:4px 8px}img{max-width:100%}.missing{color:#666}")
    title = html.escape(f"alprl experiment: {data['suite']}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title><style>{style}</style>"
            f"</head><body>{''.join(parts)}</body></html>")


def write_experiment_report(out: str | Path, *, html_too: bool = True) -> Path:
    """Write report.json, report.md and (html_too) report.html into `out`; returns report.html's path (written
    only with html_too).

    Without html_too it draws no figure: cheap enough to run after every cell, so a killed experiment keeps a
    report of the cells it finished."""
    out = Path(out)
    data = report_data(out)
    (out / "report.json").write_text(json.dumps(data, indent=2))
    (out / "report.md").write_text(markdown(data))
    path = out / "report.html"
    if html_too:
        path.write_text(render_html(out, data))
    return path
