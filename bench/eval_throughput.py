"""`alprl eval`'s generated tokens/s against a bare vLLM `LLM.generate` on the same prompts and sampling settings.

- Policy: the tiny TIR policy of bench/rollout_throughput.py (SFT-ed until it uses the tool), or any model via
  --model. Problems: --problems generated arithmetic test problems written to a question/answer JSONL file, so the
  dataset path of `alprl eval` is what runs (`--bench arith=FILE`), --k samples each.
- Single-turn mode: `alprl eval`'s own plan and runner (app.eval_plan.plan_eval, evaluation.eval_run.run_benchmarks:
  env resets, chat prompts, the rollout driver, grading, the JSONL record store) on one VLLMEngine, every episode
  in one engine call (--batch = all episodes); then, on the same engine, `LLM.generate` on the same prompt token
  ids with the SamplingParams the engine builds for them (the same per-request seeds, temperature, top_p, token
  budget and log-probs), so both sample the same tokens. Target: alprl eval >= 0.9x the bare generate.
- TIR mode: the same problems through `alprl eval --mode tir` (code turns, the in-process sandbox, tool results
  appended): its sampled tokens/s, printed beside (tool time and observation tokens are part of its wall time).
The prefix cache is reset before every phase (both phases send the same prompts); phases alternate over --rounds
and are summed (tokens / seconds), so load from other processes hits both alike. Also printed: the seconds one run
spends outside the engine (building the envs, resets and chat prompts), the share a tiny model's short answers make
visible. Prints figures only.

Usage: python bench/eval_throughput.py [--model DIR] [--problems 64] [--k 4] [--max-tokens 128] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rollout_throughput import TOOL_POLICY, wait_for_warm_sandbox

from agents.engines.base import GenerationRequest
from agents.rollout import episode_seed
from app.cli import build_parser
from app.eval_cli import build_engine
from app.eval_plan import plan_eval
from envs.splits import derive_seed
from envs.tir.tasks import generate_task
from evaluation.eval_run import run_benchmarks
from evaluation.eval_store import RecordStore
from evaluation.evaluate import evaluation_specs
from trainer.setup.build import build_config
from trainer.sft.train import run_sft


def plan(model: str, file: Path, mode: str, args: argparse.Namespace, out: Path):
    argv = ["eval", "--model", model, "--bench", f"arith={file}", "--mode", mode, "--k", str(args.k),
            "--batch", str(args.problems * args.k), "--max-tokens", str(args.max_tokens), "--engine", "vllm",
            "--out", str(out)]
    return plan_eval(build_parser().parse_args(argv))


def bare_requests(engine, tokenizer, bench) -> tuple[list, list]:
    """The prompts and SamplingParams `alprl eval` sends for `bench`'s first turns, for `LLM.generate`."""
    from vllm.inputs import TokensPrompt

    s = bench.settings
    env, agent = s.make_envs(1)[0], s.make_agent(tokenizer)
    specs = evaluation_specs("test", bench.num_tasks, s.samples_per_task)
    prompts, params = [], []
    for start, size in bench.chunk_sizes().items():
        call_seed = derive_seed("eval-sampling", s.seed, start)  # as evaluation_chunks seeds the call
        for i, spec in enumerate(specs[start: start + size]):
            ids = agent.prompt_ids(*env.reset(seed=spec.seed, options=spec.options))
            request = GenerationRequest(ids, min(s.limits.max_new_tokens, s.limits.max_response_tokens),
                                        agent.stop_strings(0))
            budget = min(request.max_new_tokens, engine.max_model_len - len(ids))
            prompts.append(TokensPrompt(prompt_token_ids=ids))
            params.append(engine._params(request, budget, s.greedy, episode_seed(call_seed, i, 0) % 2**63))
    env.close()
    return prompts, params


def timed_eval(engine, tokenizer, the_plan, out: Path, pool) -> tuple[int, float]:
    """(sampled tokens, seconds) of one `alprl eval` run into a fresh output directory."""
    engine.llm.reset_prefix_cache()
    store = RecordStore(out, the_plan.settings, force=True)
    t0 = time.perf_counter()
    records = run_benchmarks(engine, tokenizer, the_plan.benchmarks, store, pool=pool)
    seconds = time.perf_counter() - t0
    return sum(r["sampled_tokens"] for rs in records.values() for r in rs), seconds


def timed_bare(engine, prompts, params) -> tuple[int, float]:
    with engine._vllm() as llm:  # the engine thread is idle between calls; hold its lock all the same
        llm.reset_prefix_cache()
        t0 = time.perf_counter()
        outputs = llm.generate(prompts, params, use_tqdm=False)
        seconds = time.perf_counter() - t0
    return sum(len(o.outputs[0].token_ids) for o in outputs), seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="", help="a model directory (default: train the tiny TIR policy)")
    parser.add_argument("--problems", type=int, default=64)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=128, help="response budget (single mode: one turn)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # as the alprl command line runs it
    tmp = tempfile.TemporaryDirectory(prefix="alprl-eval-bench-")
    scratch = Path(tmp.name)
    model = args.model or str(run_sft(build_config(None, TOOL_POLICY + [f"sft.output_dir={scratch / 'sft'}"]),
                                      show_progress=False))
    file = scratch / "arith.jsonl"
    tasks = [generate_task("test", i, difficulty=1) for i in range(args.problems)]
    file.write_text("".join(json.dumps({"question": t.question, "answer": t.answer}) + "\n" for t in tasks))
    single, tir = plan(model, file, "single", args, scratch / "out"), plan(model, file, "tir", args, scratch / "out")
    engine, tokenizer = build_engine(single)
    pool = ThreadPoolExecutor(max_workers=single.config.rollout.env_concurrency)
    bench = single.benchmarks[0]
    t0 = time.perf_counter()
    for env in bench.settings.make_envs(bench.episodes):
        env.close()
    t1 = time.perf_counter()
    prompts, params = bare_requests(engine, tokenizer, bench)  # env resets and chat prompts, as the rollout does
    setup = {"env construction": t1 - t0, "resets + chat prompts": time.perf_counter() - t1}
    timed_eval(engine, tokenizer, tir, scratch / "warm", pool)  # warm-up: the engine, the sandbox, the graders
    wait_for_warm_sandbox()
    phases = {"eval single": lambda: timed_eval(engine, tokenizer, single, scratch / "single", pool),
              "bare generate": lambda: timed_bare(engine, prompts, params),
              "eval tir": lambda: timed_eval(engine, tokenizer, tir, scratch / "tir", pool)}
    totals = {key: [0, 0.0] for key in phases}
    for _ in range(args.rounds):
        for key, phase in phases.items():
            tokens, seconds = phase()
            totals[key] = [totals[key][0] + tokens, totals[key][1] + seconds]
    rate = {key: tokens / seconds for key, (tokens, seconds) in totals.items()}
    print(f"{model}: {args.problems} problems x {args.k} samples, budget {args.max_tokens} tokens, "
          f"{args.rounds} rounds, {single.config.rollout.dtype}")
    print(f"single-turn  alprl eval {rate['eval single']:8.0f} tok/s   bare LLM.generate {rate['bare generate']:8.0f} "
          f"tok/s   ratio {rate['eval single'] / rate['bare generate']:5.2f}x (target >= 0.90)   tokens "
          f"{totals['eval single'][0]} vs {totals['bare generate'][0]}")
    print(f"tir mode     alprl eval {rate['eval tir']:8.0f} tok/s   ({totals['eval tir'][0]} sampled tokens, tool "
          f"time and observation tokens in its wall time)")
    per_run = totals["eval single"][1] / args.rounds
    print("alprl eval's work beside sampling, per single-turn run of "
          f"{per_run:.2f} s: " + ", ".join(f"{k} {v:.2f} s" for k, v in setup.items()))
    pool.shutdown()
    engine.close()
    tmp.cleanup()


if __name__ == "__main__":
    main()
