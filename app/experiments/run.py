"""Running an experiment plan (app/experiments/plan.py): the warm start, the cells in order, then the report.

Resuming: a cell is finished when its directory holds `cell.json`, written last (after the final evaluation and,
in the robustness suite, the sweep), so a rerun of the same command skips finished cells. A half-done cell (Ctrl-C,
SIGTERM, a killed machine) continues from its last checkpoint as `alprl train --resume` does (cells save every
`--save-every` steps, 25 by default, and at their last step; the metrics past the checkpoint are dropped and
replayed); one with no checkpoint yet, or started with other overrides (`cell_start.json`), starts over. A
finished cell run with other overrides than the plan's is refused, not silently reused.

A failing cell (an exception in its training, evaluation or sweep) does not stop the others: the suite runs on,
the report covers the cells that finished, the failure's traceback goes to `<out>/errors/<cell>.txt`, and the
command ends with one error naming every failed cell (exit 1); a rerun retries them.

Reusing (`--reuse DIR`): a cell whose resolved config is another experiment's finished cell's (output directory and
the preset's name aside: `token_bypass` with ALP's clip and noise is the `token_alp` run) is copied from there
instead of trained again; its cell.json says where it came from.

Parallel cells (`--parallel N`): N cells at a time, each in a fresh spawned process (its own vLLM engine) with
`torch_threads` threads; the report is rewritten as each finishes. On the 2-core machine two cells of the demo
recipe at one torch thread each finish a suite sooner than one at a time (docs/experiments.md "Cost").
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import sys
import time
import traceback
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import asdict, replace
from pathlib import Path

from app.experiments.plan import (
    CELL_SAVE_EVERY,
    SCALES,
    Cell,
    Plan,
    check_user_overrides,
    parse_seeds,
    start_layers,
    suite_scale,
)
from app.experiments.provenance import check_source, declaration
from app.experiments.results import (
    CELL_FILE,
    PLAN_FILE,
    START_FILE,
    check_warm_start,
    restore_cells,
    sync_results,
)
from app.experiments.suites import SUITES
from trainer.config.errors import ConfigError
from trainer.config.train_config import TrainConfig
from trainer.runtime.checkpoint import latest_checkpoint
from trainer.runtime.progress import progress_bar
from trainer.runtime.run_meta import read_run_meta
from trainer.setup.build import build_config, preset_overrides
from trainer.setup.sandbox_check import check_run_sandbox


def add_experiment_parser(sub) -> None:
    suites = "\n".join(f"  {s.name:<12} {s.doc}\n  {'':<12} cost: {s.cost}" for s in SUITES.values())
    scales = "\n".join(f"  {s.name:<8} {s.summary}" for s in SCALES.values())
    p = sub.add_parser(
        "experiment", help="the papers' comparisons: methods × settings × seeds from one SFT start → report",
        description="Train every cell (method × setting × seed) of SUITE from one SFT start on the same tasks, "
        "evaluate each on the same held-out tasks, and write <out>/report.html, report.json and report.md "
        "(mean held-out success with 95% bootstrap intervals, paired differences against the baseline, overlaid "
        "figures, a summary in words). A rerun skips the cells already finished and resumes half-done ones. A "
        "cell that fails does not stop the others: its traceback goes to <out>/errors/<cell>.txt and the command "
        "ends naming it (exit 1). A sandbox (env.sandbox_url) that does not answer is one error line before "
        "anything starts (exit 2).",
        epilog=f"suites:\n{suites}\n\nscales:\n{scales}\n\n"
        "overrides: key=value for every cell, e.g. rollout.dtype=float32 (not the keys the suite varies)",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("suite", metavar="SUITE", help="one of: " + ", ".join(SUITES))
    p.add_argument("--config", default=None, help="the recipe (default: the suite's, configs/demo.yaml; "
                   "robustness: configs/household_tiny.yaml)")
    p.add_argument("--seeds", default=None, help="comma-separated seeds (default: the scale's, smoke 0, else 0,1,2; "
                   "long: 0,1)")
    p.add_argument("--steps", type=int, default=None, help="RL steps per cell (default: the scale's; long: 200, "
                   "smoke 4)")
    p.add_argument("--scale", default="default", help="smoke | default | full (default: default)")
    p.add_argument("--out", default=None, help="output directory (default runs/experiments/<suite>)")
    p.add_argument("--methods", default=None, help="comma-separated presets instead of the suite's methods "
                   "(e.g. sensitivity --methods seq_alp)")
    p.add_argument("--settings", default=None, help="comma-separated setting names: run only these of the suite's")
    p.add_argument("--parallel", type=int, default=1, help="cells at a time, each in its own process (default 1; "
                   "2 on a 2-core machine with torch_threads=1 finishes sooner)")
    p.add_argument("--reuse", default=None, metavar="DIR", help="copy finished cells with the same resolved config "
                   "from another experiment's directory (e.g. runs/experiments/alp) instead of training them")
    p.add_argument("--results", default=None, metavar="DIR", help="also keep each finished cell's small files (no "
                   "checkpoints) in DIR/cells.tar.xz and the report in DIR, a folder to commit; a later run with "
                   "the same --results counts the cells found there as finished, so a new machine trains only "
                   "the rest")
    p.add_argument("--save-every", type=int, default=CELL_SAVE_EVERY, help="checkpoint a cell every N steps, so a "
                   f"stopped cell resumes from there (default {CELL_SAVE_EVERY}; a cell's last step always saves)")
    p.add_argument("--exploratory", action="store_true", help="run from a checkout whose code is not on main (a "
                   "changed tracked file, a commit off main): recorded in experiment.json, and every comparison of "
                   "the report then reads exploratory (without it such a run is refused)")
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
    suite = SUITES[args.suite]
    scale = suite_scale(suite, SCALES[args.scale])  # the long suite's own steps, evaluations and seeds
    config = args.config or suite.config
    seeds = parse_seeds(args.seeds) if args.seeds is not None else list(scale.seeds)
    out = Path(os.path.normpath(args.out or f"runs/experiments/{suite.name}"))  # ./x and x: one cell.json key
    common = [*scale.overrides, *([f"sft.output_dir={out / 'sft'}"] if scale.own_sft else []), *args.overrides]
    base = build_config(config, common)
    if base.eval_tasks < 1:
        raise ConfigError(f"eval_tasks={base.eval_tasks}: an experiment compares held-out success; set eval_tasks >= 1")
    steps = args.steps or scale.steps or base.steps
    if getattr(args, "parallel", 1) < 1:
        raise ConfigError(f"--parallel {args.parallel}: expected a positive number of cells at a time")
    settings = pick_settings(suite.settings(base, start_layers(base)), getattr(args, "settings", None))
    if getattr(args, "methods", None):
        suite = replace(suite, methods=tuple(m.strip() for m in args.methods.split(",") if m.strip()))
    check_user_overrides(suite, settings, args.overrides)
    # seed by seed, so an experiment stopped early has whole comparisons of its first seeds
    cells = [Cell(m, s, seed) for seed in seeds for s in settings for m in suite.methods
             if m in (s.methods or suite.methods)]
    save_every = getattr(args, "save_every", CELL_SAVE_EVERY)
    if save_every < 1:
        raise ConfigError(f"--save-every {save_every}: expected a positive number of steps")
    plan = Plan(suite, scale, config, seeds, steps, out, start=base.model.path or base.sft.output_dir,
                common=common, cells=cells, save_every=save_every)
    for cell in plan.cells:  # a bad combination (e.g. MIPU under a policy lag) fails before any training
        cell_config(config, plan.cell_overrides(cell))
    return plan


def cell_config(config: str, overrides: list[str]) -> TrainConfig:
    """A cell's config, in `alprl train`'s order with one layer stated on top of the recipe: its method's preset
    (`algorithm=` in its overrides; `method_layer`), so that a method runs as its preset defines it on any recipe
    (the household recipe's own loss_agg does not reach GRPO's cells) and a suite compares the methods, not the
    recipe's edits of them. The cell's other overrides (the setting, seed, steps) win over that layer."""
    return build_config(config, overrides, layered=method_layer(overrides))


def method_layer(overrides: list[str]) -> list[str]:
    """The keys a cell's method sets above the recipe: the preset named by its `algorithm=` override, as key=value."""
    named = [o.split("=", 1)[1] for o in overrides if o.startswith("algorithm=")]
    return preset_overrides(named[-1]) if named else []


def pick_settings(settings: list, names: str | None) -> list:
    """The suite's settings (but those run only when named), or those named in `--settings` (ConfigError
    naming the valid ones)."""
    if names is None:
        return [s for s in settings if not s.named_only]
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    known = {s.name: s for s in settings}
    unknown = [n for n in wanted if n not in known]
    if unknown or not wanted:
        raise ConfigError(f"--settings {names!r}: unknown setting(s) {', '.join(unknown) or '(none given)'}; "
                          f"valid: {', '.join(known)}")
    return [known[n] for n in wanted]


def warm_start(plan: Plan, show_progress: bool) -> None:
    """Build the SFT start once when it is missing (cached and checked against the recipe by `run_sft`)."""
    cfg = build_config(plan.config, plan.common)
    if cfg.model.path:
        if not Path(cfg.model.path).expanduser().exists():
            raise FileNotFoundError(f"model.path={cfg.model.path} does not exist")
        return
    from trainer.sft.train import run_sft

    run_sft(cfg, show_progress=show_progress)


def _identity(overrides: list[str]) -> list[str]:
    """The overrides that decide what a cell computes: the thread count changes only how fast (and the order of
    float sums), so a suite may be resumed with another `--parallel` / `torch_threads`."""
    return [o for o in overrides if not o.startswith("torch_threads=")]


def finished(plan: Plan, cell: Cell) -> bool:
    """Whether `cell` has run to its end with the plan's overrides (ConfigError when it ran with others)."""
    path = plan.out / cell.name / CELL_FILE
    if not path.is_file():
        return False
    done = json.loads(path.read_text())
    if _identity(done.get("overrides") or []) != _identity(plan.cell_overrides(cell)):
        raise ConfigError(f"{path.parent} was run with other overrides than this experiment's ({done.get('overrides')}"
                          f"); use another --out, or remove that directory to rerun it")
    return True


def last_eval_metrics(run_dir: Path) -> dict[str, float]:
    """`eval/*` of the last metrics record that has them (a resumed cell's earlier steps included)."""
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()] \
        if (run_dir / "metrics.jsonl").is_file() else []
    for record in reversed(records):
        found = {k: v for k, v in record.items() if k.startswith("eval/")}
        if found:
            return found
    return {}


def final_eval_file(run_dir: Path) -> Path | None:
    files = sorted(run_dir.glob("eval/step_*.jsonl"), key=lambda f: int(f.stem.removeprefix("step_")))
    return files[-1] if files else None


def robustness_sweep(cfg: TrainConfig, run_dir: Path, num_tasks: int) -> str:
    """The robustness sweep (built-in families and scales) of the cell's final checkpoint, as `alprl robustness`
    plays it from the run's own config; returns the report's path."""
    from evaluation.robustness_run import run_robustness
    from trainer.setup.saved_config import eval_settings

    checkpoint = run_dir / "checkpoints" / f"step_{cfg.steps}"
    report = run_robustness(checkpoint, eval_settings(cfg), ("noise", "prune", "quant"), None,
                            run_dir / "robustness", num_tasks)
    return str(report.relative_to(run_dir))


def resumable(run_dir: Path, overrides: list[str]) -> Path | None:
    """The last checkpoint of a half-done cell started with these overrides (thread count aside), else None."""
    start_file = run_dir / START_FILE
    if not start_file.is_file():
        return None
    started = json.loads(start_file.read_text()).get("overrides") or []
    if _identity(started) != _identity(overrides):
        return None
    return latest_checkpoint(run_dir)


def run_cell(plan: Plan, cell: Cell) -> dict:
    """Train one cell from scratch, evaluate it, (sweep it), then write its `cell.json`."""
    from trainer.loop import train

    run_dir = plan.out / cell.name
    overrides = plan.cell_overrides(cell)
    checkpoint = resumable(run_dir, overrides)
    if checkpoint is None and run_dir.exists():
        shutil.rmtree(run_dir)  # a half-done cell without a checkpoint of this plan: start it over
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / START_FILE).write_text(json.dumps({"overrides": overrides}, indent=2))
    cfg = cell_config(plan.config, overrides)
    start = time.monotonic()
    train(cfg, resume=checkpoint is not None, show_progress=False)
    final = final_eval_file(run_dir)
    info = {"cell": cell.name, "arm": cell.arm, "method": cell.method, "setting": cell.setting.name,
            "seed": cell.seed, "overrides": overrides, "steps": cfg.steps,
            "final_eval": str(final.relative_to(run_dir)) if final else None,
            "final_metrics": last_eval_metrics(run_dir)}
    meta = read_run_meta(run_dir) or {}
    # the code it ran, when, and the engine that sampled (`rollout.engine=auto` picks by model size and device)
    info |= {"source": meta.get("source"), "started": meta.get("started"), "engine": meta.get("engine")}
    if plan.suite.robustness and plan.scale.robustness_tasks:
        info["robustness"] = robustness_sweep(cfg, run_dir, plan.scale.robustness_tasks)
    info["wall_s"] = round(time.monotonic() - start, 1)
    if checkpoint is not None:
        info["resumed_from_step"] = int(checkpoint.name.removeprefix("step_"))
    tmp = run_dir / (CELL_FILE + ".tmp")
    tmp.write_text(json.dumps(info, indent=2))
    os.replace(tmp, run_dir / CELL_FILE)  # atomic: a cell.json is always a whole one
    return info


def resolved(config: str, overrides: list[str]) -> dict:
    """A cell's whole config as a dict, without what names it rather than what it runs (output dir, preset name,
    thread count, and the SFT directory where `model.path` is the start)."""
    cfg = asdict(cell_config(config, overrides))
    cfg.pop("output_dir")
    cfg.pop("torch_threads")
    cfg["algo"].pop("name")
    if cfg["model"]["path"]:
        cfg["sft"].pop("output_dir")
    return cfg


def reuse_finished(plan: Plan, todo: list[Cell], source: Path) -> list[Cell]:
    """Copy into the plan every cell of `todo` that `source` holds finished with the same resolved config; returns
    the cells still to run."""
    donors: dict[str, Path] = {}
    for path in sorted(source.glob(f"*/{CELL_FILE}")):
        done = json.loads(path.read_text())
        overrides = [o for o in done["overrides"] if not o.startswith("output_dir=")]
        config = json.loads((source / PLAN_FILE).read_text())["config"] if (source / PLAN_FILE).is_file() \
            else plan.config
        donors[json.dumps(resolved(config, overrides), sort_keys=True, default=str)] = path.parent
    left = []
    for cell in todo:
        key = json.dumps(resolved(plan.config, [o for o in plan.cell_overrides(cell)
                                                if not o.startswith("output_dir=")]), sort_keys=True, default=str)
        donor = donors.get(key)
        if donor is None:
            left.append(cell)
            continue
        target = plan.out / cell.name
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(donor, target, ignore=shutil.ignore_patterns(CELL_FILE))
        info = json.loads((donor / CELL_FILE).read_text())
        info |= {"cell": cell.name, "arm": cell.arm, "method": cell.method, "setting": cell.setting.name,
                 "overrides": plan.cell_overrides(cell), "reused_from": str(donor)}
        (target / CELL_FILE).write_text(json.dumps(info, indent=2))
    return left


def _cell_in_process(plan: Plan, cell: Cell, threads: int) -> dict:
    """One cell in a spawned worker process: its torch threads first (a fresh interpreter has the default)."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # as in the parent: no per-cell "Loading weights" bars
    if threads:
        import torch

        torch.set_num_threads(threads)
    return run_cell(plan, cell)


def run_cells(plan: Plan, todo: list[Cell], parallel: int) -> Iterator[tuple[Cell, dict | Exception]]:
    """Run `todo` one at a time in this process, or `parallel` at a time in fresh processes; yields each cell with
    its info as it finishes, or with the exception it failed with (the other cells go on: one method's crash does
    not cost the rest of a long suite). An interrupt (KeyboardInterrupt, SystemExit) still stops everything."""
    if parallel <= 1 or len(todo) <= 1:
        for cell in todo:
            try:
                yield cell, run_cell(plan, cell)
            except Exception as exc:  # reported with its traceback by run_experiment; the next cell goes on
                yield cell, exc
        return
    threads = build_config(plan.config, plan.common).torch_threads
    # spawn: vLLM and torch threads do not survive a fork; one task per child: each cell's engine leaves with it
    with ProcessPoolExecutor(parallel, mp_context=multiprocessing.get_context("spawn"),
                             max_tasks_per_child=1) as pool:
        pending = {pool.submit(_cell_in_process, plan, cell, threads): cell for cell in todo}
        try:
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    cell = pending.pop(future)
                    exc = future.exception()
                    yield cell, exc if isinstance(exc, Exception) else future.result()
        finally:
            for future in pending:
                future.cancel()


ERRORS_DIR = "errors"
"""`<out>/errors/<cell>.txt`: the traceback of a cell that failed in the last run that tried it."""


def record_failure(out: Path, cell: Cell, exc: Exception) -> str:
    """Write the cell's traceback (a worker's own included: ProcessPoolExecutor chains it as the cause) to
    `<out>/errors/<cell>.txt`; returns the one line the final error names the cell with."""
    path = out / ERRORS_DIR / f"{cell.name}.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(traceback.format_exception(exc)))
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{cell.name} ({type(exc).__name__}{': ' + first if first else ''})"


class CellsFailed(RuntimeError):
    """Some cells failed; the others finished and are in the report."""


def run_experiment(plan: Plan, show_progress: bool = True, parallel: int = 1, reuse: Path | None = None,
                   results: Path | None = None, source: dict | None = None) -> Path:
    """Run the plan's unfinished cells (one progress bar over cells) and write the report; returns report.html.
    With `results`, finished cells kept there count as finished, and each cell is kept there as it finishes. With
    `source` (`check_source`'s record, as the command passes it), experiment.json records it and the comparisons'
    declaration before the first cell starts (app/experiments/provenance.py)."""
    from evaluation.reports.experiment_report import write_experiment_report

    plan.out.mkdir(parents=True, exist_ok=True)
    names = [cell.name for cell in plan.cells]
    if results is not None:
        restore_cells(results, plan.out, names)
    described = plan.describe()
    if source is not None:
        earlier = next((d / PLAN_FILE for d in (plan.out, results) if d is not None and (d / PLAN_FILE).is_file()),
                       None)
        previous = json.loads(earlier.read_text()) if earlier is not None else None
        done = sum(finished(plan, cell) for cell in plan.cells)
        described |= {"source": source, "declared": declaration(described, previous, source, done)}
    (plan.out / PLAN_FILE).write_text(json.dumps(described, indent=2))
    todo = [cell for cell in plan.cells if not finished(plan, cell)]
    if todo and reuse is not None:
        todo = reuse_finished(plan, todo, reuse)
    if todo:
        warm_start(plan, show_progress)
        if results is not None:
            check_warm_start(Path(plan.start).expanduser(), results)
    failed: list[str] = []
    with progress_bar(f"experiment {plan.suite.name}", total=len(plan.cells),
                      completed=len(plan.cells) - len(todo), enabled=show_progress) as bar:
        for cell, info in run_cells(plan, todo, parallel):
            if isinstance(info, Exception):
                failed.append(record_failure(plan.out, cell, info))
                bar.advance()
                continue
            (plan.out / ERRORS_DIR / f"{cell.name}.txt").unlink(missing_ok=True)  # a retried cell's old failure
            write_experiment_report(plan.out, html_too=False)  # json + md of the cells so far: a kill keeps them
            if results is not None:
                sync_results(plan.out, results, names)
            bar.advance(success=info["final_metrics"].get("eval/success", float("nan")))
    report = write_experiment_report(plan.out)
    if results is not None:
        sync_results(plan.out, results, names)
    if failed:
        raise CellsFailed(f"{len(failed)} of {len(todo)} cells failed: {'; '.join(failed)}. The others finished and "
                          f"are in {report}; tracebacks in {plan.out / ERRORS_DIR}/. Rerun the same command to retry "
                          "the failed cells (finished cells are kept, half-done ones resume from their checkpoint).")
    return report


def run_experiment_command(args: argparse.Namespace) -> int:
    """`alprl experiment`: exit 2 with one line for a bad suite, scale, seed list, override or missing file, or a
    sandbox (`env.sandbox_url`) that does not answer or refuses the key."""
    try:
        plan = build_plan(args)
        cfg = build_config(plan.config, plan.common)
        check_run_sandbox(cfg)  # a sandbox that is not there: one line before the plan is written
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # per-cell "Loading weights" bars would drown the bar over cells
        if cfg.torch_threads:
            import torch

            torch.set_num_threads(cfg.torch_threads)
        reuse = Path(args.reuse) if args.reuse else None
        if reuse is not None and not reuse.is_dir():
            raise FileNotFoundError(f"--reuse {args.reuse}: no such experiment directory")
        results = Path(args.results) if args.results else None
        if results is not None and results.exists() and not results.is_dir():
            raise FileNotFoundError(f"--results {args.results}: not a directory")
        source = check_source(args.exploratory)  # code no one can check out: refused unless --exploratory
        report = run_experiment(plan, show_progress=not args.no_progress, parallel=args.parallel, reuse=reuse,
                                results=results, source=source)
    except (ConfigError, FileNotFoundError) as exc:
        print(f"alprl experiment: error: {exc}", file=sys.stderr)
        return 2
    except CellsFailed as exc:
        print(f"alprl experiment: error: {exc}", file=sys.stderr)
        return 1
    print(report)
    return 0
