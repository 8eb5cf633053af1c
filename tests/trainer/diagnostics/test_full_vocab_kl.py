"""The full-vocabulary KL from the sampler's top-k and a tail bucket: hand-computed on a 5-token vocabulary, and the
trainer's side under a replayed truncation (on real engines: tests/agents/test_full_vocab_kl_engines.py)."""

from __future__ import annotations

import math

import pytest
import torch

from trainer.diagnostics.full_vocab_kl import topk_tail_kl, trainer_topk_logprobs

LN = math.log
F64 = torch.float64
MU = [0.5, 0.2, 0.15, 0.1, 0.05]  # the sampler's distribution μ over a 5-token vocabulary
PI = [0.4, 0.3, 0.1, 0.1, 0.1]  # the trainer's π


def test_kl_with_tail_hand_computed():
    # top-2 of μ: S = {0, 1}; μ_T = 1 − 0.7 = 0.3, π_T = 1 − 0.7 = 0.3
    # KL = 0.5 ln(0.5/0.4) + 0.2 ln(0.2/0.3) + 0.3 ln(0.3/0.3) = 0.111572 − 0.081093 + 0 = 0.030479
    mu, pi = torch.tensor([[LN(0.5), LN(0.2)]], dtype=F64), torch.tensor([[LN(0.4), LN(0.3)]], dtype=F64)
    assert topk_tail_kl(mu, pi).item() == pytest.approx(0.5 * LN(1.25) + 0.2 * LN(2 / 3), abs=1e-12)
    assert topk_tail_kl(mu, pi).item() == pytest.approx(0.0304788, abs=1e-6)
    # all five: the exact KL 0.111572 − 0.081093 + 0.15 ln 1.5 + 0 + 0.05 ln 0.5 = 0.056641, above the estimate
    full = topk_tail_kl(torch.tensor(MU, dtype=F64).log()[None], torch.tensor(PI, dtype=F64).log()[None]).item()
    assert full == pytest.approx(sum(m * LN(m / p) for m, p in zip(MU, PI, strict=True)), abs=1e-12)
    assert full == pytest.approx(0.0566412, abs=1e-6) and full > 0.0304788
    # a sampler reporting fewer than k (−inf) and identical distributions: 0
    mu3 = torch.tensor([[LN(0.5), LN(0.2), float("-inf")]])
    assert topk_tail_kl(mu3, torch.tensor([[LN(0.5), LN(0.2), -3.0]])).item() == pytest.approx(0.0, abs=1e-12)


def test_trainer_side_replays_truncation_and_counts_the_sampler_top_k_in():
    logits = torch.tensor(PI).log()[None, None]  # (1, 1, 5)
    # the sampler (top-k 2) reported tokens 0 and 2; the trainer's own top-2 is {0, 1}: 2 is counted in,
    # so π over {0, 1, 2} = [0.4, 0.3, 0.1] / 0.8 and the ids [0, 2] read 0.5 and 0.125
    ids, present = torch.tensor([[[0, 2]]]), torch.tensor([[[True, True]]])
    got = trainer_topk_logprobs(logits, ids, present, top_p=1.0, top_k=2).exp()
    assert got.flatten().tolist() == pytest.approx([0.5, 0.125])
    full = trainer_topk_logprobs(logits, ids, present, top_p=1.0, top_k=0).exp()  # no truncation: π itself
    assert full.flatten().tolist() == pytest.approx([0.4, 0.1])
