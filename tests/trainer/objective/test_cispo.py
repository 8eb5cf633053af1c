"""CISPO's loss and gradient by hand; TRL's two-sided clip (delta) is the dual-clip constant."""

from __future__ import annotations

import math

import pytest
import torch

from trainer.objective.losses import cispo, ppo_clip

MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
OLD = torch.tensor([[-1.0, -2.0, -0.5, 0.0]])
RATIOS = [0.1, 1.0, 8.0]  # π_θ/π_θold on the three sampled tokens; the fourth is padding
ADV = torch.tensor([[2.0, 2.0, -1.0, 5.0]])


def test_cispo_weights_log_pi_by_the_clipped_stop_gradient_ratio():
    logp = (OLD + torch.tensor([[math.log(r) for r in RATIOS] + [0.0]])).requires_grad_(True)
    per_token, metrics = cispo(logp, OLD, OLD, ADV, MASK, clip_low=1.0, clip_high=4.0)
    clipped = [0.1, 1.0, 5.0]  # r clipped to [0, 5]
    expected = [-w * a * lp for w, a, lp in zip(clipped, [2.0, 2.0, -1.0], logp[0, :3].tolist(), strict=True)]
    assert per_token[0, :3].tolist() == pytest.approx(expected) and per_token[0, 3] == 0
    per_token.sum().backward()
    # ∂ℓ/∂log π = −sg(r̂)·A: the weight carries no gradient, and the clipped token keeps its own
    assert logp.grad[0].tolist() == pytest.approx([-0.2, -2.0, 5.0, 0.0])
    assert metrics["clip_high"] == pytest.approx(1 / 3) and metrics["ratio_mean"] == pytest.approx(sum(RATIOS) / 3)


def test_ppo_clip_gives_the_clipped_token_no_gradient_where_cispo_does():
    logp = (OLD + torch.tensor([[0.0, 0.0, math.log(8.0), 0.0]])).requires_grad_(True)
    adv = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    ppo_clip(logp, OLD, OLD, adv, MASK, clip_low=0.2, clip_high=0.28, clip_dual=3.0,
             upd_level="token")[0].sum().backward()
    assert logp.grad[0, 2] == 0  # r = 8 > 1.28 with A > 0: clipped away
    logp.grad = None
    cispo(logp, OLD, OLD, adv, MASK, clip_low=1.0, clip_high=4.0)[0].sum().backward()
    assert logp.grad[0, 2] == pytest.approx(-5.0)


def test_trl_delta_is_the_dual_clip_constant():
    # TRL GRPO's `delta` caps the unclipped ratio before the min; for A < 0 that is dual clip with c = δ, and
    # for A > 0 it never binds (1 + ε_hi < δ)
    logp = OLD + torch.tensor([[math.log(r) for r in RATIOS] + [0.0]])
    adv = torch.tensor([[2.0, -1.0, -1.0, 0.0]])
    delta = 4.0
    ratio = torch.exp(logp - OLD)
    trl = -torch.minimum(ratio.clamp(max=delta) * adv, ratio.clamp(0.8, 1.28) * adv) * MASK
    ours, _ = ppo_clip(logp, OLD, OLD, adv, MASK, clip_low=0.2, clip_high=0.28, clip_dual=delta, upd_level="token")
    assert ours[0].tolist() == pytest.approx(trl[0].tolist())


def test_gmpo_is_minus_advantage_times_the_geometric_mean_of_the_clipped_ratios():
    from trainer.objective.losses import aggregate, gmpo

    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    old = torch.zeros(2, 3)
    log_r = torch.tensor([[0.1, 0.9, 0.0], [-0.6, 0.2, 0.1]])
    adv = torch.tensor([[1.0], [-2.0]]).expand(2, 3) * mask
    logp = (old + log_r).requires_grad_(True)
    per_token, metrics = gmpo(logp, old, old, adv, mask, clip_low=0.4, clip_high=0.4)
    # A > 0: min(log r, clamp) → 0.1, 0.4; A < 0: max(log r, clamp) → −0.4, 0.2, 0.1
    s0, s1 = math.exp((0.1 + 0.4) / 2), math.exp((-0.4 + 0.2 + 0.1) / 3)
    loss = aggregate(per_token, mask, "seq-mean-token-mean")
    assert loss.item() == pytest.approx((-1.0 * s0 + 2.0 * s1) / 2, rel=1e-6)
    loss.backward()
    # only the unclipped tokens carry gradient: ∂ℓ_b/∂log π_t = −A_b·s_b/n_b, /2 for the mean over rows
    assert logp.grad[0].tolist() == pytest.approx([-s0 / 2 / 2, 0.0, 0.0])
    assert logp.grad[1].tolist() == pytest.approx([0.0, 2.0 * s1 / 3 / 2, 2.0 * s1 / 3 / 2])
    assert metrics["out_of_band"] == pytest.approx(2 / 5)


def test_is_reinforce_weights_by_the_truncated_ratio_to_the_sampler():
    from trainer.objective.losses import is_reinforce

    rollout = torch.tensor([[-1.5, -2.0, -0.1, 0.0]])  # μ's log-probs; the trainer's old_logp plays no part
    logp = (rollout + torch.tensor([[math.log(0.5), 0.0, math.log(3.0), 0.0]])).requires_grad_(True)
    per_token, _ = is_reinforce(logp, OLD, rollout, ADV, MASK, clip_low=1.0, clip_high=1.0)
    per_token.sum().backward()
    assert logp.grad[0].tolist() == pytest.approx([-0.5 * 2.0, -1.0 * 2.0, 2.0 * 1.0, 0.0])  # w = 0.5, 1, min(3, 2)
