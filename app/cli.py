"""`alprl` command line: train, sft, demo, report, diagnose, eval, robustness, experiment, check-template, env, serve,
sandbox.

Configs are YAML files overriding the dataclass defaults of trainer/config/train_config.py, plus `key=value`
overrides (dotted keys, YAML values) and `algorithm=<preset>`, in the order `CONFIG_ORDER` states. A bad key or value
exits with status 2 and one line naming the key and the valid choices.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from typing import TYPE_CHECKING

from app.check_template import add_check_template_parser, run_check_template_command
from app.diagnose import add_diagnose_parser, run_diagnose_command
from app.env_serve import add_env_parser, run_env_command
from app.eval_cli import add_eval_parser, run_eval_command
from app.experiments.run import add_experiment_parser, run_experiment_command
from app.serve import add_serve_parser, run_serve_command
from app.stop_guard import StopGuard, guarded
from trainer.config.errors import ConfigError
from trainer.config.train_config import TrainConfig, field_docs, to_dict
from trainer.setup.build import algorithm_presets, build_config, preset_notes

if TYPE_CHECKING:
    from trainer.runtime.memory_plan import MemoryPlan

CONFIG_ORDER = """order, later wins, for every command: defaults <- preset <- recipe (--config) <- what a suite states
<- key=value. The preset is the recipe's `algorithm: <name>`, or algorithm=<name> on the command line in its place,
so the recipe's own keys still win over it (a note names them and the key=value pairs that restore the preset's
values). An alprl experiment cell states its method preset's keys above the recipe; alprl train states nothing."""
EPILOG = f"""overrides: dotted key=value pairs after the options, e.g.
  alprl train --config configs/demo.yaml optim.lr=1e-4 rollout.group_size=8 algorithm=grpo
{CONFIG_ORDER}
Show every key with its default and meaning: alprl train --help-config

A step whose share of episodes the infrastructure failed (sandbox, engine, harness, timeout, context) is over
rollout.max_infra_frac prints one warning line naming the kinds and counts.

exit status: 0 done; 2 a bad config key or value, a missing file or server, an env.sandbox_url that does not answer
/v1/ping or refuses SANDBOX_API_KEY (checked before anything starts), a full disk while saving a checkpoint, or
(--dry-run) a memory plan that does not fit distributed.device_memory_gib; 3 the inference engine's process died;
4 the infrastructure failed over rollout.max_infra_frac of the episodes in rollout.infra_patience consecutive steps
(the last step's checkpoint is kept: --resume once the service is back); 5 the engine does not hold the weights
the trainer pushed (rollout.verify_weight_sync; the line names the first differing tensor); 6 every GRPO group had
one reward for degenerate_patience steps in a row, with --fail-on-degenerate (the step's checkpoint is kept);
128+N stopped by signal N (130 Ctrl-C, 143 SIGTERM).
--no-progress prints one plain line a step (step, elapsed, reward, loss) instead of the bar; every
degenerate_patience steps in a row whose groups all had one reward print one warning line.
SIGTERM or Ctrl-C closes the engine, sandbox and logs first; a second signal, or cleanup still running
ALPRL_STOP_TIMEOUT_S seconds (default 30) after the first, kills the run's child processes and exits at once."""
EXIT_ENGINE_DIED = 3
EXIT_WEIGHT_SYNC = 5


def _add_config_args(p: argparse.ArgumentParser, default_config: str | None) -> None:
    p.add_argument("--config", default=default_config, help="YAML file overriding the defaults "
                   f"(default: {default_config or 'none, dataclass defaults'})")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides (see --help-config)")
    p.add_argument("--dry-run", action="store_true",
                   help="validate and print the resolved config (train: and its per-GPU memory plan), then exit")
    p.add_argument("--help-config", action="store_true", help="list every config key, its default and meaning")
    p.add_argument("--no-progress", action="store_true", help="no progress bars (for logs / CI)")
    p.add_argument("--verbose", action="store_true", help="also show vLLM's INFO logs (same as VLLM_LOGGING_LEVEL=INFO)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="alprl", description="Multi-turn tool-integrated agent RL: "
                                     "environments, sandbox, GRPO and off-policy corrections.",
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG)
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="RL training (GRPO and presets: " + ", ".join(algorithm_presets()) + ")",
                           epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_config_args(train, None)
    train.add_argument("--resume", action="store_true", help="continue from <output_dir>/checkpoints/latest")
    train.add_argument("--fail-on-degenerate", action="store_true",
                       help="stop (exit status 6, that step's checkpoint kept) when every GRPO group had one reward "
                            "for degenerate_patience steps in a row (without it: one warning line)")
    sft = sub.add_parser("sft", help="build the tiny model and warm-start it on imperfect expert episodes")
    _add_config_args(sft, None)
    sft.add_argument("--force", action="store_true",
                     help="retrain even if a matching SFT model exists, and drop the resume point of an "
                          "interrupted `alprl sft` (without --force, the build continues from it)")
    demo = sub.add_parser("demo", help="SFT → held-out eval → GRPO → eval → runs/demo/report.html (CPU, minutes)")
    _add_config_args(demo, "configs/demo.yaml")
    report = sub.add_parser("report", help="(re)write <run>/report.html from a run directory; several runs are "
                                           "overlaid on the same axes (e.g. presets from one start)")
    report.add_argument("run_dirs", nargs="+", metavar="RUN")
    report.add_argument("--out", default=None, help="where the HTML goes (default: <first RUN>/report.html)")
    add_diagnose_parser(sub)
    add_eval_parser(sub)
    _add_robustness_parser(sub)
    add_experiment_parser(sub)
    add_check_template_parser(sub)
    add_env_parser(sub)
    add_serve_parser(sub)
    sub.add_parser("sandbox", help="the code-execution service (alprl sandbox serve --help)", add_help=False)
    return parser


def _add_robustness_parser(sub) -> None:
    rob = sub.add_parser("robustness", help="success of a checkpoint under hidden-state noise, pruning and "
                         "quantization → HTML + JSON + PNG report",
                         description="Evaluate a checkpoint clean and under each perturbation family and scale "
                         "(the same tasks and sampling seeds for every condition). A checkpoint of an alprl run is "
                         "played as its run evaluated it: env and task filters, prompt format, limits, samples, "
                         "sampling and seed come from its alprl_config.yaml; options and key=value overrides "
                         "change them.", epilog="overrides: run config keys, e.g. env.max_turns=5 eval_samples=4",
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    rob.add_argument("--checkpoint", required=True, help="HF model directory (e.g. runs/demo/checkpoints/step_30)")
    rob.add_argument("--env", default="", help="an env alias of agents/env_families.py (tir, math, household, "
                     "webshop, alfworld, webshop-server, openenv) or an alprl env id (default: the run's env, "
                     "else tir)")
    rob.add_argument("--perturb", default="noise,prune,quant", help="families, comma separated "
                     "(noise, prune, prune_nm, quant)")
    rob.add_argument("--scales", default="", help="per-family scales, e.g. 'noise=0.05,0.1;quant=int8,int4' "
                     "(default: the evaluator's built-in sweep)")
    rob.add_argument("--tasks", type=int, default=32, help="held-out tasks: test indices 0..N-1 (default 32)")
    rob.add_argument("--samples", type=int, default=0, help="samples per task (default: the run's eval_samples, "
                     "else 1)")
    decoding = rob.add_mutually_exclusive_group()
    decoding.add_argument("--sample", action="store_true", help="sample at the run's temperature (the default "
                          "for a run that evaluates sampled, eval_greedy=false)")
    decoding.add_argument("--greedy", action="store_true", help="greedy decoding (the default without a run "
                          "config)")
    rob.add_argument("--no-run-config", action="store_true", help="ignore the checkpoint's alprl_config.yaml")
    rob.add_argument("--layers", default="all", help="decoder layers to perturb: all, 0-5, ... (default all)")
    rob.add_argument("--out", default="", help="output directory (default <checkpoint>/robustness)")
    rob.add_argument("--seed", type=int, default=None, help="sampling seed (default: the run's seed, else 0)")
    rob.add_argument("overrides", nargs="*", metavar="key=value", help="run config overrides")


def robustness_settings(args: argparse.Namespace):
    """EvalSettings of `alprl robustness`: the checkpoint's run config (or the defaults) with the options applied;
    also returns where they came from, for the report."""
    from pathlib import Path

    from agents.env_families import env_entry
    from trainer.config.run_config import RUN_CONFIG_FILE
    from trainer.setup.sandbox_check import evaluation_sandbox, states_sandbox_url
    from trainer.setup.saved_config import eval_settings, load_run_config

    run_cfg = None if args.no_run_config else load_run_config(args.checkpoint)
    if args.env and (run_cfg is None or env_entry(args.env).env_id != run_cfg.env.id):
        run_cfg = None  # another env than the run's: its env section does not apply
        cfg = build_config(None, [f"env.id={env_entry(args.env).env_id}", *args.overrides])
    else:
        cfg = load_run_config(args.checkpoint, args.overrides) if run_cfg is not None else \
            build_config(None, args.overrides)
    path = Path(args.checkpoint) / RUN_CONFIG_FILE
    warning = evaluation_sandbox(cfg, stated=run_cfg is None or states_sandbox_url(args.overrides))
    if warning:  # the run's own service, gone: code runs in-process
        print(f"alprl robustness: warning: {warning}", file=sys.stderr)
    settings = eval_settings(cfg)
    greedy = settings.greedy if run_cfg is not None else True
    settings = dataclasses.replace(
        settings, samples_per_task=args.samples or (settings.samples_per_task if run_cfg is not None else 1),
        greedy=True if args.greedy else False if args.sample else greedy,
        seed=settings.seed if args.seed is None else args.seed)
    if not args.no_run_config and not path.is_file() and path.parent.is_dir():  # a missing checkpoint errors later
        from app.eval_plan import defaults_notice

        print(defaults_notice("robustness", args.checkpoint, [settings]), file=sys.stderr)
    return settings, {"settings_from": str(path) if run_cfg is not None else "alprl defaults (no run config)"}


def run_robustness_command(args: argparse.Namespace) -> int:
    from pathlib import Path

    from transformers.utils import logging as hf_logging

    from evaluation.reports.robustness_report import text_table
    from evaluation.robustness_run import parse_scales, run_robustness
    from trainer.setup.saved_config import run_eval_on_tasks

    hf_logging.disable_progress_bar()  # a "Loading weights" bar per condition would drown the sweep's own lines
    try:
        settings, meta = robustness_settings(args)
        scales = parse_scales(args.scales) if args.scales else None
        families = [f.strip() for f in args.perturb.split(",") if f.strip()]
        report = run_robustness(args.checkpoint, settings, families, scales,
                                args.out or Path(args.checkpoint) / "robustness", args.tasks, layers=args.layers,
                                meta=meta | run_eval_on_tasks(args.checkpoint, args.tasks),
                                progress=lambda line: print(line, flush=True))  # shown as it happens, piped too
    except (ConfigError, ValueError, FileNotFoundError) as exc:
        print(f"alprl robustness: error: {exc}", file=sys.stderr)
        return 2
    print()
    print(text_table(json.loads((report.parent / "robustness.json").read_text())))
    print(f"report: {report}")
    return 0


def parse_args(argv: list[str]) -> argparse.Namespace:
    """argparse, except that `alprl experiment SUITE --scale smoke key=value` takes the key=value overrides after
    its options too (argparse fills the overrides positional with SUITE's chunk, then calls later ones unknown)."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command == "experiment" and all("=" in e and not e.startswith("-") for e in extra):
        args.overrides += extra
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def config_help() -> str:
    lines = []

    def walk(obj, prefix: str) -> None:
        docs = field_docs(type(obj))
        for name, value in vars(obj).items():
            if hasattr(value, "__dataclass_fields__"):
                walk(value, f"{prefix}{name}.")
            else:
                lines.append(f"{prefix}{name} = {value!r}\n    {docs.get(name, '')}")

    walk(TrainConfig(), "")
    return "\n".join([f"# {line}" for line in CONFIG_ORDER.splitlines()] + lines)


PLAN_SEPARATOR = "# --- memory plan ---"
"""The line between --dry-run's JSON and the memory plan: the JSON is what comes before it."""


def _print_plan(command: str, plan: MemoryPlan) -> int:
    """The memory plan after the JSON, on stdout; one line on stderr and 2 when it does not fit the device."""
    from trainer.runtime.memory_plan import format_plan, refusal

    print(PLAN_SEPARATOR)
    print(format_plan(plan))
    if plan.fits is False:
        print(f"alprl {command}: error: {refusal(plan)}", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # vLLM logs every engine step and weight sync at INFO, which buries the progress bars; set
    # VLLM_LOGGING_LEVEL=INFO to see them. Spawned vLLM workers inherit the variable.
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    if argv[:1] == ["sandbox"]:
        from sandbox.deploy.cli import main as sandbox_main

        return sandbox_main(argv[1:])
    args = parse_args(argv)
    if getattr(args, "verbose", False):
        os.environ["VLLM_LOGGING_LEVEL"] = "INFO"
    return COMMANDS[args.command](args)


def run_report_command(args: argparse.Namespace) -> int:
    from evaluation.reports.run_report import write_report

    print(write_report(args.run_dirs, out=args.out))
    return 0


def run_config_command(args: argparse.Namespace) -> int:
    """train, sft, demo: the config from --config and key=value, checked (and with --dry-run printed, with the
    memory plan) before anything starts, then the run under the stop guard; each failure a run can meet is one
    line and its exit status (EPILOG)."""
    if args.help_config:
        print(config_help())
        return 0
    try:
        cfg, shape_warnings, plan = checked_config(args)
    except ConfigError as exc:
        print(f"alprl {args.command}: error: {exc}", file=sys.stderr)
        return 2
    if args.dry_run:
        for warning in shape_warnings:
            print(f"alprl {args.command}: warning: {warning}", file=sys.stderr)
        print(json.dumps(to_dict(cfg), indent=2))
        return _print_plan(args.command, plan) if plan is not None else 0
    from agents.engines.base import EngineDied
    from agents.engines.weight_check import WeightSyncError
    from envs.adapters import AdapterUnavailable
    from sandbox.client import SandboxAuthError
    from trainer.diagnostics.degenerate import EXIT_DEGENERATE, DegenerateRun
    from trainer.runtime.checkpoint import DiskFullError
    from trainer.runtime.outage import EXIT_INFRA_OUTAGE, InfraOutage

    try:
        return run_command(args, cfg)
    except (AdapterUnavailable, ConfigError, FileNotFoundError, DiskFullError, SandboxAuthError) as exc:  # an
        # adapter without its package, data or server; a warm start built for another config; a model.path, config
        # or checkpoint that is not there; a checkpoint or metrics record that did not fit on its disk (with the
        # free space); a sandbox that refuses this process's API key (it names the URL and the fix)
        print(f"alprl {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except EngineDied as exc:  # its message names the process and exit code; a traceback would add nothing
        print(f"alprl {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_ENGINE_DIED
    except InfraOutage as exc:  # one line: what failed, the step whose checkpoint is kept, what to do
        print(f"alprl {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_INFRA_OUTAGE
    except WeightSyncError as exc:  # one line naming the first tensor the engine does not hold as pushed
        print(f"alprl {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_WEIGHT_SYNC
    except DegenerateRun as exc:  # --fail-on-degenerate: one line, the step whose checkpoint is kept
        print(f"alprl {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_DEGENERATE


def checked_config(args: argparse.Namespace) -> tuple[TrainConfig, list[str], MemoryPlan | None]:
    """The command's config, its shape and host-memory warnings, and (train --dry-run) its memory plan; a
    ConfigError for anything the run would refuse, so --dry-run refuses it too (all but a sandbox that does not
    answer: a dry run reaches no service)."""
    if getattr(args, "fail_on_degenerate", False):
        args.overrides = [*args.overrides, "fail_on_degenerate=true"]
    cfg = build_config(args.config, args.overrides)
    for note in preset_notes(args.config, args.overrides):  # where the recipe's keys win over `algorithm=`
        print(f"alprl {args.command}: note: {note}", file=sys.stderr)
    from trainer.setup.file_checks import validate_model_shape

    shape_warnings = validate_model_shape(cfg)  # the run's engine start logs the same warnings
    if args.command in ("train", "demo"):
        from trainer.runtime.memory_plan import host_memory_warning

        shape_warnings += [w for w in [host_memory_warning(cfg)] if w]
    if args.command in ("sft", "demo"):  # both build the warm start: what SFT refuses, --dry-run refuses too
        from trainer.sft.train import check_sft_config

        check_sft_config(cfg)
    if args.command in ("train", "demo") and not args.dry_run:  # a dry run stays offline
        from trainer.setup.sandbox_check import check_run_sandbox

        check_run_sandbox(cfg)  # a sandbox that is not there: one line before any model loads or file is written
    plan = None
    if args.dry_run and args.command == "train":  # the shape is read before anything is printed
        from trainer.runtime.memory_plan import plan_memory

        plan = plan_memory(cfg)
    return cfg, shape_warnings, plan


def run_command(args: argparse.Namespace, cfg: TrainConfig) -> int:
    guard = StopGuard(args.command, StopGuard.timeout_from_env()).install()
    try:
        return _run(args, cfg)
    finally:
        guard.uninstall()


def _run(args: argparse.Namespace, cfg: TrainConfig) -> int:
    show = not args.no_progress
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # per-load "Loading weights" bars would drown our own progress bars
    if cfg.torch_threads:
        import torch

        torch.set_num_threads(cfg.torch_threads)
    return RUNS[args.command](args, cfg, show)


def _run_sft(args: argparse.Namespace, cfg: TrainConfig, show: bool) -> int:
    from trainer.sft.train import run_sft

    print(run_sft(cfg, show_progress=show, force=args.force))
    return 0


def _run_train(args: argparse.Namespace, cfg: TrainConfig, show: bool) -> int:
    from trainer.loop import train

    results = train(cfg, resume=args.resume, show_progress=show, step_lines=not show)
    if results and os.environ.get("RANK", "0") in ("", "0"):  # under torchrun: rank 0 speaks for the run
        print(json.dumps({k: round(v, 4) for k, v in results[-1].metrics.items()}, indent=1))
    return 0


def _run_demo(args: argparse.Namespace, cfg: TrainConfig, show: bool) -> int:
    from app.demo import run_demo

    run_demo(cfg)
    return 0


RUNS = {"sft": _run_sft, "train": _run_train, "demo": _run_demo}
"""The commands that run a config, after `run_config_command` built and checked it."""
COMMANDS = {
    "train": run_config_command, "sft": run_config_command, "demo": run_config_command,
    "report": run_report_command,
    "diagnose": run_diagnose_command,
    "eval": lambda args: guarded("eval", run_eval_command, args),  # a rerun continues from the finished records
    "experiment": lambda args: guarded("experiment", run_experiment_command, args),  # a rerun skips finished cells
    "robustness": run_robustness_command,
    "check-template": run_check_template_command,
    "env": run_env_command,
    "serve": run_serve_command,
}
"""Each subcommand's entry point (`sandbox` is handed to the sandbox's own CLI before argparse)."""


if __name__ == "__main__":
    raise SystemExit(main())
