"""VESPO, MinPRO and CTPO (trainer/objective/offpolicy_losses.py) by hand: values, gradients, and what each reads.

Registry-wide properties (finite, masked, zero advantage → zero gradient, NaN on masked tokens) and the reference
formulas with swapped log-probs run in tests/trainer/objective/test_losses.py and test_loss_semantics.py.
"""

from __future__ import annotations

import math

import pytest
import torch

from trainer.objective.losses import POLICY_LOSSES, get_policy_loss
from trainer.objective.offpolicy_losses import ctpo, minpro, prefix_min_log_ratio, vespo
from trainer.setup.build import build_config
from trainer.update import loss_kwargs

KERNEL = {"vespo_k_pos": 2.0, "vespo_lambda_pos": 3.0, "vespo_k_neg": 3.0, "vespo_lambda_neg": 2.0}  # vespo.yaml
BOUNDS = {"ctpo_clip_low": 0.025, "ctpo_clip_high": 0.05, "ctpo_clip_dual": 0.05, "ctpo_power": 0.5}  # ctpo.yaml
CLIPS = {"clip_low": 0.2, "clip_high": 0.28, "clip_dual": 3.0}  # minpro.yaml


def test_the_presets_select_the_losses_with_their_papers_defaults():
    for name, keys in (("vespo", KERNEL), ("ctpo", BOUNDS), ("minpro", CLIPS)):
        algo = build_config(None, [f"algorithm={name}"]).algo
        assert algo.policy_loss == name and get_policy_loss(name) is POLICY_LOSSES[name]
        assert loss_kwargs(algo) == keys
    corrections = {name: (a.correction, a.corr_level, a.corr_upper) for name in ("vespo", "ctpo", "minpro")
                   if (a := build_config(None, [f"algorithm={name}"]).algo)}
    assert corrections["vespo"] == ("tis", "token", 3.0)  # TRL's token_truncate, cap 3, folded into W
    assert corrections["ctpo"] == ("tis", "seq", 5.0)  # CTPO's script: rollout_is=sequence, threshold 5
    assert corrections["minpro"][0] == "none"  # its ratio is against the sampler already


# ------------------------------------------------------------------------------------------------------- VESPO


def test_vespo_hand_computed():
    # row 0, A = +1 (k 2, λ 3): Δ = logp − old = [0.1, −0.2] → W = e^−0.1 = 0.904837,
    #   φ = W²·e^{3(1 − W)} = 0.818731·e^0.285489 = 1.089248; ℓ = −φ·A·logp = −1.089248·[−1, −2] = [1.089248, 2.178496]
    # row 1, A = −1 (k 3, λ 2): Δ = [0.3, 0.2] → W = e^0.5 = 1.648721,
    #   φ = W³·e^{2(1 − W)} = 4.481689·e^−1.297443 = 1.224530; ℓ = −φ·(−1)·logp = 1.224530·[−0.5, −1.5]
    old = torch.tensor([[-1.1, -1.8], [-0.8, -1.7]])
    logp = torch.tensor([[-1.0, -2.0], [-0.5, -1.5]], requires_grad=True)
    adv = torch.tensor([[1.0, 1.0], [-1.0, -1.0]])
    rollout = torch.full((2, 2), 123.0)  # unused
    loss, metrics = vespo(logp, old, rollout, adv, torch.ones(2, 2), **KERNEL)
    phi0, phi1 = 1.089248213, 1.224530443
    assert torch.allclose(loss, torch.tensor([[phi0, 2 * phi0], [-0.5 * phi1, -1.5 * phi1]]), atol=1e-6)
    loss.sum().backward()
    # φ is detached: ∂ℓ/∂logp = −φ·A on every token, no term through W
    assert torch.allclose(logp.grad, torch.tensor([[-phi0, -phi0], [phi1, phi1]]), atol=1e-6)
    assert metrics["ratio_mean"] == pytest.approx((math.exp(-0.1) + math.exp(0.5)) / 2, rel=1e-5)
    assert metrics["vespo_phi_max"] == pytest.approx(phi1, rel=1e-5)


def test_vespo_folds_the_correction_weights_into_w_instead_of_multiplying():
    # w = [3, 1] on row 0: log W = −0.1 + ln 3 = 0.998612, W = 2.714512, φ = W²·e^{3(1 − W)} = 0.043010; the loss is
    # −φ·A·logp, not w·ℓ (a weight of 3 on the first token alone would give 3·1.089248 there)
    old, logp = torch.tensor([[-1.1, -1.8]]), torch.tensor([[-1.0, -2.0]])
    loss, metrics = vespo(logp, old, old, torch.ones(1, 2), torch.ones(1, 2), weights=torch.tensor([[3.0, 1.0]]),
                          **KERNEL)
    assert torch.allclose(loss, 0.04301045 * torch.tensor([[1.0, 2.0]]), atol=1e-6)
    assert metrics["vespo_w_mean"] == pytest.approx(2.714512, rel=1e-5)
    assert metrics["ratio_mean"] == pytest.approx(math.exp(-0.1), rel=1e-5)  # r_upd alone, before the fold


def test_vespo_on_policy_is_reinforce_and_its_kernel_peaks_at_k_over_lambda():
    # W = 1 → φ = 1^k·e^0 = 1: the gradient is −A·∇log π, GRPO's on-policy gradient
    logp = torch.tensor([[-1.0, -0.3, -2.0]], requires_grad=True)
    adv = torch.tensor([[0.7, 0.7, 0.0]])
    loss, _ = vespo(logp, logp.detach(), logp.detach(), adv, torch.tensor([[1.0, 1.0, 0.0]]), **KERNEL)
    loss.sum().backward()
    assert torch.allclose(logp.grad, torch.tensor([[-0.7, -0.7, 0.0]]))
    # φ(W) = W^k e^{λ(1−W)} is largest at W = k/λ: 2/3 for A ≥ 0, where φ = (2/3)²·e^1 = 1.207761
    phis = []
    for big_w in (0.5, 2 / 3, 0.8):
        old = torch.tensor([[-1.0 - math.log(big_w)]])  # Δ = ln W on one token
        value, _ = vespo(torch.tensor([[-1.0]]), old, old, torch.ones(1, 1), torch.ones(1, 1), **KERNEL)
        phis.append(value.item())  # = −φ·1·(−1) = φ
    assert phis[1] == pytest.approx(4 / 9 * math.e, rel=1e-5) and phis[1] > max(phis[0], phis[2])


# ------------------------------------------------------------------------------------------------------- MinPRO


def test_prefix_minimum_skips_masked_positions_and_starts_at_one():
    # log ρ = [0.5, −1.0, (masked 20), 0.2, −3.0]: the minimum over the sampled tokens before each position
    log_rho = torch.tensor([[0.5, -1.0, 20.0, 0.2, -3.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0, 1.0, 1.0]])
    assert torch.equal(prefix_min_log_ratio(log_rho, mask), torch.tensor([[0.0, 0.5, -1.0, -1.0, -1.0]]))
    late = torch.tensor([[0.0, 1.0, 1.0]])  # a row whose first sampled token comes after a masked one
    assert torch.equal(prefix_min_log_ratio(torch.tensor([[-5.0, 0.3, 0.1]]), late), torch.tensor([[0.0, 0.0, 0.3]]))


def test_minpro_hand_computed():
    # ρ = π_θ/μ: log ρ = logp − rollout = [0.2, −0.7, (tool token), 0.1, 0.0], A = +1, ε 0.2/0.28
    # prefix minima M = [1, e^0.2, –, e^−0.7, e^−0.7]; each token's dual clip: ρ0 = 1.221403 < 1.28 → −1.221403;
    # ρ1 = 0.496585 (A > 0: below the band is not clipped) → −0.496585·1.221403 = −0.606531;
    # ρ3 = 1.105171 → −1.105171·0.496585 = −0.548812; ρ4 = 1 → −0.496585
    rollout = torch.tensor([[-1.0, -1.0, -1.0, -1.0, -1.0]])
    logp = (rollout + torch.tensor([[0.2, -0.7, 9.0, 0.1, 0.0]])).requires_grad_(True)
    mask = torch.tensor([[1.0, 1.0, 0.0, 1.0, 1.0]])
    old = torch.full((1, 5), float("nan"))  # unused: MinPRO's denominator is the sampler
    loss, metrics = minpro(logp, old, rollout, mask.clone(), mask, **CLIPS)
    expected = torch.tensor([[-1.2214028, -0.6065307, 0.0, -0.5488116, -0.4965853]])
    assert torch.allclose(loss, expected, atol=1e-6)
    loss.sum().backward()
    # M is detached: each token's gradient is −M_t·ρ_t through its own log-prob only (here the loss itself)
    assert torch.allclose(logp.grad, expected, atol=1e-6)
    assert metrics["minpro_prefix_mean"] == pytest.approx((1 + math.exp(0.2) + 2 * math.exp(-0.7)) / 4, rel=1e-5)
    assert metrics["minpro_prefix_below_half"] == pytest.approx(0.5)  # e^−0.7 = 0.497 twice


def test_minpro_clips_the_current_token_and_keeps_the_prefix_weight():
    # log ρ = [−1.0, 0.5], A = −1: ρ1 = e^0.5 = 1.648721 > 1.28 on A < 0 is not clipped by the band, c = 3 not
    # reached → ℓ1 = M1·1.648721 = e^−1·1.648721 = 0.606531; ρ0 = 0.367879 < 0.8 → max(0.367879, 0.8) = 0.8, no grad
    rollout = torch.zeros(1, 2)
    logp = torch.tensor([[-1.0, 0.5]], requires_grad=True)
    loss, metrics = minpro(logp, rollout, rollout, -torch.ones(1, 2), torch.ones(1, 2), **CLIPS)
    assert torch.allclose(loss, torch.tensor([[0.8, 0.6065307]]), atol=1e-6)
    loss.sum().backward()
    assert torch.allclose(logp.grad, torch.tensor([[0.0, 0.6065307]]), atol=1e-6)
    assert metrics["clip_low"] == pytest.approx(0.5)


# ------------------------------------------------------------------------------------------------------- CTPO


def test_ctpo_hand_computed_with_a_tool_token_between_turns():
    # A = +1: Δ = logp − old = [0.1, −0.2, (tool), 0.05] → S = [0.1, −0.1, –, −0.05] at positions t = [1, 2, –, 3]
    # bounds: high = 0.05·√t = [0.05, 0.070711, 0.086603], low = −0.025·√t = [−0.025, −0.035355, −0.043301]
    # t1: log r = 0.1 > 0.05 → max(−e^0.1, −e^0.05) = −1.051271 (clipped: no gradient)
    # t2: −0.1 < −0.035355, but A > 0 keeps the smaller ratio → −e^−0.1 = −0.904837, gradient −0.904837
    # t3: −0.05 < −0.043301 → −e^−0.05 = −0.951229, gradient −0.951229 (the tool token is no position)
    old = torch.tensor([[-1.0, -1.0, -1.0, -1.0]])
    logp = (old + torch.tensor([[0.1, -0.2, 7.0, 0.05]])).requires_grad_(True)
    mask = torch.tensor([[1.0, 1.0, 0.0, 1.0]])
    loss, metrics = ctpo(logp, old, torch.full((1, 4), float("nan")), mask.clone(), mask, **BOUNDS)
    assert torch.allclose(loss, torch.tensor([[-1.0512711, -0.9048374, 0.0, -0.9512294]]), atol=1e-6)
    loss.sum().backward()
    # stop-gradient form: token t's gradient is r_t·∇log π(y_t), nothing flows to the earlier tokens of its prefix
    assert torch.allclose(logp.grad, torch.tensor([[0.0, -0.9048374, 0.0, -0.9512294]]), atol=1e-6)
    assert metrics["clip_high"] == pytest.approx(1 / 3) and metrics["clip_low"] == 0.0
    assert metrics["ctpo_cum_ratio_mean"] == pytest.approx((math.exp(0.1) + math.exp(-0.1) + math.exp(-0.05)) / 3,
                                                           rel=1e-5)


def test_ctpo_dual_clip_grows_with_the_position_and_the_cumulative_ratio_is_capped():
    # A = −1: Δ = [0.3, 0.2] → S = [0.3, 0.5]; the dual clip c_t = e^{0.05·√t} = [1.051271, 1.073271]:
    # t1: max(e^0.3, e^0.05) = 1.349859 > c1 → 1.051271; t2: max(e^0.5, e^0.0707) = 1.648721 > c2 → 1.073271
    old = torch.zeros(1, 2)
    loss, metrics = ctpo(torch.tensor([[0.3, 0.2]]), old, old, -torch.ones(1, 2), torch.ones(1, 2), **BOUNDS)
    assert torch.allclose(loss, torch.tensor([[1.0512711, 1.0732707]]), atol=1e-6)
    assert metrics["clip_dual"] == pytest.approx(1.0)
    # S = 12 on one token, A = −1, c = e^0.05: the log-ratio is capped at 10 before exp, then dual-clipped
    loss, metrics = ctpo(torch.tensor([[12.0]]), torch.zeros(1, 1), torch.zeros(1, 1), -torch.ones(1, 1),
                         torch.ones(1, 1), **BOUNDS)
    assert loss.item() == pytest.approx(math.exp(0.05)) and metrics["ctpo_cum_ratio_mean"] == pytest.approx(
        math.exp(10), rel=1e-5)
    # ctpo_power 0: the same log-space band at every position
    _, uniform = ctpo(torch.tensor([[0.04, 0.04]]), old, old, torch.ones(1, 2), torch.ones(1, 2),
                      **(BOUNDS | {"ctpo_power": 0.0}))
    assert uniform["clip_high"] == pytest.approx(0.5)  # S = 0.08 > 0.05 at t2 only
    with pytest.raises(ValueError, match="ctpo_clip"):
        ctpo(old, old, old, old, torch.ones(1, 2), **(BOUNDS | {"ctpo_clip_low": 0.0}))
