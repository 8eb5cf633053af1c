"""Outcome advantages for groups of trajectories (reference/algorithms.md §2.1).

Legend: B trajectories, T response positions, G group size.
"""

from __future__ import annotations

import torch

ADVANTAGE_ESTIMATORS = ("grpo", "gigpo", "opob")
"""`algo.advantage`: episode-level group advantages (here) or GiGPO's episode + step levels (trainer/objective/gigpo.py),
or here with VCPO's off-policy optimal baseline (`log_weights`; the weights: trainer/algorithms/vcpo.py)."""


def group_advantages(rewards: torch.Tensor, group_ids: torch.Tensor, *, members: torch.Tensor | None = None,
                     norm_by_std: bool = True, leave_one_out: bool = False, log_weights: torch.Tensor | None = None,
                     eps: float = 1e-6) -> tuple[torch.Tensor, dict[str, float]]:
    """Per-trajectory advantages A_b from rewards (B,) and group ids (B,) → (B,), metrics.

    GRPO (arXiv 2402.03300): (R − mean_g R) / (std_g R + eps), unbiased std.
    Dr.GRPO (arXiv 2503.20783): no std division. RLOO (arXiv 2402.14740): R − mean of the others
    = G/(G−1)·(R − mean_g R). A group of one is rejected (no baseline exists).

    members: (B,) bool, the rows that count in their group's statistics (default: all;
    trainer/objective/infra_failures.py `advantage_members`). Every statistic, the leave-one-out G included, is
    over a group's members only, so a member's advantage is what it would be had the others never been sampled; a
    row outside gets 0, and so does every row of a group with fewer than two members.

    log_weights: (B,) log w of each episode's importance weight π_θold/μ: the group's centre becomes VCPO's
    off-policy optimal baseline (arXiv 2602.17616) b_g = Σ_i w_i² R_i / Σ_i w_i² over its members, the
    variance-minimizing baseline of the w-weighted gradient with equal score norms (trainer/algorithms/vcpo.py
    says why); with w ≡ 1 it is the group mean. Not with `leave_one_out`.
    """
    if rewards.shape != group_ids.shape or rewards.dim() != 1:
        raise ValueError(f"group_advantages: rewards {tuple(rewards.shape)} and group_ids "
                         f"{tuple(group_ids.shape)} must both be (B,)")
    if log_weights is not None and leave_one_out:
        raise ValueError("group_advantages: the off-policy optimal baseline (log_weights) has no leave-one-out form")
    if members is None:
        members = torch.ones_like(group_ids, dtype=torch.bool)
    elif members.shape != group_ids.shape or members.dtype != torch.bool:
        raise ValueError(f"group_advantages: members {tuple(members.shape)} {members.dtype} must be (B,) bool like "
                         f"group_ids {tuple(group_ids.shape)}")
    rewards = rewards.float()
    adv = torch.zeros_like(rewards)
    degenerate = 0
    groups = group_ids.unique()
    for g in groups:
        idx = (group_ids == g).nonzero().squeeze(-1)
        if idx.numel() < 2:
            raise ValueError(f"group {int(g)} has one trajectory; GRPO needs group_size ≥ 2")
        idx = idx[members[idx]]  # (G′,) the rows that count
        if idx.numel() < 2:  # no baseline left: the group contributes nothing
            continue
        r = rewards[idx]
        if log_weights is None:
            centred = r - r.mean()
        else:  # w² normalized in log space: softmax(2 log w) (G′,), stable for any log w
            centred = r - (torch.softmax(2 * log_weights[idx].double(), 0) * r.double()).sum().float()
        if leave_one_out:
            centred = centred * r.numel() / (r.numel() - 1)
        if norm_by_std:
            centred = centred / (r.std() + eps)  # torch.std is unbiased (Bessel), as verl
        if torch.all(r == r[0]):
            degenerate += 1
            centred = torch.zeros_like(r)
        adv[idx] = centred
    counted = adv[members] if members.any() else adv  # (B′,) the advantages of the rows that count
    return adv, {"adv/degenerate_group_frac": degenerate / max(len(groups), 1),
                 "adv/mean": counted.mean().item(), "adv/abs_mean": counted.abs().mean().item()}


def broadcast_advantages(adv: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """A_bt = A_b · m_bt: (B,), (B, T) → (B, T). Tool tokens carry no advantage."""
    return adv[:, None] * loss_mask
