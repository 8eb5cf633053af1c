#!/usr/bin/env bash
# The GPU check (docs/scaling.md): on a machine with CUDA, torch, vllm and this project's dependencies installed
# (no network needed; copy the tree over), in under 8 minutes:
#   1. builds a random Qwen2-shaped model of about 0.5B parameters with the project's tokenizer;
#   2. runs 3 RL steps (GRPO, TIR math, local sandbox) with a vLLM CUDA sampler in bf16 and the FSDP2 trainer
#      (fp32 master weights, bf16 compute) on one rank, and on two ranks under torchrun when there are two GPUs;
#   3. prints the bf16-sampler vs fp32-trainer KL, rollout tokens/s, step time and peak memory of each run.
# Usage: bash bench/gpu_check.sh [OUT_DIR]        (PYTHON=... picks the interpreter; default python)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/alprl_gpu_check}
PY=${PYTHON:-python}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
"$PY" - <<'PYCHECK'
import importlib.util, sys
import torch
missing = [m for m in ("vllm", "transformers", "gymnasium", "fastapi") if importlib.util.find_spec(m) is None]
if missing or not torch.cuda.is_available():
    sys.exit(f"gpu_check: needs CUDA and {', '.join(missing) or 'nothing more'}; torch {torch.__version__}, "
             f"CUDA available: {torch.cuda.is_available()}")
print(f"torch {torch.__version__}, {torch.cuda.device_count()} GPU(s): {torch.cuda.get_device_name(0)}")
PYCHECK
rm -rf "$OUT" && mkdir -p "$OUT"
timeout 180 "$PY" bench/gpu_check.py build "$OUT/model"
COMMON=(model.path="$OUT/model" rollout.engine=vllm rollout.dtype=bfloat16 rollout.enable_sleep_mode=true
        rollout.gpu_memory_utilization=0.3 rollout.max_model_len=2048 rollout.prompts_per_step=16
        rollout.group_size=8 rollout.max_new_tokens=256 rollout.max_response_tokens=768 optim.micro_batch_size=16
        optim.lr=1e-6 distributed.mixed_precision=bf16 steps=3 save_every=3 eval_tasks=0 algorithm=grpo)
timeout 240 "$PY" -m app.cli train --no-progress "${COMMON[@]}" output_dir="$OUT/one_rank" > "$OUT/one_rank.log" 2>&1 \
    || { tail -30 "$OUT/one_rank.log"; exit 1; }
RUNS=("$OUT/one_rank")
if [ "$("$PY" -c 'import torch; print(torch.cuda.device_count())')" -ge 2 ]; then
    timeout 240 "$PY" -m torch.distributed.run --nproc-per-node 2 -m app.cli train --no-progress "${COMMON[@]}" \
        distributed.world_size=2 output_dir="$OUT/two_ranks" > "$OUT/two_ranks.log" 2>&1 \
        || { tail -30 "$OUT/two_ranks.log"; exit 1; }
    RUNS+=("$OUT/two_ranks")
fi
"$PY" bench/gpu_check.py summary "${RUNS[@]}"
