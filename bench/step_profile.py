"""One RL step, stage by stage: where a step of a recipe spends its seconds.

    python bench/step_profile.py [--config configs/math_tiny.yaml] [--steps 10] [--out FILE.json] [key=value ...]

Runs `alprl train` in this process (the CLI's own entry point, so torch threads and everything else are set as a
user's run sets them; eval_tasks=0, no checkpoints but the last) with a timer around each stage
function the step calls, looked up where the loop calls it (trainer/loop.py's module names and the Components
method), so the trainer runs unchanged:

    rollouts          collect_step: the engine's sampling and the env steps of every episode
      env steps       the agent taking each sampled turn and the env stepping it (sandbox runs, grading), summed
                      over the rollout's episode threads (can exceed the rollout's wall when they overlap)
    old log-probs     π_θold's forward over the batch (old_logprobs)
    reference         the frozen start's forward for the KL term (reference_logprobs; 0 without a KL term)
    advantages        compute_advantages
    corrections       prepare_corrections: the detached IS weights and rejection masks
    mismatch report   mismatch_report: the sampler-vs-trainer diagnostics on the batch
    optimizer steps   update_policy: forward, loss, backward, step per mini-batch
    policy drift      policy_drift: the diagnostic steps' extra forwards (every diagnostics.every steps)
    weight sync       Components.sync_engine: the trainer's weights into the engine
    step              train_step: the whole step

Printed: mean seconds per step over steps 2..N (step 1 pays for warm-up) and each stage's share of the step; the
rest is what no timer covers (metrics, logging, the Batch's collation). key=value overrides are alprl config keys.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
import trainer.loop as loop  # noqa: E402
from agents import rollout  # noqa: E402
from app import cli  # noqa: E402
from trainer.components import Components  # noqa: E402
from trainer.config.errors import ConfigError  # noqa: E402
from trainer.setup.build import build_config  # noqa: E402

STAGES = [  # (row label, owner object, attribute)
    ("rollouts", loop, "collect_step"),
    ("  env steps (thread-seconds)", rollout._Episode, "act"),
    ("old log-probs", loop, "old_logprobs"),
    ("reference log-probs", loop, "reference_logprobs"),
    ("advantages", loop, "compute_advantages"),
    ("corrections", loop, "prepare_corrections"),
    ("mismatch report", loop, "mismatch_report"),
    ("optimizer steps", loop, "update_policy"),
    ("policy drift", loop, "policy_drift"),
    ("weight sync", Components, "sync_engine"),
]


class StageTimes:
    """Seconds per (step, stage), added up across threads."""

    def __init__(self) -> None:
        self.seconds: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.step = 0
        self.lock = threading.Lock()

    def timed(self, label: str, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                with self.lock:
                    self.seconds[self.step][label] += time.perf_counter() - start
        return wrapper

    def stepping(self, fn):
        @functools.wraps(fn)
        def wrapper(c, cfg, algos, step, *args, **kwargs):
            self.step = step
            start = time.perf_counter()
            result = fn(c, cfg, algos, step, *args, **kwargs)
            self.seconds[step]["step"] += time.perf_counter() - start
            return result
        return wrapper


def instrument(times: StageTimes) -> None:
    for label, owner, name in STAGES:
        setattr(owner, name, times.timed(label, getattr(owner, name)))
    loop.train_step = times.stepping(loop.train_step)


def summarize(times: StageTimes) -> dict:
    steps = sorted(s for s in times.seconds if s > 0 and "step" in times.seconds[s])
    steady = steps[1:] or steps
    labels = [label for label, _, _ in STAGES] + ["step"]
    mean = {label: statistics.fmean(times.seconds[s].get(label, 0.0) for s in steady) for label in labels}
    covered = sum(v for label, v in mean.items() if label not in ("step",) and not label.startswith("  "))
    return {"steps": steady, "mean_s": mean, "uncovered_s": mean["step"] - covered,
            "per_step": {s: dict(times.seconds[s]) for s in steps}}


def table(summary: dict) -> str:
    step = summary["mean_s"]["step"]
    lines = ["| stage | s per step | share |", "|---|---|---|"]
    for label, seconds in summary["mean_s"].items():
        if label != "step":
            lines.append(f"| {label} | {seconds:.3f} | {seconds / step:.0%} |")
    lines.append(f"| rest (metrics, logging, collation) | {summary['uncovered_s']:.3f} | "
                 f"{summary['uncovered_s'] / step:.0%} |")
    lines.append(f"| step | {step:.3f} | 100% |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="configs/math_tiny.yaml", help="the recipe (default configs/math_tiny.yaml)")
    p.add_argument("--steps", type=int, default=10, help="RL steps (default 10; steps 2..N are averaged)")
    p.add_argument("--out", default=None, help="write the per-step seconds and the summary to this JSON file")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="alprl config overrides")
    args = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="step_profile_"))
    overrides = [*args.overrides, f"steps={args.steps}", "eval_tasks=0", f"save_every={args.steps}",
                 f"output_dir={work}"]
    try:
        build_config(args.config, overrides)
    except ConfigError as exc:
        print(f"step_profile: error: {exc}", file=sys.stderr)
        return 2
    times = StageTimes()
    instrument(times)
    with contextlib.redirect_stdout(sys.stderr):  # the run's final metrics: this script prints its own table
        rc = cli.main(["train", "--config", args.config, "--no-progress", *overrides])
    if rc != 0:
        print(f"step_profile: error: alprl train exited with {rc}", file=sys.stderr)
        return 1
    summary = summarize(times)
    print(f"bench/step_profile.py {args.config} {' '.join(args.overrides)}: mean of steps "
          f"{summary['steps'][0]}..{summary['steps'][-1]}\n{table(summary)}")
    if args.out:
        Path(args.out).write_text(json.dumps({"config": args.config, "overrides": args.overrides,
                                              "date": time.strftime("%Y-%m-%d"), **summary}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
