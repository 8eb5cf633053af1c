"""Short head-to-head of algorithm presets from one SFT start: held-out success, ratio P98, mismatch KL.

    python bench/compare_algorithms.py [--config configs/demo.yaml] [--algorithms grpo,seq_alp,mipu,quatro,sprpo]
                                       [--steps 15] [--out runs/compare] [key=value ...]

Every preset trains `--steps` RL steps from the same warm start (`alprl sft` of the config, cached) with the same
seed, so the runs see the same tasks; the config's sandbox URL is used, or a local service is started. Columns:
- success: held-out success after the last step (`eval/success`; the SFT start is measured once, step 0 of the
  first run);
- ratio P98 (mean / max over steps): 98th percentile of the token-level training/inference ratio
  π_train(θ_old)/μ on sampled tokens (`ratio/mis_token/p98`), the rollout–training mismatch r_mis (for ALP the
  paper tracks the loss ratio π_θ,δ/μ instead: `diag/ratio_loss/p98`, trainer/ratio_diagnostics.py);
- KL: `rollout_corr/kl`, the sampler → trainer KL estimate on sampled tokens (mean over steps);
- PPO KL: `actor/ppo_kl`, how far the update moved the policy (mean over steps);
- min/step: wall time per RL step (MIPU samples validation groups too).
Writes `<out>/summary.json` and prints the table with the ratio of each figure to the first algorithm's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from sandbox.local_server import serve_in_background  # noqa: E402
from trainer.config import build_config  # noqa: E402
from trainer.loop import train  # noqa: E402
from trainer.sft import run_sft  # noqa: E402


def run_one(config: str, overrides: list[str], algorithm: str, steps: int, out: Path, at_start: bool) -> dict:
    cfg = build_config(config, [*overrides, f"algorithm={algorithm}", f"steps={steps}", f"save_every={steps}",
                                f"eval_every={steps}", f"output_dir={out / algorithm}"])
    start = time.monotonic()
    results = train(cfg, show_progress=False, evaluate_at_start=at_start)
    minutes = (time.monotonic() - start) / 60
    records = [json.loads(line) for line in (out / algorithm / "metrics.jsonl").read_text().splitlines()]
    per_step = [r for r in records if r["step"] > 0]

    def series(key: str) -> list[float]:
        return [r[key] for r in per_step if r.get(key) is not None]

    p98 = series("ratio/mis_token/p98")
    row = {"algorithm": algorithm, "success": results[-1].metrics["eval/success"],
           "ratio_p98_mean": statistics.fmean(p98), "ratio_p98_max": max(p98),
           "kl": statistics.fmean(series("rollout_corr/kl")), "ppo_kl": statistics.fmean(series("actor/ppo_kl")),
           "reward": statistics.fmean(series("rollout/reward")), "min_per_step": minutes / steps}
    if at_start:
        row["sft_success"] = next(r["eval/success"] for r in records if r["step"] == 0)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="configs/demo.yaml")
    ap.add_argument("--algorithms", default="grpo,seq_alp,mipu,quatro,sprpo")
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--out", default="runs/compare")
    ap.add_argument("overrides", nargs="*", help="key=value config overrides for every run")
    args = ap.parse_args(argv)
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # as the alprl CLI: keep vLLM's per-step INFO out
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    base = build_config(args.config, args.overrides)
    run_sft(base, show_progress=False)  # cached: every run starts from the same warm start
    rows = []
    with serve_in_background(workers=2) as url:
        overrides = [*args.overrides] + ([] if base.env.sandbox_url else [f"env.sandbox_url={url}"])
        for i, name in enumerate(args.algorithms.split(",")):
            rows.append(run_one(args.config, overrides, name.strip(), args.steps, out, at_start=i == 0))
            print(json.dumps(rows[-1]), flush=True)
    (out / "summary.json").write_text(json.dumps(rows, indent=2))
    ref = rows[0]
    print(f"\n{args.steps} RL steps each from the SFT start (held-out success {ref['sft_success']:.3f}), "
          f"config {args.config}; ratios are against {ref['algorithm']}")
    print(f"{'algorithm':10s} {'success':>8s} {'ratio P98 mean':>15s} {'P98 max':>8s} {'KL':>10s} {'PPO KL':>10s} "
          f"{'min/step':>9s}")
    for r in rows:
        print(f"{r['algorithm']:10s} {r['success']:8.3f} {r['ratio_p98_mean']:15.4f} {r['ratio_p98_max']:8.4f} "
              f"{r['kl']:10.2e} {r['ppo_kl']:10.2e} {r['min_per_step']:9.2f}   "
              f"(success x{r['success'] / max(ref['success'], 1e-9):.2f}, "
              f"time x{r['min_per_step'] / ref['min_per_step']:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
