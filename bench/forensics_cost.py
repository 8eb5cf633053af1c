"""What the mismatch forensics add to a train step (target ≤ 3%): the weight-sync check (rollout.verify_weight_sync)
and the full-vocabulary KL (rollout.logprobs_topk).

The step here: one single-turn rollout of the recipe's batch on the transformers engine (prompts_per_step ×
group_size requests, 64-token prompts, max_new_tokens each) and its update, θ_old log-probs and
`optim.num_minibatches` optimizer steps (`update_policy`) on a synthetic batch of that size (responses of half
`rollout.max_response_tokens`), the recipe's model shape at random init. A real step also runs envs and tools,
which makes it longer, so the ratios printed are upper bounds. Each cost is a paired difference per repetition:
- sync check: `update_weights` with the check and without, on the transformers engine and, with --vllm, on
  vLLM-CPU (an RPC and the GEMM read-back in the worker);
- full-vocabulary KL: the rollout with `logprobs_topk` = --topk against 0 (transformers engine), plus the θ_old
  pass with the KL's observer against without.
Prints figures only; nothing is asserted. Measured 2026-12-07 on the loaded 2-core dev machine (docs/performance.md
"What the mismatch forensics cost"): sync check 0.20% (transformers) and 0.55% (vLLM-CPU) of the step; the
full-vocabulary KL at k = 5, 0.1-2.2% over three runs.

Usage: python bench/forensics_cost.py [--reps 5] [--topk 5] [--vllm] [key=value ...]   (overrides of configs/demo.yaml)
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from agents.engines.base import GenerationRequest
from agents.engines.hf import HFEngine
from agents.models import build_tiny_model, save_pretrained
from agents.tokenizer import train_tokenizer
from agents.trajectory import Trajectory
from trainer.components import build_optimizer
from trainer.diagnostics.full_vocab_kl import FullVocabKL
from trainer.objective.advantages import broadcast_advantages, group_advantages
from trainer.objective.corrections import prepare_corrections
from trainer.objective.logprobs import old_logprobs
from trainer.objective.types import collate
from trainer.setup.build import build_config
from trainer.update import UpdateSettings, minibatch_rows, update_policy

ROOT = Path(__file__).resolve().parents[1]


def synthetic_batch(model, cfg, vocab: int, topk: int):
    r, gen = cfg.rollout, torch.Generator().manual_seed(0)
    n, rows = max(1, r.max_response_tokens // 2), r.prompts_per_step * r.group_size
    top = [(list(range(1, topk + 1)), [-1.0 - 0.5 * j for j in range(topk)])] * n
    trajs = [Trajectory(prompt_ids=torch.randint(1, vocab, (64,), generator=gen).tolist(),
                        response_ids=torch.randint(1, vocab, (n,), generator=gen).tolist(), loss_mask=[1] * n,
                        rollout_logprobs=[-1.0] * n, rollout_topk=top, reward=float(i % 3 == 0),
                        group_id=i // r.group_size)
             for i in range(rows)]
    return collate(trajs, pad_id=0)


def rollout_seconds(engine, cfg, vocab: int) -> float:
    r, gen = cfg.rollout, torch.Generator().manual_seed(1)
    requests = [GenerationRequest(torch.randint(1, vocab, (64,), generator=gen).tolist(), r.max_new_tokens)
                for _ in range(r.prompts_per_step * r.group_size)]
    start = time.perf_counter()
    engine.generate(requests, seed=0)
    return time.perf_counter() - start


def old_pass_seconds(model, cfg, batch, logits_hook) -> float:
    r, start = cfg.rollout, time.perf_counter()
    old_logprobs(model, batch, r.temperature, cfg.optim.micro_batch_size, top_p=r.top_p, top_k=r.top_k,
                 logits_hook=logits_hook)
    return time.perf_counter() - start


def update_step(model, optimizer, cfg, batch) -> float:
    """Seconds of θ_old log-probs + the mini-batch updates (the step's update half)."""
    start = time.perf_counter()
    r = cfg.rollout
    batch.old_logp = old_logprobs(model, batch, r.temperature, cfg.optim.micro_batch_size, top_p=r.top_p,
                                  top_k=r.top_k)
    adv, _ = group_advantages(batch.rewards, batch.group_ids)
    batch.advantages = broadcast_advantages(adv, batch.loss_mask)
    batch.corr_weights, batch.corr_keep, _ = prepare_corrections(cfg.algo, batch)
    settings = UpdateSettings.from_config(cfg)
    for rows in minibatch_rows(len(batch), cfg.optim.num_minibatches, torch.Generator().manual_seed(0)):
        update_policy(model, optimizer, batch, rows, settings)
    return time.perf_counter() - start


def sync_seconds(engine, model, verify: bool) -> float:
    engine.verify_sync = verify
    start = time.perf_counter()
    engine.update_weights(model.named_parameters())
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--topk", type=int, default=5, help="rollout.logprobs_topk for the full-vocabulary KL")
    ap.add_argument("--vllm", action="store_true", help="also measure the check on vLLM-CPU (starts an engine)")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    cfg = build_config(ROOT / "configs" / "demo.yaml", ["eval_tasks=0", *args.overrides])
    torch.set_num_threads(cfg.torch_threads or torch.get_num_threads())
    m, r = cfg.model, cfg.rollout
    tok = train_tokenizer([], vocab_size=m.vocab_size)
    model = build_tiny_model(tok, hidden_size=m.hidden_size, num_layers=m.num_layers, num_heads=m.num_heads,
                             num_kv_heads=m.num_kv_heads, intermediate_size=m.intermediate_size, seed=0)
    params = sum(p.numel() for p in model.parameters())
    optimizer = build_optimizer(model, cfg)
    batch = synthetic_batch(model, cfg, len(tok), args.topk)
    engines = {"hf": HFEngine(model, tok, dtype=r.dtype, temperature=r.temperature, top_p=r.top_p, top_k=r.top_k)}
    if args.vllm:
        from agents.engines.vllm import VLLMEngine

        path = save_pretrained(model, tok, Path(tempfile.mkdtemp(prefix="alprl-forensics-")) / "model")
        engines["vllm"] = VLLMEngine(path, dtype=r.dtype, temperature=r.temperature, top_p=r.top_p, top_k=r.top_k,
                                     seed=cfg.seed, max_model_len=None, quantization=None, kv_cache_dtype="auto",
                                     gpu_memory_utilization=0.5, tensor_parallel_size=1, enable_sleep_mode=False)
    update_step(model, optimizer, cfg, batch)  # warm-up
    update = statistics.median(update_step(model, optimizer, cfg, batch) for _ in range(args.reps))
    sampler = {k: HFEngine(model, tok, dtype=r.dtype, temperature=r.temperature, top_p=r.top_p, top_k=r.top_k,
                           logprobs_topk=k) for k in (0, args.topk)}
    plain_roll, top_roll, plain_old, kl_old = [], [], [], []
    for _ in range(args.reps):
        plain_roll.append(rollout_seconds(sampler[0], cfg, len(tok)))
        top_roll.append(rollout_seconds(sampler[args.topk], cfg, len(tok)))
        plain_old.append(old_pass_seconds(model, cfg, batch, None))
        kl_old.append(old_pass_seconds(model, cfg, batch, FullVocabKL(r.top_p, r.top_k).add_logits))
    rollout = statistics.median(plain_roll)
    step = rollout + update
    print(f"model {params / 1e6:.2f}M parameters, {len(batch)} rows; step: rollout {rollout:.3f} s + update "
          f"{update:.3f} s = {step:.3f} s (medians)")
    extra_roll = statistics.median(t - p for t, p in zip(top_roll, plain_roll, strict=True))
    extra_old = statistics.median(t - p for t, p in zip(kl_old, plain_old, strict=True))
    print(f"full-vocabulary KL (k={args.topk}): rollout +{extra_roll * 1e3:.1f} ms, θ_old pass +{extra_old * 1e3:.1f} "
          f"ms = {(extra_roll + extra_old) / step:.2%} of the step")
    for name, engine in engines.items():
        sync_seconds(engine, model, True)  # warm-up
        plain, checked = [], []
        for _ in range(args.reps):
            plain.append(sync_seconds(engine, model, False))
            checked.append(sync_seconds(engine, model, True))
        extra = statistics.median(c - p for c, p in zip(checked, plain, strict=True))
        print(f"{name}: sync {statistics.median(plain) * 1e3:.1f} ms, with the check "
              f"{statistics.median(checked) * 1e3:.1f} ms; the check costs {extra * 1e3:.1f} ms = "
              f"{extra / step:.2%} of the step")
        engine.close()


if __name__ == "__main__":
    main()
