import pytest
import torch

from trainer.objective.advantages import broadcast_advantages, group_advantages


def test_grpo_hand_computed():
    # group 0: rewards 1, 0, 0, 1 → mean 0.5, unbiased std sqrt(1/3) = 0.57735 → ±0.86603
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    groups = torch.tensor([0, 0, 0, 0, 1, 1])
    adv, metrics = group_advantages(rewards, groups)
    assert torch.allclose(adv[:4], torch.tensor([0.86603, -0.86603, -0.86603, 0.86603]), atol=1e-4)
    assert torch.equal(adv[4:], torch.zeros(2))  # degenerate group: no signal
    assert metrics["adv/degenerate_group_frac"] == pytest.approx(0.5)


def test_dr_grpo_and_rloo():
    rewards = torch.tensor([1.0, 0.0, 0.0])
    groups = torch.zeros(3, dtype=torch.long)
    adv, _ = group_advantages(rewards, groups, norm_by_std=False)
    assert torch.allclose(adv, torch.tensor([2 / 3, -1 / 3, -1 / 3]))
    # RLOO: 1 − mean(0, 0) = 1; 0 − mean(1, 0) = −0.5
    adv, _ = group_advantages(rewards, groups, norm_by_std=False, leave_one_out=True)
    assert torch.allclose(adv, torch.tensor([1.0, -0.5, -0.5]))


def test_singleton_group_rejected():
    with pytest.raises(ValueError, match="group_size"):
        group_advantages(torch.tensor([1.0, 0.0]), torch.tensor([0, 1]))


def test_broadcast_zeroes_tool_tokens():
    mask = torch.tensor([[1.0, 0.0, 1.0]])
    assert torch.equal(broadcast_advantages(torch.tensor([2.0]), mask), torch.tensor([[2.0, 0.0, 2.0]]))
