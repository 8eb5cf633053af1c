"""Helpers of bench/gpu_check.sh: `build DIR` writes a random Qwen2-shaped model of about 0.5B parameters with the
project's tokenizer; `summary RUN...` prints what the check reports from each run's metrics.jsonl.

Nothing here is asserted in tests; the shell script is run by hand on a GPU machine (docs/scaling.md).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

# Qwen2-shaped, about 0.49B parameters with the project's ~1k-token vocabulary (32 × 15.2M per layer)
SHAPE = {"hidden_size": 1024, "num_layers": 32, "num_heads": 16, "num_kv_heads": 4, "intermediate_size": 4096}
CONTEXT = 2048


def build(out: Path) -> None:
    from agents.models import build_tiny_model, save_pretrained
    from trainer.setup.build import build_config
    from trainer.sft.train import prepare_data

    cfg = build_config(None, ["sft.num_examples=200"])
    tokenizer, _, _ = prepare_data(cfg, show_progress=False)  # the tokenizer `alprl sft` would train
    model = build_tiny_model(tokenizer, **SHAPE, max_position_embeddings=CONTEXT, seed=0)
    save_pretrained(model, tokenizer, out)
    print(f"model: {sum(p.numel() for p in model.parameters()) / 1e9:.3f} B parameters in {out}")


def summary(runs: list[Path]) -> None:
    for run in runs:
        records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        steady = records[1:] or records  # step 1 includes CUDA and vLLM warm-up

        def mean(key: str, steady: list[dict] = steady) -> float:
            return statistics.fmean(r[key] for r in steady if key in r)

        print(f"{run.name}: {len(records)} steps | rollout->trainer KL {mean('rollout_corr/kl'):.3e} "
              f"(k3 {mean('rollout_corr/k3_kl'):.3e}) | rollout {mean('perf/rollout_tokens_per_s'):.0f} tok/s | "
              f"step {mean('perf/step_s'):.1f} s (rollout {mean('perf/rollout_s'):.1f} s, update+sync "
              f"{mean('perf/update_s'):.1f} s) | peak {max(r['perf/peak_memory_gib'] for r in records):.1f} GiB "
              f"| grad norm {mean('actor/grad_norm'):.3g}")


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in ("build", "summary"):
        raise SystemExit("usage: python bench/gpu_check.py build DIR | summary RUN_DIR...")
    if sys.argv[1] == "build":
        build(Path(sys.argv[2]))
    else:
        summary([Path(p) for p in sys.argv[2:]])
