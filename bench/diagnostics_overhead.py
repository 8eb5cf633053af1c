"""What the diagnostics that cost extra forwards add to a train step of the demo recipe (target ≤ 3%).

A train step is its rollouts (vLLM on CPU, the TIR env, the sandbox) followed by `trainer.loop.learn`
(advantages, θ_old log-probs, corrections, the mini-batch updates, weight sync). `diagnostics.every` decides
whether `learn` also runs the Table 5 ratios, ALP's |Δp| per layer group and the after-update policy KL and
entropy. Each measured step collects one rollout batch, then runs `learn` on it twice from the same model,
optimizer and σ state (restored in between), with diagnostics on and off, the order alternating between steps; the
second run's state is kept. Printed per algorithm: the median times, the ratio of `learn` alone (the harsher
figure) and of the whole step (rollout time + learn), both as paired medians of per-step ratios. The free
metrics (mismatch, loss, σ) and the scatter sample (`diagnostics.scatter_every`) run in both arms. Prints figures
only; nothing here is asserted in tests.

Measured 2026-12-01 on the 2-core dev machine: see docs/architecture.md ("Metrics semantics") for the figures.

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

from trainer.algorithms import AlgorithmState
from trainer.components import build_components
from trainer.config import build_config
from trainer.loop import collect_rollouts, learn, seed_everything

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


def paired(on: list[float], off: list[float]) -> str:
    ratios = sorted(a / b for a, b in zip(on, off, strict=True))
    q1, q3 = ratios[len(ratios) // 4], ratios[(3 * len(ratios)) // 4]
    return f"{statistics.median(ratios):.3f} paired median (IQR {q1:.3f}-{q3:.3f})"


def bench(algorithm: str, model: str, steps: int, overrides: list[str]) -> None:
    out = tempfile.mkdtemp(prefix="alprl-diag-bench-")
    base = [f"model.path={model}", f"output_dir={out}", f"algorithm={algorithm}", "eval_tasks=0",
            f"steps={steps + 1}", *overrides]
    cfg_on = build_config(ROOT / "configs" / "demo.yaml", [*base, "diagnostics.every=1"])
    cfg_off = build_config(ROOT / "configs" / "demo.yaml", [*base, "diagnostics.every=0"])
    seed_everything(cfg_on.seed)
    c = build_components(cfg_on)
    algos = AlgorithmState()
    rollout_s, on_s, off_s = [], [], []
    try:
        learn(c, cfg_on, algos, collect_rollouts(c, cfg_on, 1), 1)  # warm-up (first-call costs)
        for step in range(2, steps + 2):
            t0 = time.perf_counter()
            trajs = collect_rollouts(c, cfg_on, step)
            rollout_s.append(time.perf_counter() - t0)
            start = snapshot(c)
            arms = [(cfg_on, on_s), (cfg_off, off_s)]
            for i, (cfg, times) in enumerate(arms if step % 2 else arms[::-1]):
                if i:
                    restore(c, start)
                t0 = time.perf_counter()
                learn(c, cfg, algos, trajs, step)
                times.append(time.perf_counter() - t0)
    finally:
        c.close()
    step_on = [r + t for r, t in zip(rollout_s, on_s, strict=True)]
    step_off = [r + t for r, t in zip(rollout_s, off_s, strict=True)]
    print(f"{algorithm:8s} rollouts {statistics.median(rollout_s):6.2f} s   learn: diagnostics on "
          f"{statistics.median(on_s):5.2f} s, off {statistics.median(off_s):5.2f} s   ({steps} steps)")
    print(f"{algorithm:8s} ratio learn on/off: {paired(on_s, off_s)}")
    print(f"{algorithm:8s} ratio train step on/off: {paired(step_on, step_off)}  (target <= 1.03)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(ROOT / "runs" / "demo" / "sft"),
                    help="the policy to start from (default: the demo's SFT warm start from `make demo`)")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--algorithms", default="grpo,seq_alp")
    ap.add_argument("overrides", nargs="*", help="key=value overrides of configs/demo.yaml")
    args = ap.parse_args()
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # as alprl's commands: no vLLM INFO chatter
    if not Path(args.model).is_dir():
        raise SystemExit(f"--model {args.model}: no such directory; run `make demo` first (it builds the SFT warm "
                         "start there) or pass --model <an HF model dir>")
    for algorithm in args.algorithms.split(","):
        bench(algorithm, args.model, args.steps, args.overrides)


if __name__ == "__main__":
    main()
