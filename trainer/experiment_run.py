"""Running an experiment plan (trainer/experiment.py): the warm start, the cells in order, then the report.

Resuming: a cell is finished when its directory holds `cell.json`, written last (after the final evaluation and,
in the robustness suite, the sweep), so a rerun of the same command skips finished cells and restarts the others
from scratch: a half-done cell's directory is removed first, as its partial metrics and evaluation records would
mix two runs in one report (a cell is minutes; `alprl train --resume` semantics would save checkpoints often for
little). A finished cell run with other overrides than the plan's is refused, not silently reused.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

from trainer.config import ConfigError, TrainConfig, build_config
from trainer.experiment import SCALES, SUITES, Cell, Plan, check_user_overrides, parse_seeds, start_layers
from trainer.progress import progress_bar
from trainer.run_meta import read_run_meta

CELL_FILE = "cell.json"
PLAN_FILE = "experiment.json"


def add_experiment_parser(sub) -> None:
    suites = "\n".join(f"  {s.name:<12} {s.doc}" for s in SUITES.values())
    scales = "\n".join(f"  {s.name:<8} {s.summary}" for s in SCALES.values())
    p = sub.add_parser(
        "experiment", help="the papers' comparisons: methods × settings × seeds from one SFT start → report",
        description="Train every cell (method × setting × seed) of SUITE from one SFT start on the same tasks, "
        "evaluate each on the same held-out tasks, and write <out>/report.html, report.json and report.md "
        "(mean held-out success with 95% bootstrap intervals, paired differences against the baseline, overlaid "
        "figures, a summary in words). A rerun skips the cells already finished.",
        epilog=f"suites:\n{suites}\n\nscales:\n{scales}\n\n"
        "overrides: key=value for every cell, e.g. rollout.dtype=float32 (not the keys the suite varies)",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("suite", metavar="SUITE", help="one of: " + ", ".join(SUITES))
    p.add_argument("--config", default=None, help="the recipe (default: the suite's, configs/demo.yaml; "
                   "robustness: configs/household_tiny.yaml)")
    p.add_argument("--seeds", default=None, help="comma-separated seeds (default: the scale's, smoke 0, else 0,1,2)")
    p.add_argument("--steps", type=int, default=None, help="RL steps per cell (default: the scale's)")
    p.add_argument("--scale", default="default", help="smoke | default | full (default: default)")
    p.add_argument("--out", default=None, help="output directory (default runs/experiments/<suite>)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (for logs / CI)")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides of every cell")


def build_plan(args: argparse.Namespace) -> Plan:
    """The plan of `alprl experiment` from its arguments; every cell's config is validated here (ConfigError)."""
    if args.suite not in SUITES:
        raise ConfigError(f"unknown suite {args.suite!r}; valid: {', '.join(SUITES)}")
    if args.scale not in SCALES:
        raise ConfigError(f"unknown --scale {args.scale!r}; valid: {', '.join(SCALES)}")
    if args.steps is not None and args.steps < 1:
        raise ConfigError(f"--steps {args.steps}: expected a positive number of RL steps")
    suite, scale = SUITES[args.suite], SCALES[args.scale]
    config = args.config or suite.config
    seeds = parse_seeds(args.seeds) if args.seeds is not None else list(scale.seeds)
    out = Path(os.path.normpath(args.out or f"runs/experiments/{suite.name}"))  # ./x and x: one cell.json key
    common = [*scale.overrides, *([f"sft.output_dir={out / 'sft'}"] if scale.own_sft else []), *args.overrides]
    base = build_config(config, common)
    if base.eval_tasks < 1:
        raise ConfigError(f"eval_tasks={base.eval_tasks}: an experiment compares held-out success; set eval_tasks >= 1")
    steps = args.steps or scale.steps or base.steps
    settings = suite.settings(base, start_layers(base))
    check_user_overrides(suite, settings, args.overrides)
    # seed by seed, so an experiment stopped early has whole comparisons of its first seeds
    cells = [Cell(m, s, seed) for seed in seeds for s in settings for m in suite.methods]
    plan = Plan(suite, scale, config, seeds, steps, out, start=base.model.path or base.sft.output_dir,
                common=common, cells=cells)
    for cell in plan.cells:  # a bad combination (e.g. MIPU under a policy lag) fails before any training
        build_config(config, plan.cell_overrides(cell))
    return plan


def warm_start(plan: Plan, show_progress: bool) -> None:
    """Build the SFT start once when it is missing (cached and checked against the recipe by `run_sft`)."""
    cfg = build_config(plan.config, plan.common)
    if cfg.model.path:
        if not Path(cfg.model.path).expanduser().exists():
            raise FileNotFoundError(f"model.path={cfg.model.path} does not exist")
        return
    from trainer.sft import run_sft

    run_sft(cfg, show_progress=show_progress)


def finished(plan: Plan, cell: Cell) -> bool:
    """Whether `cell` has run to its end with the plan's overrides (ConfigError when it ran with others)."""
    path = plan.out / cell.name / CELL_FILE
    if not path.is_file():
        return False
    done = json.loads(path.read_text())
    if done.get("overrides") != plan.cell_overrides(cell):
        raise ConfigError(f"{path.parent} was run with other overrides than this experiment's ({done.get('overrides')}"
                          f"); use another --out, or remove that directory to rerun it")
    return True


def final_eval_file(run_dir: Path) -> Path | None:
    files = sorted(run_dir.glob("eval/step_*.jsonl"), key=lambda f: int(f.stem.removeprefix("step_")))
    return files[-1] if files else None


def robustness_sweep(cfg: TrainConfig, run_dir: Path, num_tasks: int) -> str:
    """The robustness sweep (built-in families and scales) of the cell's final checkpoint, as `alprl robustness`
    plays it from the run's own config; returns the report's path."""
    from evaluation.robustness_cli import run_robustness
    from trainer.run_config import eval_settings

    checkpoint = run_dir / "checkpoints" / f"step_{cfg.steps}"
    report = run_robustness(checkpoint, eval_settings(cfg), ("noise", "prune", "quant"), None,
                            run_dir / "robustness", num_tasks)
    return str(report.relative_to(run_dir))


def run_cell(plan: Plan, cell: Cell) -> dict:
    """Train one cell from scratch, evaluate it, (sweep it), then write its `cell.json`."""
    from trainer.loop import train

    run_dir = plan.out / cell.name
    if run_dir.exists():
        shutil.rmtree(run_dir)  # a half-done cell (no cell.json): start it over
    overrides = plan.cell_overrides(cell)
    cfg = build_config(plan.config, overrides)
    start = time.monotonic()
    results = train(cfg, show_progress=False)
    final = final_eval_file(run_dir)
    info = {"cell": cell.name, "arm": cell.arm, "method": cell.method, "setting": cell.setting.name,
            "seed": cell.seed, "overrides": overrides, "steps": cfg.steps,
            "final_eval": str(final.relative_to(run_dir)) if final else None,
            "final_metrics": {k: v for k, v in results[-1].metrics.items() if k.startswith("eval/")} if results else {}}
    meta = read_run_meta(run_dir) or {}
    info |= {"source": meta.get("source"), "started": meta.get("started")}  # the code it ran, and when
    if plan.suite.robustness and plan.scale.robustness_tasks:
        info["robustness"] = robustness_sweep(cfg, run_dir, plan.scale.robustness_tasks)
    info["wall_s"] = round(time.monotonic() - start, 1)
    tmp = run_dir / (CELL_FILE + ".tmp")
    tmp.write_text(json.dumps(info, indent=2))
    os.replace(tmp, run_dir / CELL_FILE)  # atomic: a cell.json is always a whole one
    return info


def run_experiment(plan: Plan, show_progress: bool = True) -> Path:
    """Run the plan's unfinished cells (one progress bar over cells) and write the report; returns report.html."""
    from evaluation.experiment_report import write_experiment_report  # matplotlib: not for `alprl --help`

    plan.out.mkdir(parents=True, exist_ok=True)
    (plan.out / PLAN_FILE).write_text(json.dumps(plan.describe(), indent=2))
    todo = [cell for cell in plan.cells if not finished(plan, cell)]
    if todo:
        warm_start(plan, show_progress)
    with progress_bar(f"experiment {plan.suite.name}", total=len(plan.cells),
                      completed=len(plan.cells) - len(todo), enabled=show_progress) as bar:
        for cell in todo:
            info = run_cell(plan, cell)
            write_experiment_report(plan.out, html_too=False)  # json + md of the cells so far: a kill keeps them
            bar.advance(success=info["final_metrics"].get("eval/success", float("nan")))
    return write_experiment_report(plan.out)


def run_experiment_command(args: argparse.Namespace) -> int:
    """`alprl experiment`: exit 2 with one line for a bad suite, scale, seed list, override or missing file."""
    try:
        plan = build_plan(args)
        cfg = build_config(plan.config, plan.common)
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # per-cell "Loading weights" bars would drown the bar over cells
        if cfg.torch_threads:
            import torch

            torch.set_num_threads(cfg.torch_threads)
        report = run_experiment(plan, show_progress=not args.no_progress)
    except (ConfigError, FileNotFoundError) as exc:
        print(f"alprl experiment: error: {exc}", file=sys.stderr)
        return 2
    print(report)
    return 0
