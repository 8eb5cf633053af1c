"""Engine tokens/s and train tokens/s on the tiny model, each next to a baseline from the same run.

- Engine: KV-cached batched sampling (HFEngine, bf16 and fp32) vs. a naive loop that re-runs the full
  forward for every new token (no cache) — the ratio is what the KV cache buys.
- Train: fwd+bwd tokens/s of the GRPO update on padded batches vs. the same tokens packed into
  length-sorted micro-batches (padding waste is reported as real-token fraction).
Prints figures only; nothing here is asserted in tests.

Usage: python bench/engine_and_train_throughput.py [--batch 64] [--new-tokens 64]
"""

from __future__ import annotations

import argparse
import time

import torch

from agents.engines.base import GenerationRequest
from agents.engines.hf import HFEngine
from agents.models import build_tiny_model, train_tokenizer
from agents.trajectory import Trajectory
from trainer.config.train_config import TrainConfig
from trainer.objective.logprobs import compute_logprobs
from trainer.objective.types import collate

CORPUS = ["Compute 4821 * 937.", "```python\nprint(4821 * 937)\n```", "\nCode execution result: 4517277\n",
          "The answer is \\boxed{4517277}."] * 50


def naive_generate(model, prompts: list[list[int]], new_tokens: int) -> int:
    """Greedy decoding without a KV cache (full forward per token): the baseline."""
    ids = torch.tensor(prompts)
    with torch.no_grad():
        for _ in range(new_tokens):
            logits = model(input_ids=ids, use_cache=False).logits[:, -1]
            ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], dim=1)
    return len(prompts) * new_tokens


def bench_engine(model, tok, batch: int, new_tokens: int) -> None:
    prompts = [tok.encode(f"Compute {1000 + i} * 937.") for i in range(batch)]
    width = min(len(p) for p in prompts)
    prompts = [p[:width] for p in prompts]
    t0 = time.perf_counter()
    n_naive = naive_generate(model, prompts, new_tokens)
    naive = n_naive / (time.perf_counter() - t0)
    print(f"engine  baseline (no KV cache, fp32): {naive:9.0f} tok/s")
    r = TrainConfig().rollout  # the run config's sampler
    for dtype in ("float32", "bfloat16"):
        engine = HFEngine(model, tok, dtype=dtype, temperature=r.temperature, top_p=r.top_p, top_k=r.top_k)
        requests = [GenerationRequest(p, new_tokens) for p in prompts]
        engine.generate(requests[:4], seed=0)  # warm-up
        t0 = time.perf_counter()
        results = engine.generate(requests, seed=0)
        rate = sum(len(r.token_ids) for r in results) / (time.perf_counter() - t0)
        print(f"engine  HFEngine {dtype:8s}:          {rate:9.0f} tok/s   ratio vs baseline {rate / naive:5.1f}x")


def bench_train(model, tok, batch: int) -> None:
    gen = torch.Generator().manual_seed(0)
    trajs = []
    for i in range(batch):
        n = int(torch.randint(16, 200, (1,), generator=gen))
        t = Trajectory(prompt_ids=tok.encode(f"Compute {i} * 937."))
        t.append(torch.randint(4, len(tok), (n,), generator=gen).tolist(), [-1.0] * n)
        trajs.append(t)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)

    def step(groups: list[list[Trajectory]]) -> tuple[float, float]:
        real = padded = 0
        t0 = time.perf_counter()
        for group in groups:
            b = collate(group, tok.pad_token_id)
            logp, _ = compute_logprobs(model, b, 1.0)
            (logp * b.loss_mask).sum().backward()
            real += int(b.attention_mask.sum())
            padded += b.input_ids.numel()
        opt.step()
        opt.zero_grad()
        return real / (time.perf_counter() - t0), real / padded

    size = 16
    shuffled = [trajs[i: i + size] for i in range(0, batch, size)]
    ordered = sorted(trajs, key=lambda t: len(t.response_ids))
    bucketed = [ordered[i: i + size] for i in range(0, batch, size)]
    step(shuffled)  # warm-up
    base, base_frac = step(shuffled)
    fast, fast_frac = step(bucketed)
    print(f"train   random micro-batches:  {base:9.0f} real tok/s  (real-token fraction {base_frac:.2f})")
    print(f"train   length-bucketed:       {fast:9.0f} real tok/s  (real-token fraction {fast_frac:.2f})"
          f"   ratio {fast / base:4.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=64)
    args = parser.parse_args()
    torch.manual_seed(0)
    tok = train_tokenizer(CORPUS, vocab_size=512)
    m = TrainConfig().model  # the run config's tiny model
    model = build_tiny_model(tok, hidden_size=m.hidden_size, num_layers=m.num_layers, num_heads=m.num_heads,
                             num_kv_heads=m.num_kv_heads, intermediate_size=m.intermediate_size, seed=0)
    print(f"tiny model: {sum(p.numel() for p in model.parameters()) / 1e6:.2f} M parameters, "
          f"{torch.get_num_threads()} threads")
    bench_engine(model, tok, args.batch, args.new_tokens)
    bench_train(model, tok, args.batch)


if __name__ == "__main__":
    main()
