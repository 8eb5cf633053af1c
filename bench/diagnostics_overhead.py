"""What the ratio diagnostics add to a train step of the demo recipe (target ≤ 3%).

A train step is its rollouts (vLLM on CPU, the TIR env, the sandbox) followed by `trainer.loop.learn`
(advantages, θ_old log-probs, corrections, the mini-batch updates, weight sync). Three arms run `learn` on the
same rollout batch from the same model, optimizer and σ state (restored in between; the order rotates between
steps, the last arm's state is kept):
- `none`: diagnostics.every = 0, no ratio diagnostics;
- `ordinary`: a step between diagnostics steps: the Table 5 quantiles of the update's own forwards only;
- `full`: a diagnostics step (diagnostics.every = 1): also the extra forwards (|Δp| per layer group, a perturbed
  last mini-batch's clean π_θ, the after-update policy KL and entropy on diagnostics.rows rows).
Printed per algorithm: median times and, as paired medians of per-step ratios against `none`, the ratio of
`learn` alone (the harsher figure) and of the whole step (rollout time + learn) for an ordinary step, a full step,
and the default cadence (one full step in diagnostics.every, the rest ordinary). The mismatch metrics and the
scatter sample run in every arm. Prints figures only; nothing here is asserted in tests.

Measured 2026-12-01 on the idle 2-core dev machine (6 steps, demo SFT start, torch single-threaded as the demo),
train-step ratio against `none`: GRPO ordinary 1.001, diagnostics step 1.008, default cadence 1.003; Seq-ALP
ordinary 1.000, diagnostics step 1.075 (learn alone 1.151: the |Δp| forward per layer group), default cadence
1.007 (IQR 1.005-1.013). The ≤ 3% target holds at the default `diagnostics.every=10`, not with every=1 under ALP.

Usage: python bench/diagnostics_overhead.py [--model runs/demo/sft] [--steps 6] [--algorithms grpo,seq_alp]
       [key=value ...]   (overrides of configs/demo.yaml)
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

from trainer.algorithms import AlgorithmState
from trainer.components import build_components
from trainer.loop import collect_rollouts, learn, seed_everything
from trainer.setup.build import build_config

ROOT = Path(__file__).resolve().parents[1]


def snapshot(c) -> tuple[dict, dict, dict | None]:
    """Model, optimizer and ALP σ state, copied, so `learn` can run again from the same point."""
    return (copy.deepcopy(c.model.state_dict()), copy.deepcopy(c.optimizer.state_dict()),
            copy.deepcopy(c.perturbation.state_dict()) if c.perturbation is not None else None)


def restore(c, state: tuple[dict, dict, dict | None]) -> None:
    model, optim, pert = state
    c.model.load_state_dict(model)
    c.optimizer.load_state_dict(copy.deepcopy(optim))
    if pert is not None:
        c.perturbation.load_state_dict(pert)


def paired(arm: list[float], base: list[float]) -> str:
    ratios = sorted(a / b for a, b in zip(arm, base, strict=True))
    q1, q3 = ratios[len(ratios) // 4], ratios[(3 * len(ratios)) // 4]
    return f"{statistics.median(ratios):.3f} (IQR {q1:.3f}-{q3:.3f})"


def bench(algorithm: str, model: str, steps: int, overrides: list[str]) -> None:
    out = tempfile.mkdtemp(prefix="alprl-diag-bench-")
    base = [f"model.path={model}", f"output_dir={out}", f"algorithm={algorithm}", "eval_tasks=0",
            f"steps={steps + 10}", *overrides]  # the measured steps are neither the first nor the last
    demo = ROOT / "configs" / "demo.yaml"
    default_every = build_config(demo, base).diagnostics.every
    arms = {"none": build_config(demo, [*base, "diagnostics.every=0"]),
            "ordinary": build_config(demo, [*base, f"diagnostics.every={10 ** 6}"]),
            "full": build_config(demo, [*base, "diagnostics.every=1"])}
    if arms["none"].torch_threads:  # as `alprl train` does (the demo runs single-threaded)
        torch.set_num_threads(arms["none"].torch_threads)
    seed_everything(arms["none"].seed)
    c = build_components(arms["none"])
    algos = AlgorithmState()
    rollout_s: list[float] = []
    learn_s: dict[str, list[float]] = {name: [] for name in arms}
    try:
        learn(c, arms["full"], algos, collect_rollouts(c, arms["full"], 1), 1)  # warm-up (first-call costs)
        for step in range(2, steps + 2):
            t0 = time.perf_counter()
            trajs = collect_rollouts(c, arms["none"], step)
            rollout_s.append(time.perf_counter() - t0)
            start = snapshot(c)
            names = list(arms)[step % 3:] + list(arms)[: step % 3]
            for i, name in enumerate(names):
                if i:
                    restore(c, start)
                t0 = time.perf_counter()
                learn(c, arms[name], algos, trajs, step)
                learn_s[name].append(time.perf_counter() - t0)
    finally:
        c.close()
    n = default_every
    learn_s["default"] = [(f + (n - 1) * o) / n for f, o in zip(learn_s["full"], learn_s["ordinary"], strict=True)]
    step_s = {name: [r + t for r, t in zip(rollout_s, ts, strict=True)] for name, ts in learn_s.items()}
    print(f"{algorithm}: rollouts {statistics.median(rollout_s):.2f} s; learn "
          + ", ".join(f"{name} {statistics.median(ts):.2f} s" for name, ts in learn_s.items() if name != "default")
          + f"  ({steps} steps, torch threads {torch.get_num_threads()})")
    for name, label in (("ordinary", "ordinary step"), ("full", "diagnostics step"),
                        ("default", f"default cadence (every {n})")):
        print(f"{algorithm}: {label:28s} / none: learn {paired(learn_s[name], learn_s['none'])}, "
              f"train step {paired(step_s[name], step_s['none'])}  (target <= 1.03)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(ROOT / "runs" / "demo" / "sft"),
                    help="the policy to start from (default: the demo's SFT warm start from `make demo`)")
    ap.add_argument("--steps", type=int, default=6, help="measured steps (a multiple of 3: each arm first as often)")
    ap.add_argument("--algorithms", default="grpo,seq_alp")
    ap.add_argument("overrides", nargs="*", help="key=value overrides of configs/demo.yaml")
    args = ap.parse_args()
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # as alprl's commands: no vLLM INFO chatter
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    if not Path(args.model).is_dir():
        raise SystemExit(f"--model {args.model}: no such directory; run `make demo` first (it builds the SFT warm "
                         "start there) or pass --model <an HF model dir>")
    for algorithm in args.algorithms.split(","):
        bench(algorithm, args.model, args.steps, args.overrides)


if __name__ == "__main__":
    main()
