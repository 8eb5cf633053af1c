"""Which dialled mismatch makes the off-policy question live on the demo recipe (issue: choose a regime first).

For each setting of the mismatch knobs (docs/architecture.md "Mismatch on purpose": sampler dtype, fake-quantized
sampler weights, policy lag, mini-batch staleness) one short run of the demo recipe with the same seed, the same
SFT start and the same tasks, under one algorithm (default grpo), no held-out evaluation. Printed per setting, as
a Markdown table: the rollout→trainer KL (k3, mean over steps), the r_mis = π_train(θ_old)/μ envelope (P2 and P98
of the token ratios, mean over steps, and the most extreme min / max over the run), on the last mini-batch (the
most off-policy one) the P98 of r_byp = π_θ/μ and the fraction of the loss ratio's tokens outside the clip band,
the mean grad norm and the reward of the first and last step.
A heavy tail is an r_mis P98 far above 1 (or P2 far below) next to a clip fraction that grows. Prints figures only;
nothing here is asserted in tests.

Usage: python bench/mismatch_sweep.py [--model runs/demo/sft] [--steps 8] [--algorithm grpo] [--out FILE.md]
       [key=value ...]   (overrides of configs/demo.yaml for every setting)
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

from trainer.loop import train
from trainer.runtime.logger import read_metrics
from trainer.setup.build import build_config

ROOT = Path(__file__).resolve().parents[1]

SETTINGS: dict[str, list[str]] = {
    "fp32 sampler": ["rollout.dtype=float32"],
    "bf16 sampler (demo)": [],
    "bf16 + int8": ["rollout.sampler_quant=int8"],
    "bf16 + fp8 e4m3": ["rollout.sampler_quant=fp8"],
    "bf16 + int4": ["rollout.sampler_quant=int4"],
    "bf16 + int4 g32": ["rollout.sampler_quant=int4", "rollout.sampler_quant_group=32"],
    "bf16 + int3": ["rollout.sampler_quant=int3"],
    "bf16 + lag 1": ["rollout.policy_lag=1"],
    "bf16 + lag 2": ["rollout.policy_lag=2"],
    "bf16 + lag 4": ["rollout.policy_lag=4"],
    "bf16 + 4 mini-batches": ["optim.num_minibatches=4", "optim.micro_batch_size=32"],
}


def mean_of(records: list[dict], key: str) -> float:
    values = [r[key] for r in records if isinstance(r.get(key), int | float)]
    return statistics.fmean(values) if values else float("nan")


def extreme(records: list[dict], key: str, pick) -> float:
    values = [r[key] for r in records if isinstance(r.get(key), int | float)]
    return pick(values) if values else float("nan")


def row(name: str, records: list[dict]) -> str:
    cells = [mean_of(records, "rollout_corr/k3_kl"),
             mean_of(records, "diag/ratio_mis/p2"), mean_of(records, "diag/ratio_mis/p98"),
             extreme(records, "diag/ratio_mis/min", min), extreme(records, "diag/ratio_mis/max", max),
             mean_of(records, "diag/ratio_byp_last/p98"), mean_of(records, "diag/ratio_loss_last/clip_frac"),
             mean_of(records, "actor/grad_norm"), records[0]["rollout/reward"], records[-1]["rollout/reward"]]
    return f"| {name} | " + " | ".join(f"{c:.3g}" for c in cells) + " |"


HEADER = ("| setting | KL k3 | r_mis P2 | r_mis P98 | r_mis min | r_mis max | r_byp P98 (last mb) | clip frac (last mb) "
          "| grad norm "
          "| reward first | reward last |\n|---|" + "---|" * 10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(ROOT / "runs" / "demo" / "sft"),
                    help="the SFT start (default: the demo's warm start from `make demo`)")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--algorithm", default="grpo")
    ap.add_argument("--settings", default="", help="comma-separated names of SETTINGS to run (default: all)")
    ap.add_argument("--out", default="", help="also write the table to this Markdown file")
    ap.add_argument("--render", default="", help="comma-separated run dirs of finished settings: print the table "
                    "from them instead of training")
    ap.add_argument("overrides", nargs="*", help="key=value overrides of configs/demo.yaml")
    args = ap.parse_args()
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    if not Path(args.model).is_dir():
        raise SystemExit(f"--model {args.model}: no such directory; run `make demo` first or pass --model <dir>")
    chosen = [s.strip() for s in args.settings.split(",") if s.strip()] or list(SETTINGS)
    unknown = [s for s in chosen if s not in SETTINGS]
    if unknown:
        raise SystemExit(f"--settings: unknown {unknown}; valid: {list(SETTINGS)}")
    if args.render:  # the table again from finished runs, in SETTINGS order
        dirs = [Path(d) for d in args.render.split(",")]
        print(HEADER)
        for name, run in zip(chosen, dirs, strict=True):
            print(row(name, read_metrics(run)))
        return
    lines = [f"{args.algorithm}, {args.steps} steps of configs/demo.yaml from {args.model}, seed 0", "", HEADER]
    print("\n".join(lines), flush=True)
    for name in chosen:
        out = tempfile.mkdtemp(prefix="alprl-sweep-")
        cfg = build_config(ROOT / "configs" / "demo.yaml",
                           [f"model.path={args.model}", f"output_dir={out}", f"algorithm={args.algorithm}",
                            f"steps={args.steps}", "eval_tasks=0", f"save_every={args.steps}",
                            *SETTINGS[name],
                            *args.overrides])
        if cfg.torch_threads:
            import torch

            torch.set_num_threads(cfg.torch_threads)
        train(cfg, show_progress=False)
        lines.append(row(name, read_metrics(out)))
        print(lines[-1], flush=True)
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
