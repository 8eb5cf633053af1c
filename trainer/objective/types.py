"""The data the trainer works on, with every tensor's shape.

    rollout → Trajectory (agents/trajectory.py, lists) → Batch (this module, padded tensors)

Legend: B trajectories, L = max(prompt + response) length, T = max response length.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from agents.trajectory import Trajectory

__all__ = ["Batch", "Trajectory", "collate"]


@dataclass
class Batch:
    """Right-padded tensors for B trajectories.

    input_ids:      (B, L) prompt + response ids, right-padded with pad_id.
    attention_mask: (B, L) 1 on real tokens.
    response_start: (B,)   index in input_ids of each row's first response token (= prompt length).
    response_len:   (B,)   number of response tokens of each row.
    response_ids:   (B, T) response ids, right-padded.
    loss_mask:      (B, T) m: 1 on sampled tokens, 0 on observation tokens and padding (built by
                    agents/rollout.py; `Trajectory.mask_out` zeroes a whole episode).
    rollout_logp:   (B, T) engine log-probs of sampled tokens, 0.0 elsewhere.
    rewards:        (B,)   scalar outcome rewards (less the KL penalty with algo.kl_in_reward).
    group_ids:      (B,)   GRPO group of each row.
    advantages:     (B, T) A_b broadcast over t, times m (GiGPO's per turn with algo.advantage=gigpo).
    old_logp:       (B, T) trainer log-probs at rollout time (no grad, unperturbed; `logprobs.old_logprobs`).
    corr_weights:   (B, T) detached off-policy correction weights w (TIS/MIS), once per rollout batch
                    (`corrections.prepare_corrections`).
    corr_keep:      (B, T) m′ = m ⊙ keep: the loss mask after rejection (equals m without rejection), with w.
    quatro_targets: (B, T) QUATRO's trust-region target log-ratios t_b·m, which its loss reads in place of the
                    advantages (None unless algo.quatro_delta > 0).
    ref_logp:       (B, T) log-probs of the frozen reference policy (no grad; None unless algo.kl_coef > 0).

    `collate` fills the rollout's fields from the trajectories; every later field (and the KL-penalized rewards)
    is assigned by `trainer/loop.py`'s `prepare_batch` only, from what its stages return, for the update's batch
    and for MIPU's validation batch alike.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    response_start: torch.Tensor
    response_len: torch.Tensor
    response_ids: torch.Tensor
    loss_mask: torch.Tensor
    rollout_logp: torch.Tensor
    rewards: torch.Tensor
    group_ids: torch.Tensor
    advantages: torch.Tensor | None = None
    old_logp: torch.Tensor | None = None
    corr_weights: torch.Tensor | None = None
    corr_keep: torch.Tensor | None = None
    quatro_targets: torch.Tensor | None = None
    ref_logp: torch.Tensor | None = None

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def select(self, rows: torch.Tensor | list[int]) -> Batch:
        """A sub-batch of the given rows, trimmed to its own widths (less padding per micro-batch)."""
        rows = torch.as_tensor(rows, dtype=torch.long)
        width = int((self.response_start[rows] + self.response_len[rows]).max())
        t_width = max(int(self.response_len[rows].max()), 1)
        pick = {}
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if value is None:
                pick[name] = None
            elif value.dim() == 2 and value.shape[1] == self.input_ids.shape[1] and name in ("input_ids",
                                                                                              "attention_mask"):
                pick[name] = value[rows, :width]
            elif value.dim() == 2:
                pick[name] = value[rows, :t_width]
            else:
                pick[name] = value[rows]
        return Batch(**pick)


def collate(trajectories: list[Trajectory], pad_id: int) -> Batch:
    """Pad trajectories into a Batch; the ids are exactly the sampled ones (no re-tokenization)."""
    if not trajectories:
        raise ValueError("collate: no trajectories")
    b = len(trajectories)
    lengths = [len(t.prompt_ids) + len(t.response_ids) for t in trajectories]
    t_max = max(max(len(t.response_ids) for t in trajectories), 1)
    input_ids = torch.full((b, max(lengths)), pad_id, dtype=torch.long)  # (B, L)
    attention = torch.zeros((b, max(lengths)), dtype=torch.long)
    response_ids = torch.full((b, t_max), pad_id, dtype=torch.long)  # (B, T)
    loss_mask = torch.zeros((b, t_max), dtype=torch.float32)
    rollout_logp = torch.zeros((b, t_max), dtype=torch.float32)
    for i, t in enumerate(trajectories):
        if not (len(t.response_ids) == len(t.loss_mask) == len(t.rollout_logprobs)):
            raise ValueError(f"collate: trajectory {i} has misaligned response lists")
        ids = t.prompt_ids + t.response_ids
        input_ids[i, : len(ids)] = torch.tensor(ids)
        attention[i, : len(ids)] = 1
        n = len(t.response_ids)
        if n:
            response_ids[i, :n] = torch.tensor(t.response_ids)
            loss_mask[i, :n] = torch.tensor(t.loss_mask, dtype=torch.float32)
            rollout_logp[i, :n] = torch.tensor(t.rollout_logprobs, dtype=torch.float32)
    return Batch(
        input_ids=input_ids, attention_mask=attention,
        response_start=torch.tensor([len(t.prompt_ids) for t in trajectories]),
        response_len=torch.tensor([len(t.response_ids) for t in trajectories]),
        response_ids=response_ids, loss_mask=loss_mask, rollout_logp=rollout_logp,
        rewards=torch.tensor([float(t.reward) for t in trajectories]),
        group_ids=torch.tensor([t.group_id for t in trajectories]),
    )
