"""Loss registry: hand-computed values and registry-wide properties."""

import math

import pytest
import torch

from trainer.losses import AGG_MODES, POLICY_LOSSES, aggregate, get_policy_loss, ppo_clip


def _inputs(b=3, t=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(b, t, generator=g) * 3
    logp = (old + 0.3 * torch.randn(b, t, generator=g)).requires_grad_(True)
    rollout = old + 0.05 * torch.randn(b, t, generator=g)
    adv = torch.randn(b, 1, generator=g).expand(b, t).clone()
    mask = torch.ones(b, t)
    mask[0, 3:] = 0
    return logp, old, rollout, adv, mask


def test_ppo_clip_hand_computed():
    # A = +1, r = e^0.5 = 1.6487 > 1 + 0.28 → clipped: loss = −1·1.28 = −1.28 (no gradient)
    # A = −1, r = e^-0.5 = 0.6065 < 0.8 → clipped side: max(0.6065, 0.8) = 0.8
    # A = −1, r = e^1.5 = 4.4817 > c = 3 → dual clip: min(max(4.48, 1.28), 3) = 3
    # A = +1, r = 1 → −1
    logp = torch.tensor([[0.5, -0.5, 1.5, 0.0]], requires_grad=True)
    old = torch.zeros(1, 4)
    adv = torch.tensor([[1.0, -1.0, -1.0, 1.0]])
    mask = torch.ones(1, 4)
    loss, metrics = ppo_clip(logp, old, old, adv, mask, clip_low=0.2, clip_high=0.28, clip_dual=3.0)
    assert torch.allclose(loss, torch.tensor([[-1.28, 0.8, 3.0, -1.0]]), atol=1e-5)
    loss.sum().backward()
    # only the unclipped token (r = 1, A = +1) has gradient: d(−A·r)/dlogp = −r = −1
    assert torch.allclose(logp.grad, torch.tensor([[0.0, 0.0, 0.0, -1.0]]))
    assert metrics["clip_high"] == pytest.approx(0.25)
    assert metrics["clip_low"] == pytest.approx(0.25)
    assert metrics["clip_dual"] == pytest.approx(0.25)


def test_aggregate_modes_hand_computed():
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0], [9.0, 9.0, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])  # row 2 is empty
    assert aggregate(loss, mask, "token-mean").item() == pytest.approx((1 + 2 + 3 + 4) / 4)
    assert aggregate(loss, mask, "seq-mean-token-mean").item() == pytest.approx((2.0 + 4.0) / 2)
    assert aggregate(loss, mask, "seq-mean-token-sum").item() == pytest.approx((6.0 + 4.0) / 2)
    assert aggregate(loss, mask, "seq-mean-token-sum-norm", norm_len=10).item() == pytest.approx(10 / 2 / 10)
    with pytest.raises(ValueError, match="valid"):
        aggregate(loss, mask, "nope")


def test_token_mean_is_invariant_to_micro_batching():
    loss = torch.rand(4, 6)
    mask = (torch.rand(4, 6) > 0.3).float()
    whole = aggregate(loss, mask, "token-mean")
    n = mask.sum()
    split = aggregate(loss[:2], mask[:2], n_tokens=n) + aggregate(loss[2:], mask[2:], n_tokens=n)
    assert split.item() == pytest.approx(whole.item(), rel=1e-6)


def test_unknown_loss_lists_valid_names():
    with pytest.raises(ValueError, match="ppo_clip"):
        get_policy_loss("does-not-exist")


def test_dual_clip_must_exceed_one():
    logp, old, rollout, adv, mask = _inputs()
    with pytest.raises(ValueError, match="> 1"):
        ppo_clip(logp, old, rollout, adv, mask, clip_dual=0.9)


@pytest.mark.parametrize("name", sorted(POLICY_LOSSES))
def test_registry_finite_and_masked(name):
    logp, old, rollout, adv, mask = _inputs()
    loss, metrics = POLICY_LOSSES[name](logp, old, rollout, adv, mask)
    assert loss.shape == logp.shape and torch.isfinite(loss).all()
    assert all(math.isfinite(v) for v in metrics.values())
    assert (loss[mask == 0] == 0).all()  # masked tokens contribute nothing
    aggregate(loss, mask).backward()
    assert (logp.grad[mask == 0] == 0).all()


@pytest.mark.parametrize("name", sorted(POLICY_LOSSES))
def test_registry_zero_advantage_gives_zero_gradient(name):
    logp, old, rollout, adv, mask = _inputs()
    loss, _ = POLICY_LOSSES[name](logp, old, rollout, torch.zeros_like(adv), mask)
    aggregate(loss, mask).backward()
    assert torch.count_nonzero(logp.grad) == 0


@pytest.mark.parametrize("mode", [m for m in AGG_MODES if m != "seq-mean-token-sum-norm"])
def test_aggregate_ignores_empty_rows(mode):
    loss = torch.rand(3, 4)
    mask = torch.ones(3, 4)
    with_empty = torch.cat([loss, torch.full((1, 4), 1e6)])
    mask_empty = torch.cat([mask, torch.zeros(1, 4)])
    assert aggregate(with_empty, mask_empty, mode).item() == pytest.approx(aggregate(loss, mask, mode).item())
