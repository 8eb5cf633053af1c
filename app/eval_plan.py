"""What `alprl eval` will run, settled before any model loads: benchmarks, their settings, the output directory.

One evaluation path: a benchmark is played with `trainer.setup.saved_config.eval_settings` of a config built the way
`alprl robustness` builds it (the checkpoint's `alprl_config.yaml`, else the defaults; then the options; then
key=value overrides), so an alprl checkpoint keeps its run's prompt format, stop strings, limits, sampling and
seed. Per benchmark only the env section changes:
- `NAME=PATH` (a dataset file of any `envs.datasets` layout) plays the file as the test split of the mode's env:
  `--mode single` alprl/Math-v0 (one turn, no tool), `--mode tir` alprl/TIRMath-v0. The run's env section is kept
  when the run played that env (style, max_turns, sandbox, ...), else the env defaults apply. The run's own
  dataset keys are dropped before its config is read: its files need not be on this machine, and their layout
  and columns are not the benchmark's (`env.dataset_format=` / `env.dataset_fields.<role>=` on the command line
  apply to every benchmark file).
- a built-in name (an env alias of `agents/env_families.py`: tir, math, household, webshop, ...) plays that env's
  own test split (the generated arithmetic problems for tir and math).
- `rg:<name>[,<name>...]` plays each reasoning-gym dataset's held-out problems (`envs/datasets/reasoning_gym.py`)
  as a benchmark of its own, `rg:<name>`, in the mode's env, graded by the dataset's `score_answer`: so avg@k and
  pass@k come per dataset, and the mean reward is the mean score, partial credit included. Names after `rg:` are
  reasoning-gym names up to the next NAME=PATH or `rg:` item. The run's `env.reasoning_gym` section (sizes, seed,
  per-dataset config) is kept, so a run trained on reasoning-gym is scored on its own held-out problems.
Every file is loaded and checked here (`trainer.setup.validation.validate_config`), so a bad file is one error before
the engine starts. A plain Hugging Face model (no run config) gets the defaults plus a response budget a real model
needs (`PLAIN_MODEL_BUDGET`); in single mode, when the run did not play single-turn math, the one turn may use the
whole response budget (a tool turn's `rollout.max_new_tokens` is far too short for a chain of thought).
A model without a run config gets one line on stderr naming the defaults it is played with (`defaults_notice`):
a checkpoint whose run trained on other task types or limits scores far from its run's figure under them.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.engines import resolve_kind, vllm_only
from agents.env_families import BY_ALIAS, env_entry, problem_count
from agents.models import resolve_local
from envs.bfcl.data import CATEGORIES as BFCL_CATEGORIES
from envs.datasets import DatasetError, source_fingerprint, source_location
from envs.datasets import reasoning_gym as rg
from envs.tir.problems import ProblemSource
from evaluation.eval_run import Benchmark
from evaluation.evaluate import EvalSettings
from trainer.config.errors import ConfigError
from trainer.config.rollout_config import engine_options
from trainer.config.run_config import RUN_CONFIG_FILE
from trainer.config.train_config import EnvConfig, TrainConfig, parse_overrides
from trainer.runtime.model_shape import shape_from_config_json
from trainer.setup.build import build_config
from trainer.setup.sandbox_check import evaluation_sandbox, states_sandbox_url
from trainer.setup.saved_config import DATASET_KEYS, eval_settings, load_run_config
from trainer.setup.validation import validate_config

MODE_ENVS = {"single": "alprl/Math-v0", "tir": "alprl/TIRMath-v0"}
PLAIN_MODEL_BUDGET = 4096
"""Response tokens (and tokens per turn) for a model without a run config: chains of thought of real models on
MATH-level problems run to thousands of tokens."""
BUILTIN_TASKS = {"alprl/TIRMath-v0": 500, "alprl/Math-v0": 500}
"""Default problems of a built-in benchmark (the generated test split has 500); the agentic envs' default is
`AGENTIC_TASKS` (their episodes run up to 50 steps)."""
AGENTIC_TASKS = 100
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")
RG_BENCH = "rg:"
"""`--bench rg:<name>,...`: reasoning-gym datasets, each a benchmark named rg:<name>."""
BFCL_BENCH = "bfcl"
"""`--bench bfcl` (every BFCL multi-turn category) or `bfcl:<category>,...`: one benchmark per category, named
bfcl:<category>, so the table has BFCL's accuracy per category."""


@dataclass(frozen=True)
class EvalPlan:
    model: Path
    config: TrainConfig
    """The resolved config (run config or defaults, options, overrides): engine, dtype, context."""
    benchmarks: list[Benchmark]
    settings: dict[str, Any]
    """What decides the samples (stored in the output directory; a rerun must match)."""
    meta: dict[str, Any]
    """Facts for the summary and report."""
    out: Path


def parse_benches(specs: list[str]) -> list[tuple[str, str]]:
    """['a=F1,b=F2', 'household', 'rg:x,y'] → [('a', 'F1'), ('b', 'F2'), ('household', ''),
    ('rg:x', 'reasoning_gym:x'), ('rg:y', 'reasoning_gym:y')] ('' = built-in)."""
    out = []
    for spec in specs:
        reasoning_gym = bfcl = False  # whether the items go on naming reasoning-gym datasets / BFCL categories
        for item in (part.strip() for part in spec.split(",")):
            reasoning_gym = item.startswith(RG_BENCH) or (reasoning_gym and "=" not in item)
            bfcl = item.startswith(BFCL_BENCH + ":") or (bfcl and "=" not in item)
            if item == BFCL_BENCH:
                out += [(f"{BFCL_BENCH}:{c}", "") for c in BFCL_CATEGORIES]
            elif item and bfcl:
                category = item.removeprefix(BFCL_BENCH + ":").strip()
                if category not in BFCL_CATEGORIES:
                    raise ValueError(f"--bench {BFCL_BENCH}:{category}: BFCL's multi-turn categories are "
                                     f"{', '.join(BFCL_CATEGORIES)}")
                out.append((f"{BFCL_BENCH}:{category}", ""))
            elif item and reasoning_gym:
                name = item.removeprefix(RG_BENCH).strip()
                try:
                    rg.check_name(name)
                except rg.ReasoningGymError as exc:
                    raise ValueError(f"--bench {RG_BENCH}{name}: {exc}") from None
                out.append((RG_BENCH + name, rg.PREFIX + name))
            elif item:
                out.append(_named_bench(item))
    if not out:
        raise ValueError("--bench: no benchmark given (e.g. --bench math500=data/math500.jsonl)")
    names = [n for n, _ in out]
    if len(set(names)) != len(names):
        raise ValueError(f"--bench: benchmark names must differ, got {', '.join(names)}")
    return out


def _named_bench(item: str) -> tuple[str, str]:
    """NAME=PATH or a built-in name → (name, path or '')."""
    name, sep, path = item.partition("=")
    name, path = name.strip(), path.strip()
    if not _NAME.fullmatch(name) or (sep and not path):
        raise ValueError(f"--bench {item!r}: expected NAME=PATH (NAME of letters, digits, _ . + -) or a "
                         f"built-in name ({', '.join(BY_ALIAS)})")
    if not sep and name not in BY_ALIAS:
        raise ValueError(f"--bench {name!r} is no built-in benchmark ({', '.join(BY_ALIAS)}); give a dataset "
                         f"file as {name}=PATH, or reasoning-gym datasets as rg:<name>")
    return name, path


def _option_overrides(args: argparse.Namespace, plain: bool) -> list[str]:
    out = [f"rollout.max_new_tokens={PLAIN_MODEL_BUDGET}", f"rollout.max_response_tokens={PLAIN_MODEL_BUDGET}"] \
        if plain else []
    out.append(f"rollout.engine={args.engine}")
    for flag, key in (("max_tokens", "rollout.max_response_tokens"), ("max_new_tokens", "rollout.max_new_tokens"),
                      ("top_p", "rollout.top_p"), ("top_k", "rollout.top_k"), ("k", "eval_samples"),
                      ("seed", "seed")):
        if getattr(args, flag) is not None:
            out.append(f"{key}={getattr(args, flag)}")
    if args.temperature is not None:
        if args.temperature < 0:
            raise ValueError(f"--temperature {args.temperature}: expected >= 0 (0: greedy)")
        out += ["eval_greedy=true"] if args.temperature == 0 else [f"rollout.temperature={args.temperature}",
                                                                  "eval_greedy=false"]
    return out


def file_overrides(overrides: list[str]) -> tuple[list[str], dict[str, Any]]:
    """(the overrides without env dataset keys, the layout options among them: {"dataset_format": ...,
    "dataset_fields": {...}}). Those apply to each benchmark file, not to the run's config; the files themselves
    come with --bench."""
    rest, layout = [], []
    for item in overrides:
        parts = item.partition("=")[0].strip().split(".")
        (layout if parts[0] == "env" and len(parts) > 1 and parts[1] in DATASET_KEYS else rest).append(item)
    options = parse_overrides(layout).get("env", {})
    for key in ("dataset", "eval_dataset", "dataset_split_field"):
        if key in options:
            raise ConfigError(f"env.{key}: benchmark files come with --bench NAME=PATH")
    if "dataset_fields" in options and not isinstance(options["dataset_fields"], dict):
        raise ConfigError("env.dataset_fields: set a column per role, e.g. env.dataset_fields.question=my_q")
    out = {"dataset_fields": {str(k): str(v) for k, v in options["dataset_fields"].items()}} \
        if "dataset_fields" in options else {}
    return rest, out | ({"dataset_format": str(options["dataset_format"] or "")} if "dataset_format" in options
                        else {})


def base_config(args: argparse.Namespace, model: Path) -> tuple[TrainConfig, TrainConfig | None]:
    """(the resolved config, its engine kind resolved: auto → vllm or hf; the run config or None)."""
    overrides, _ = file_overrides(list(args.overrides))
    if "id" in parse_overrides(overrides).get("env", {}):
        raise ConfigError("env.id: the env follows from --mode (single, tir) or a built-in benchmark name")
    run_cfg = None if args.no_run_config else load_run_config(model, without_datasets=True)
    # eval_tasks=0: the run's own held-out count bounds nothing here (--tasks does)
    overrides = ["eval_tasks=0", *_option_overrides(args, run_cfg is None), *overrides]
    cfg = load_run_config(model, overrides, without_datasets=True) if run_cfg is not None else \
        build_config(None, overrides)
    engine = resolve_kind(cfg.rollout.engine, model_parameters(model),
                          vllm_only_option=vllm_only(cfg.rollout.schedule, engine_options(cfg.rollout)))
    rollout = dataclasses.replace(cfg.rollout, engine=engine)  # the header names it; `auto` as `alprl train` picks
    return dataclasses.replace(cfg, rollout=rollout), run_cfg


def model_parameters(model: Path) -> int | None:
    """The model's parameter count from its config.json, as `auto` weighs it (None: no readable config.json)."""
    try:
        config = json.loads((Path(model) / "config.json").read_text())
        return shape_from_config_json(str(model), config, str(model)).params()
    except (OSError, ValueError, ConfigError):
        return None


def default_mode(run_cfg: TrainConfig | None) -> str:
    """tir for a run that played TIR math, else single."""
    return "tir" if run_cfg is not None and run_cfg.env.id == MODE_ENVS["tir"] else "single"


def _bench_env(cfg: TrainConfig, env_id: str, path: str, overrides: list[str]) -> EnvConfig:
    """The env section a benchmark plays: the config's when it is that env, else the defaults with the command
    line's env.* overrides; the benchmark's file as the test split with the command line's layout options (no
    file: the env's own test split)."""
    rest, layout = file_overrides(overrides)
    env_overrides = [o for o in rest if o.partition("=")[0].strip().startswith("env.")]
    env = cfg.env if cfg.env.id == env_id else build_config(None, [f"env.id={env_id}", *env_overrides]).env
    cleared = {k: ({} if k == "dataset_fields" else "") for k in DATASET_KEYS}
    layout = {} if rg.is_spec(path) else layout  # a reasoning-gym benchmark has no columns
    return dataclasses.replace(env, **(cleared | layout | {"eval_dataset": path} if path else cleared))


def make_benchmark(cfg: TrainConfig, run_cfg: TrainConfig | None, args: argparse.Namespace, name: str,
                   path: str, mode: str) -> Benchmark:
    builtin, _, category = name.partition(":")  # bfcl:<category> plays that category alone
    env_id = MODE_ENVS[mode] if path else env_entry(builtin).env_id
    env = _bench_env(cfg, env_id, path, list(args.overrides))
    if category and not path:
        env = dataclasses.replace(env, task_types=[category])
    bench_cfg = dataclasses.replace(cfg, env=env, eval_tasks=0)
    try:
        size = problem_count(bench_cfg.env, "test")  # loads the file: a bad one is one line naming file, row, field
        validate_config(bench_cfg)
    except (ConfigError, DatasetError) as exc:
        raise ConfigError(f"--bench {name}: {exc}") from None
    settings = eval_settings(bench_cfg)
    rollout_overrides = parse_overrides(list(args.overrides)).get("rollout", {})
    turn_set = args.max_new_tokens is not None or "max_new_tokens" in rollout_overrides
    if env_id == MODE_ENVS["single"] and not turn_set and (run_cfg is None or run_cfg.env.id != env_id):
        settings = dataclasses.replace(settings, limits=dataclasses.replace(
            settings.limits, max_new_tokens=settings.limits.max_response_tokens))
    if args.batch:
        settings = dataclasses.replace(settings, num_envs=args.batch)
    wanted = args.tasks or (size if path else BUILTIN_TASKS.get(env_id, AGENTIC_TASKS))
    source = source_location(path) if path else f"{env_id} test split"
    num_tasks = min(wanted, size)
    return Benchmark(name, settings, num_tasks, source, ungradable_rows(bench_cfg.env, source, num_tasks) if path
                     else ())


def ungradable_rows(env: EnvConfig, source: str, num_tasks: int) -> tuple[dict[str, Any], ...]:
    """The first `num_tasks` problems of a benchmark file whose gold is graded as a string, for the summary (the
    file is already loaded: `ProblemSource` caches it per process; a reasoning-gym source has none)."""
    served = ProblemSource(eval_dataset=env.eval_dataset, dataset_format=env.dataset_format,
                           dataset_fields=env.dataset_fields,
                           reasoning_gym=dataclasses.asdict(env.reasoning_gym)).split("test")
    return tuple({"file": source, "row": r.row, "index": r.index, "reason": r.reason}
                 for r in served.ungradable if r.index < num_tasks)


def _described(s: EvalSettings) -> str:
    """The settings that decide a score, in words: the env's (task types only where it generates its problems)."""
    env = s.env
    types = [] if env.eval_dataset else [f"task types {','.join(env.task_types) or 'all'}"]
    decoding = "greedy" if s.greedy else f"temperature {s.temperature:g}"
    return ", ".join([f"env {env.id}", *types, f"max_turns {env.max_turns}",
                      f"{s.limits.max_response_tokens} response tokens ({s.limits.max_new_tokens} per turn)",
                      f"{s.samples_per_task} sample{'s' if s.samples_per_task != 1 else ''} per task", decoding,
                      f"seed {s.seed}"])


def defaults_notice(command: str, model: str | Path, settings: Sequence[EvalSettings]) -> str:
    """The line `alprl eval` and `alprl robustness` print on stderr when `model` has no run config: the defaults
    they play it with, and how to give a run's settings instead (neither command reads another config file)."""
    described = "; ".join(dict.fromkeys(_described(s) for s in settings))
    return (f"alprl {command}: no {RUN_CONFIG_FILE} beside {model}: evaluating with alprl's defaults ({described}); "
            f"to evaluate as a run did, copy its {RUN_CONFIG_FILE} there or give its settings as key=value "
            "overrides (e.g. env.task_types=[multiply] env.max_turns=5)")


def model_signature(model: Path) -> list[list[Any]]:
    """(name, bytes, mtime) of the model directory's files: a retrained or replaced model is other settings."""
    return [[p.name, p.stat().st_size, p.stat().st_mtime_ns] for p in sorted(model.iterdir()) if p.is_file()]


def plan_eval(args: argparse.Namespace) -> EvalPlan:
    """Everything `alprl eval` runs, checked; raises ConfigError / ValueError / FileNotFoundError (exit 2)."""
    if args.k is not None and args.k < 1 or args.tasks is not None and args.tasks < 0 \
            or args.batch is not None and args.batch < 1:
        raise ValueError("--k and --batch must be >= 1 and --tasks >= 0")
    model = resolve_local(args.model)
    benches = parse_benches(args.bench)
    cfg, run_cfg = base_config(args, model)
    warning = evaluation_sandbox(cfg, stated=run_cfg is None or states_sandbox_url(args.overrides))
    if warning:  # the run's own service, gone: code runs in-process
        print(f"alprl eval: warning: {warning}", file=sys.stderr)
    mode = args.mode or default_mode(run_cfg)
    benchmarks = [make_benchmark(cfg, run_cfg, args, name, path, mode) for name, path in benches]
    if run_cfg is None and not args.no_run_config:
        print(defaults_notice("eval", model, [b.settings for b in benchmarks]), file=sys.stderr)
    r = cfg.rollout
    settings = {"model": str(model.resolve()), "model_files": model_signature(model), "engine": r.engine,
                "dtype": r.dtype, "max_model_len": r.max_model_len, "quantization": r.quantization,
                "kv_cache_dtype": r.kv_cache_dtype,
                "benchmarks": {b.name: {"source": b.source, "num_tasks": b.num_tasks,
                                        "file": source_fingerprint(b.settings.env.eval_dataset)
                                        if b.settings.env.eval_dataset else "",
                                        **dataclasses.asdict(b.settings)} for b in benchmarks}}
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:10]
    s = benchmarks[0].settings
    meta = {"label": args.model, "model": str(model), "mode": mode, "k": s.samples_per_task,
            "temperature": 0.0 if s.greedy else s.temperature, "top_p": s.top_p, "top_k": s.top_k,
            "seed": s.seed,
            "max_response_tokens": s.limits.max_response_tokens, "max_new_tokens": s.limits.max_new_tokens,
            "engine": r.engine, "dtype": r.dtype,
            "settings_from": str(model / RUN_CONFIG_FILE) if run_cfg is not None else "alprl defaults (no run config)"}
    # a hub name read from the Hugging Face cache gets its results outside the cache
    home = model if Path(args.model).expanduser().is_dir() else Path("runs/eval") / args.model.replace("/", "--")
    out = Path(args.out) if args.out else home / "eval" / f"{mode}-{digest}"
    return EvalPlan(model, cfg, benchmarks, settings, meta, out)
