"""`alprl eval`: a model on math benchmark files (and the built-in envs) → avg@k, maj@k, pass@k table and report.

    alprl eval --model DIR --bench math500=F1,aime24=F2 --mode single|tir --k 32 --temperature 1.0

The plan (benchmarks, settings, output directory) is `app/eval_plan.py`'s, checked before the model loads; the
runner, record store and report live in `evaluation/` (eval_run, eval_store, eval_report, scores). Here: the
parser, the engine (vLLM by default, transformers as fallback; the engine starts once for all benchmarks), the
progress bar and the exit statuses.
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ThreadPoolExecutor

DESCRIPTION = """Evaluate a model on math benchmark files and built-in envs: avg@k and maj@k per benchmark with an
Average column, pass@k for k = 1, 2, 4, ..., k (unbiased estimator), per-sample records, summary.json and
report.html (tables + pass@k plots).

--bench NAME=PATH plays a local JSONL / JSON / parquet file as the test split (layouts detected from the columns:
MATH500, AIME 2024/2025, Minerva, OlympiadBench, verl/DAPO parquet, question/answer; env.dataset_format=... names
one). A built-in NAME plays an env's own test split: tir / math (the generated arithmetic problems, with and
without the tool), household, webshop, alfworld, webshop-server. rg:NAME[,NAME...] plays reasoning-gym datasets'
held-out problems, one benchmark per dataset, graded by each dataset's own score_answer (reward: the score, partial
credit included; avg@k and pass@k: full credit); env.reasoning_gym.* sets their sizes, seed and config. bfcl plays
BFCL's multi-turn categories (base, miss_func, miss_param, long_context; bfcl:base,... picks some), one benchmark
per category scored by BFCL's own checker, through the BFCL agent (function calls in the model's chat template).

--mode single: one turn without a tool, the system prompt "Please reason step by step, and put your final answer
within \\boxed{}." (alprl/Math-v0); --mode tir: multi-turn with the Python tool (alprl/TIRMath-v0). Prompts go
through the model's own chat template.

Where the settings come from: an alprl checkpoint (a directory holding alprl_config.yaml) is played as its run
evaluated it: env section (style, max_turns, sandbox, ...) when the mode is the run's env, response budget
(rollout.max_response_tokens), tokens per turn (rollout.max_new_tokens), samples (eval_samples), sampling
(rollout.temperature, eval_greedy, rollout.top_p, rollout.top_k), seed and episodes per engine call. A plain Hugging Face model
directory gets the config defaults with a budget of 4096 response tokens and 4096 per turn. In single mode, unless
the run played single-turn math, the one turn may use the whole response budget. Options, then key=value overrides
(run config keys, e.g. rollout.max_model_len=8192 env.max_turns=5), change them. The sandbox is checked before the
model loads: the run's own service (its env.sandbox_url) that no longer answers leaves code to run in-process, with
a warning; an env.sandbox_url given as key=value that does not answer, or a service that refuses SANDBOX_API_KEY,
is one error line (exit 2)."""

EPILOG = """output: --out, default <model>/eval/<mode>-<hash of the settings>: settings.json, records.jsonl (one line
per benchmark, problem and sample), summary.json, report.html, plots/. An interrupted evaluation rerun with the same
arguments continues where it stopped and ends with the same numbers; other settings into the same --out are an
error (--force starts over).

A gold answer math-verify cannot grade (unbalanced braces, nesting or an exponent tower too deep, over 1,000
characters) does not end the run: its row is graded as a string and named after the table and in summary.json.

exit status: 0 done; 2 a bad option, override, model directory or benchmark file (one line naming file, row and
field), an --out holding other settings, or a sandbox that does not answer or refuses the key; 3 the inference engine's process died; 128+N stopped by signal N."""


def add_eval_parser(sub) -> None:
    p = sub.add_parser("eval", help="a model on benchmark files: avg@k / maj@k / pass@k table + HTML report",
                       description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="a Hugging Face causal LM directory or an alprl checkpoint "
                   "(e.g. runs/demo/checkpoints/step_30)")
    p.add_argument("--bench", action="append", required=True, metavar="NAME=PATH[,NAME=PATH...]",
                   help="benchmarks: dataset files, built-in names, or rg:NAME[,NAME...] (reasoning-gym); "
                   "repeatable")
    p.add_argument("--mode", choices=["single", "tir"], default=None,
                   help="how dataset files are played (default: tir for a run that played TIR math, else single)")
    p.add_argument("--k", type=int, default=None, help="samples per problem (default: the run's eval_samples, "
                   "else 2)")
    p.add_argument("--temperature", type=float, default=None, help="sampling temperature, 0 = greedy (default: "
                   "the run's, else 1.0)")
    p.add_argument("--top-p", type=float, default=None, help="nucleus sampling (default: the run's, else 1.0)")
    p.add_argument("--top-k", type=int, default=None, help="top-k sampling, 0 for every token (default: the run's, "
                   "else 0)")
    p.add_argument("--max-tokens", type=int, default=None, help="response budget per episode, all turns and tool "
                   "output (default: the run's rollout.max_response_tokens, else 4096)")
    p.add_argument("--max-new-tokens", type=int, default=None, help="tokens per assistant turn (default: the "
                   "run's rollout.max_new_tokens, else 4096; single mode: the response budget)")
    p.add_argument("--tasks", type=int, default=None, help="at most N problems per benchmark, for quick checks "
                   "(default: all of a file, 500 of tir / math, 100 of an agentic env)")
    p.add_argument("--batch", type=int, default=None, help="episodes per engine call (default: the run's "
                   "prompts_per_step × group_size, else 128); part of the settings, as it fixes the seeds")
    p.add_argument("--engine", default="auto", help="auto (vLLM when it imports, else transformers), vllm or hf "
                   "(default auto)")
    p.add_argument("--seed", type=int, default=None, help="sampling seed (default: the run's seed, else 0)")
    p.add_argument("--out", default="", help="output directory (default <model>/eval/<mode>-<settings hash>; "
                   "runs/eval/<org>--<name>/eval/... for a hub name from the local cache)")
    p.add_argument("--force", action="store_true", help="start over in an --out that holds other records")
    p.add_argument("--no-run-config", action="store_true", help="ignore the model's alprl_config.yaml")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (for logs / CI)")
    p.add_argument("--verbose", action="store_true", help="also show vLLM's INFO logs")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="run config overrides")


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def build_engine(plan):
    """The engine of the plan's config (`engine_for`)."""
    return engine_for(plan.config, plan.model)


def engine_for(config, model_dir):
    """(engine, tokenizer) of `config.rollout` (its engine kind resolved) for the model in `model_dir`: vLLM loads
    the weights itself (no copy here); transformers gets the model. `alprl serve` starts its engine here too."""
    from agents.engines import make_engine
    from agents.models import load_model_and_tokenizer, load_tokenizer

    r = config.rollout
    if r.engine == "vllm":
        model, tokenizer = None, load_tokenizer(model_dir)
    else:
        model, tokenizer = load_model_and_tokenizer(model_dir)
    engine = make_engine(r.engine, model, tokenizer, model_path=model_dir, dtype=r.dtype,
                         temperature=r.temperature, top_p=r.top_p, top_k=r.top_k, seed=config.seed,
                         schedule=r.schedule,
                         gpu_memory_utilization=r.gpu_memory_utilization,
                         tensor_parallel_size=r.tensor_parallel_size, quantization=r.quantization or None,
                         kv_cache_dtype=r.kv_cache_dtype, max_model_len=r.max_model_len or None,
                         enable_sleep_mode=False)  # evaluation never hands the GPU to a trainer
    return engine, tokenizer


def execute(plan, store, *, show_progress: bool = True) -> dict[str, list[dict]]:
    """Start the engine, play every missing chunk with a progress bar, close the engine; records per benchmark."""
    from evaluation.eval_run import run_benchmarks, stored_episodes
    from trainer.runtime.progress import progress_bar

    total = sum(b.episodes for b in plan.benchmarks)
    done = stored_episodes(plan.benchmarks, store)
    if done == total:  # nothing left: no engine needed
        return store.by_benchmark()
    engine, tokenizer = build_engine(plan)
    pool = ThreadPoolExecutor(max_workers=plan.config.rollout.env_concurrency, thread_name_prefix="env-step")
    try:
        with progress_bar("alprl eval", total, completed=done, enabled=show_progress) as bar:
            def advance(name: str, records: list[dict]) -> None:
                bar.advance(len(records), **{name: sum(r["won"] for r in records) / len(records)})

            return run_benchmarks(engine, tokenizer, plan.benchmarks, store, pool=pool, on_chunk=advance)
    finally:
        pool.shutdown()
        engine.close()


def run_eval_command(args: argparse.Namespace) -> int:
    from rich.console import Console
    from transformers.utils import logging as hf_logging

    from agents.engines.base import EngineDied
    from app.eval_plan import plan_eval
    from envs.adapters import AdapterUnavailable
    from evaluation.eval_store import RecordStore
    from evaluation.reports.eval_report import (
        score_table,
        summarize_eval,
        ungradable_lines,
        write_eval_report,
    )

    hf_logging.disable_progress_bar()
    try:
        plan = plan_eval(args)
        store = RecordStore(plan.out, plan.settings, force=args.force)
    except (ValueError, FileNotFoundError, OSError) as exc:  # ConfigError, DatasetError and SettingsMismatch are
        # ValueErrors; a missing model directory a FileNotFoundError; an --out that cannot be written an OSError
        print(f"alprl eval: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    try:
        records = execute(plan, store, show_progress=not args.no_progress)
    except AdapterUnavailable as exc:  # a real ALFWorld / WebShop env without its package, data or server
        print(f"alprl eval: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except EngineDied as exc:  # its message names the process and exit code
        print(f"alprl eval: error: {_one_line(exc)}", file=sys.stderr)
        return 3
    summary = summarize_eval(records, plan.meta | {"out": str(plan.out)},
                             {b.name: b.source for b in plan.benchmarks},
                             {b.name: b.ungradable for b in plan.benchmarks})
    page = write_eval_report(plan.out, summary)
    s = plan.meta
    print(f"{s['label']}: {s['mode']} mode, k={s['k']} samples per problem, temperature {s['temperature']:g}, "
          f"top_p {s['top_p']:g}, top_k {s.get('top_k', 0)}; figures in %")
    Console().print(score_table(summary))
    for line in ungradable_lines(summary):
        print(line)
    print(f"report: {page}")
    return 0
