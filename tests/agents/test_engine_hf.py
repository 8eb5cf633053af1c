"""The transformers engine against the trainer's own log-prob recomputation (real tiny model)."""

import pytest
import torch
from engine_settings import HF_FP32, hf_engine_kwargs
from tool_script import recompute, varied_requests

from agents.engines.base import GenerationRequest
from agents.engines.hf import HFEngine
from agents.engines.sampling import truncate_logits


@pytest.mark.parametrize("dtype,tol", [("float32", 2e-4), ("bfloat16", 0.5)])
def test_logprobs_match_trainer(model_tok, dtype, tol):
    model, tok = model_tok
    engine = HFEngine(model, tok, **hf_engine_kwargs(dtype=dtype))
    requests = varied_requests(tok)
    results = engine.generate(requests, seed=1)
    batch, logp = recompute(model, tok, requests, results)
    diff = ((logp - batch.rollout_logp).abs() * batch.loss_mask)
    assert diff.max().item() < tol
    if dtype == "bfloat16":  # the sampler/trainer mismatch exists, on purpose
        assert diff.sum().item() > 0


def test_sampling_is_seeded_and_greedy_is_deterministic(model_tok):
    model, tok = model_tok
    engine = HFEngine(model, tok, **HF_FP32)
    a = engine.generate(varied_requests(tok), seed=3)
    b = engine.generate(varied_requests(tok), seed=3)
    assert [r.token_ids for r in a] == [r.token_ids for r in b]
    g1 = engine.generate(varied_requests(tok), greedy=True)
    g2 = engine.generate(varied_requests(tok), greedy=True, seed=99)
    assert [r.token_ids for r in g1] == [r.token_ids for r in g2]


def test_a_seeded_request_samples_the_same_tokens_whatever_else_is_in_the_batch(model_tok):
    # data-parallel ranks each sample a share of a step's episodes: each must get what one process samples
    model, tok = model_tok
    engine = HFEngine(model, tok, **HF_FP32)
    requests = varied_requests(tok)
    seeds = [101 + i for i in range(len(requests))]
    whole = engine.generate(requests, seed=seeds)
    half = len(requests) // 2
    split = engine.generate(requests[:half], seed=seeds[:half]) + engine.generate(requests[half:], seed=seeds[half:])
    assert [r.token_ids for r in split] == [r.token_ids for r in whole]
    other = engine.generate(requests, seed=[s + 1 for s in seeds])
    assert [r.token_ids for r in other] != [r.token_ids for r in whole]


def test_stop_strings_and_length(model_tok):
    model, tok = model_tok
    engine = HFEngine(model, tok, **HF_FP32)
    results = engine.generate(varied_requests(tok, max_new=40), seed=0)
    assert all(len(r.token_ids) == 40 and r.finish_reason == "length" for r in results
               if r.finish_reason == "length")
    # stop on whatever the first sampled token decodes to: generation must end right after it
    first = tok.decode(results[0].token_ids[:1])
    if first.strip():
        stopped = engine.generate(varied_requests(tok, max_new=40, stops=[first]), seed=0)
        assert stopped[0].finish_reason == "stop" and len(stopped[0].token_ids) == 1


def test_update_weights_changes_outputs(model_tok):
    model, tok = model_tok
    engine = HFEngine(model, tok, **HF_FP32)
    before = engine.generate(varied_requests(tok), greedy=True)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    engine.update_weights(model.named_parameters())
    after = engine.generate(varied_requests(tok), greedy=True)
    assert [r.token_ids for r in before] != [r.token_ids for r in after]
    batch, logp = recompute(model, tok, varied_requests(tok), after)  # engine now equals the trainer's weights
    assert ((logp - batch.rollout_logp).abs() * batch.loss_mask).max() < 2e-4


def test_top_p_keeps_smallest_nucleus():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    kept = torch.isfinite(truncate_logits(logits, top_p=0.7, top_k=0))
    assert kept.tolist() == [[True, True, False, False]]  # 0.5 < 0.7 ≤ 0.8


def test_submit_hands_back_the_generated_results(model_tok):
    """The rollout drives every engine through `submit`: its futures hold exactly what `generate` returns for the
    same call, and a failed generation fails every future of the call instead of raising past them."""
    model, tok = model_tok
    engine = HFEngine(model, tok, **HF_FP32)
    futures = engine.submit(varied_requests(tok), seed=4)
    assert all(f.done() for f in futures)
    assert [f.result() for f in futures] == engine.generate(varied_requests(tok), seed=4)
    broken = engine.submit([GenerationRequest([10**6], 4)])  # a token id outside the vocabulary
    assert isinstance(broken[0].exception(), IndexError)
    engine.sleep()  # nothing to free for this engine: it keeps serving
    engine.wake_up()
    assert engine.generate(varied_requests(tok), seed=4) == [f.result() for f in futures]
    engine.close()
    engine.close()  # idempotent, as the protocol says
