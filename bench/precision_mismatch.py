"""Rollout→trainer mismatch and update cost per (sampler dtype / trainer precision) pair (issue: FP16 training).

The FP16 argument (arXiv 2510.26788, "Defeating the training-inference mismatch via FP16"): with fp16 on both
sides the sampler and the trainer round to the same 10-bit mantissa, so their log-probs agree far better than
bf16's 7 bits allow. Here, per pair, one short run from the same SFT start with the same seed (so the same tasks,
and for one sampler dtype the same rollouts; another sampler dtype samples other tokens), the transformers engine
(`rollout.engine=hf`, runs anywhere), no held-out evaluation. Printed as a Markdown table: the k3 KL of the
trainer's θ_old log-probs against the sampler's (rollout_corr/k3_kl, mean over steps), the largest
|log π_train − log μ| over the run's sampled tokens, and the seconds of the update (the mini-batch optimizer
steps of `trainer/loop.py` update, mean per step) beside the fp32 trainer's. On a CPU without native fp16 / bf16
arithmetic those dtypes are converted to fp32 inside each kernel: slower than fp32, which the output says.

Start model: `--model`, else the demo's warm start at runs/demo/sft (configs/demo.yaml) when it exists, else (and
with --tiny) the tests' tiny TIR config with a short SFT in a temp dir; the output names which.

Usage: python bench/precision_mismatch.py [--tiny] [--model DIR] [--steps 2] [--settings NAMES] [key=value ...]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import torch
from mismatch_sweep import extreme, mean_of  # (bench/ is the script's directory)

import trainer.loop
from trainer.runtime.logger import read_metrics
from trainer.setup.build import build_config
from trainer.sft.train import run_sft

ROOT = Path(__file__).resolve().parents[1]
DEMO_SFT = ROOT / "runs" / "demo" / "sft"
sys.path.insert(0, str(ROOT / "tests" / "trainer"))  # the tiny config shared with the trainer tests
from tiny_tir import SMALL  # noqa: E402

SETTINGS: dict[str, list[str]] = {  # sampler dtype / trainer precision
    "bf16 / fp32 (demo)": ["rollout.dtype=bfloat16", "distributed.mixed_precision=fp32"],
    "bf16 / bf16": ["rollout.dtype=bfloat16", "distributed.mixed_precision=bf16"],
    "fp16 / fp16": ["rollout.dtype=float16", "distributed.mixed_precision=fp16"],
    "fp32 / fp32": ["rollout.dtype=float32", "distributed.mixed_precision=fp32"],
}
# 38 SFT steps: the model seldom emits the tool format yet, so its turns are void; as in the demo they are trained
# (and measured) rather than masked
TINY_SFT = ["sft.epochs=1", "env.mask_void_turns=false"]
HEADER = ("| sampler / trainer | KL k3 | max abs dlogp | update s/step | update vs fp32 trainer |\n"
          "|---|---|---|---|---|")


def start_model(args: argparse.Namespace, scratch: Path) -> tuple[Path | None, list[str], str]:
    """(config file, overrides every setting shares, a line saying which start model this is)."""
    if args.model or (DEMO_SFT.is_dir() and not args.tiny):
        model = Path(args.model or DEMO_SFT)
        return (ROOT / "configs" / "demo.yaml", [f"model.path={model}", "rollout.engine=hf"],
                f"start: {model} with configs/demo.yaml")
    tiny = [*SMALL, f"sft.output_dir={scratch / 'sft'}", "torch_threads=1", *TINY_SFT]
    sft = run_sft(build_config(None, tiny), show_progress=False)
    return None, [*tiny, f"model.path={sft}"], f"start: the tiny TIR model (tests' SMALL config), SFT'd in {sft}"


@contextmanager
def timed_updates(seconds: list[float]):
    """Record the wall time of each `trainer.loop.update` call (the step's mini-batch optimizer steps only, not
    the rollout, θ_old log-probs or engine sync, which the loop's perf/update_s includes)."""
    original = trainer.loop.update

    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            seconds.append(time.perf_counter() - start)

    trainer.loop.update = timed
    try:
        yield
    finally:
        trainer.loop.update = original


def max_abs_dlogp(records: list[dict]) -> float:
    """max |log π_train(θ_old) − log μ| over the run's tokens, from the token ratio's min and max (r_mis)."""
    top = extreme(records, "ratio/mis_token/max", max)
    low = extreme(records, "ratio/mis_token/min", min)
    return max(abs(math.log(top)), abs(math.log(low))) if top > 0 and low > 0 else float("nan")


def run_setting(config: Path | None, shared: list[str], setting: list[str], steps: int) -> dict[str, float]:
    out = Path(tempfile.mkdtemp(prefix="alprl-precision-"))
    cfg = build_config(config, [*shared, f"output_dir={out}", f"steps={steps}", f"save_every={steps}",
                                "eval_tasks=0", *setting])
    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    seconds: list[float] = []
    with timed_updates(seconds):
        trainer.loop.train(cfg, show_progress=False)
    records = read_metrics(out)
    return {"k3": mean_of(records, "rollout_corr/k3_kl"), "dlogp": max_abs_dlogp(records),
            "update_s": statistics.fmean(seconds), "overflow": mean_of(records, "actor/fp16_overflow")}


def cpu_half_note() -> str:
    """Whether this CPU computes fp16 / bf16 natively (x86 flags) or converts to fp32 inside torch's kernels."""
    if torch.cuda.is_available():
        return f"device: {torch.cuda.get_device_name()}"
    flags = set()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        flags = {f for line in cpuinfo.read_text().splitlines() if line.startswith("flags") for f in line.split()}
    fp16 = "native" if flags & {"avx512_fp16", "amx_fp16"} else "emulated (no avx512_fp16/amx_fp16)"
    bf16 = "native" if flags & {"avx512_bf16", "amx_bf16"} else "emulated (no avx512_bf16/amx_bf16)"
    return f"CPU ({torch.backends.cpu.get_cpu_capability()}): fp16 {fp16}, bf16 {bf16}"


def row(name: str, result: dict[str, float], fp32_s: float | None) -> str:
    relative = f"{result['update_s'] / fp32_s:.2f}x" if fp32_s else "n/a"
    overflow = f" (overflow: {result['overflow']:.0%} of optimizer steps)" if result["overflow"] > 0 else ""
    return (f"| {name}{overflow} | {result['k3']:.3g} | {result['dlogp']:.3g} | {result['update_s']:.2f} "
            f"| {relative} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="the tests' tiny model with a short SFT (a quick check)")
    ap.add_argument("--model", default="", help=f"the SFT start (default: {DEMO_SFT} when it exists)")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--settings", default="", help="comma-separated names of SETTINGS (default: all)")
    ap.add_argument("overrides", nargs="*", help="key=value overrides for every setting")
    args = ap.parse_args()
    chosen = [s.strip() for s in args.settings.split(",") if s.strip()] or list(SETTINGS)
    if unknown := [s for s in chosen if s not in SETTINGS]:
        raise SystemExit(f"--settings: unknown {unknown}; valid: {list(SETTINGS)}")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    config, shared, which = start_model(args, Path(tempfile.mkdtemp(prefix="alprl-precision-sft-")))
    shared += args.overrides
    results = {}
    for name in chosen:
        start = time.perf_counter()
        results[name] = run_setting(config, shared, SETTINGS[name], args.steps)
        print(f"{name}: {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    fp32 = [r["update_s"] for n, r in results.items() if n.split(" / ")[1].startswith("fp32")]  # fp32 trainers
    baseline = statistics.fmean(fp32) if fp32 else None
    print(f"{which}; {args.steps} steps per setting, seed 0, rollout.engine=hf; {cpu_half_note()}\n\n{HEADER}")
    print("\n".join(row(name, result, baseline) for name, result in results.items()))


if __name__ == "__main__":
    main()
