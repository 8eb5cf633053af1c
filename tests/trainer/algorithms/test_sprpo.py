"""SPrPO [R]: the sensitivity-aware allocation meets its budget, the adaptive gain moves toward the target."""

import math

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from agents.perturbation import LayerwisePerturbation
from trainer.algorithms import AlgorithmState
from trainer.algorithms.sprpo import (
    Allocator,
    adapt_gain,
    allocate_sigmas,
    layer_input_rms,
    measure_perturbation,
    predicted_kl,
)
from trainer.objective.logprobs import compute_logprobs
from trainer.objective.types import Batch
from trainer.setup.build import build_config

N_LAYERS = 4


@pytest.fixture(scope="module")
def model():
    cfg = Qwen2Config(vocab_size=64, hidden_size=32, num_hidden_layers=N_LAYERS, num_attention_heads=2,
                      num_key_value_heads=1, intermediate_size=64)
    torch.manual_seed(0)
    return Qwen2ForCausalLM(cfg).eval()


def _batch(b=8, prompt=6, t=10, seed=0):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 64, (b, prompt + t), generator=gen)
    mask = torch.ones(b, t)
    mask[:, -2:] = 0.0  # observation-like tokens: perturbed in the forward, never in the statistics
    return Batch(input_ids=ids, attention_mask=torch.ones_like(ids), response_start=torch.full((b,), prompt),
                 response_len=torch.full((b,), t), response_ids=ids[:, prompt:], loss_mask=mask,
                 rollout_logp=torch.zeros(b, t), rewards=torch.zeros(b), group_ids=torch.arange(b) // 2,
                 old_logp=torch.zeros(b, t))


def _cfg(*extra):
    return build_config(None, ["algorithm=sprpo", "optim.micro_batch_size=8", "perturb.sprpo_probe_rows=8", *extra])


def test_allocation_meets_the_budget_and_is_inverse_to_sensitivity():
    sens = torch.tensor([4e-3, 1e-3, 2.5e-4, 1e-3])
    rms = torch.tensor([0.5, 1.0, 2.0, 4.0])
    sigma, xi, predicted = allocate_sigmas(sens, rms, probe_scale=0.05, target_kl=0.01)
    # ξ = u·√(κ/ΣS) = 0.05·√(0.01/6.25e-3) = 0.063246; each layer's predicted share S_l(σ_l/(u·RMS_l))² = κ/L
    assert xi == pytest.approx(0.05 * math.sqrt(0.01 / 6.25e-3))
    assert predicted == pytest.approx(0.01, rel=1e-12)
    shares = sens.double() * (sigma / (0.05 * rms.double())).square()
    assert torch.allclose(shares, torch.full((4,), 0.01 / 4, dtype=torch.float64))
    relative = sigma / rms.double()  # σ_l/RMS_l ∝ 1/√S_l: 4× the sensitivity, half the relative noise
    assert relative[2] / relative[0] == pytest.approx(4.0) and relative[1] == pytest.approx(relative[3])
    _, _, doubled = allocate_sigmas(sens, rms, probe_scale=0.05, target_kl=0.01, gain=2.0)
    assert doubled == pytest.approx(0.04)  # gain g scales the predicted KL by g²


def test_allocated_scales_meet_the_budget_on_a_real_model(model):
    cfg = _cfg("perturb.sprpo_target_kl=0.004", "perturb.sprpo_factor=1000")  # no gain step: measure the model
    batch = _batch()
    pert = LayerwisePerturbation(model, layers="all", sigma_init=1e-3, learnable=False, logits_only=False,
                                 sigma_mode="absolute")
    allocator = Allocator()
    metrics = allocator.allocate(model, pert, batch, cfg, step=1)
    assert allocator.gain == 1.0 and metrics["perturb/sprpo_predicted_kl"] == pytest.approx(0.004)
    sens = torch.tensor([metrics[f"perturb/sprpo_sensitivity/layer_{i}"] for i in range(N_LAYERS)])
    rms = layer_input_rms(model, batch)
    assert (sens > 0).all() and predicted_kl(sens, pert.sigmas(), rms, 0.05) == pytest.approx(0.004, rel=1e-3)
    # the second-order budget holds for the real all-layer perturbation (fresh noise, all rows)
    clean, _ = compute_logprobs(model, batch, 1.0)
    kl, clip = measure_perturbation(model, batch, pert, clean, 1.0, seed=123, clip_low=0.2, clip_high=0.28)
    assert 0.004 / 2 < kl < 0.004 * 2 and 0.0 <= clip <= 1.0


def test_adaptive_gain_moves_toward_the_target_on_a_synthetic_case():
    # synthetic system: measured KL = a·g² (the second-order model off by a factor a), target κ = 0.01
    for a, start in [(50.0, 1.0), (0.02, 1.0)]:
        gain, kls = start, []
        for _ in range(20):
            kls.append(a * gain**2)
            gain = adapt_gain(gain, kls[-1], 0.0, target_kl=0.01, clip_cap=0.2, factor=1.5)
        errors = [abs(math.log(k / 0.01)) for k in kls]
        assert errors[1] < errors[0] and all(e2 <= e1 for e1, e2 in zip(errors, errors[1:], strict=False))
        assert 0.01 / 1.5 <= kls[-1] <= 0.01 * 1.5  # settled inside the dead band, then holds
    assert adapt_gain(1.0, 0.01, 0.5, target_kl=0.01, clip_cap=0.2, factor=1.5) == pytest.approx(1 / 1.5)


@pytest.mark.parametrize("start_gain", [9.0, 0.2])
def test_allocator_reaches_the_target_on_a_real_model_through_its_state(model, start_gain):
    # the gain starts far off (predicted KL 81κ or 0.04κ); every call measures the real KL and steps the gain
    cfg = _cfg("perturb.sprpo_target_kl=0.002", "perturb.sprpo_every=1")
    batch = _batch(seed=1)
    pert = LayerwisePerturbation(model, layers="all", sigma_init=1e-3, learnable=False, logits_only=False,
                                 sigma_mode="absolute")
    algos = AlgorithmState()
    algos.sprpo.gain = start_gain
    kls = [algos.sprpo.maybe_allocate(model, pert, batch, cfg, step)["perturb/sprpo_kl"] for step in range(1, 9)]
    first, last = abs(math.log(kls[0] / 0.002)), abs(math.log(kls[-1] / 0.002))
    assert first > math.log(2.25) and last < math.log(2.25) < first  # from outside the band to inside it
    assert (algos.state_dict()["sprpo"]["gain"] < start_gain) == (start_gain > 1)
    assert algos.sprpo.maybe_allocate(model, pert, batch, build_config(None, ["algorithm=grpo"]), 1) == {}  # off


def test_allocator_refuses_a_learnable_or_missing_perturbation(model):
    learnable = LayerwisePerturbation(model, layers="all", sigma_init=1e-3, learnable=True, logits_only=False,
                                      sigma_mode="absolute")
    with pytest.raises(ValueError, match="learnable=false"):
        Allocator().maybe_allocate(model, learnable, _batch(), _cfg(), step=1)
    with pytest.raises(ValueError, match="perturb.enabled=true"):
        Allocator().maybe_allocate(model, None, _batch(), _cfg(), step=1)
    fixed = LayerwisePerturbation(model, layers="all", sigma_init=1e-3, learnable=False, logits_only=False,
                                  sigma_mode="absolute")
    allocator, empty = Allocator(), _batch()
    empty.loss_mask.zero_()  # e.g. every trajectory void: nothing to probe, retried at the next step
    assert allocator.maybe_allocate(model, fixed, empty, _cfg(), step=1) == {"perturb/sprpo_skipped": 1.0}
    assert allocator.maybe_allocate(model, fixed, _batch(), _cfg(), step=2)["perturb/sprpo_skipped"] == 0.0
    assert allocator.maybe_allocate(model, fixed, _batch(), _cfg(), step=11) == {}  # next one due at step 12
    assert "perturb/sprpo_gain" in allocator.maybe_allocate(model, fixed, _batch(), _cfg(), step=12)
