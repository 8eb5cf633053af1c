"""The data the trainer works on, with every tensor's shape.

    rollout → Trajectory (agents/trajectory.py, lists) → Batch (this module, padded tensors)

A row is a trace (agents/trajectory.py): one prompt and the tokens that followed it as sampled. An episode whose turns
all extended its token stream is one row; one that started new traces (a stripped thinking history, a context
compaction, a harness's prefix break) is several consecutive rows (`collate` keeps them together, in order,
`Batch.episode_index` says whose). What belongs to the episode is computed over its rows with `EpisodeRows`: its
group statistics (trainer/loop.py `compute_advantages`), its sequence-level correction value
(trainer/objective/corrections.py), its KL penalty in the reward (trainer/reference.py) and its share of a
sequence-mean loss (`row_seq_tokens`, trainer/update.py). With one row an episode, every reduction is the identity, so
append-only batches are computed exactly as before.

Legend: B rows (traces), E episodes, L = max(prompt + response) length, T = max response length.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from agents.trajectory import Trajectory

__all__ = ["Batch", "EpisodeRows", "Trajectory", "collate", "episode_count", "row_seq_tokens"]


@dataclass
class Batch:
    """Right-padded tensors for B rows, one per trace.

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
    episode_index:  (B,)   the episode of each row, 0..E−1, consecutive rows per episode (`collate`; None: each row
                    its own episode). `EpisodeRows` reduces over it.
    rollout_topk_ids:  (B, T, k) the sampler's k most probable token ids at each position (rollout.logprobs_topk
                       > 0; `Trajectory.rollout_topk`), where it reported fewer padded with its first (0 where
                       none); None without top-k.
    rollout_topk_logp: (B, T, k) their log-probs under the sampling distribution, −inf where absent.

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
    episode_index: torch.Tensor | None = None
    rollout_topk_ids: torch.Tensor | None = None
    rollout_topk_logp: torch.Tensor | None = None

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
            elif value.dim() in (2, 3):  # (B, T) and (B, T, k) response-aligned fields
                pick[name] = value[rows, :t_width]
            else:
                pick[name] = value[rows]
        return Batch(**pick)


def collate(episodes: list[Trajectory], pad_id: int) -> Batch:
    """Pad episodes into a Batch, a row per trace (`Trajectory.traces`, in order), with `episode_index` saying whose;
    the ids are exactly the sampled ones (no re-tokenization)."""
    if not episodes:
        raise ValueError("collate: no trajectories")
    trajectories = [trace for episode in episodes for trace in episode.traces]
    episode_index = torch.tensor([e for e, episode in enumerate(episodes) for _ in episode.traces])  # (B,)
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
    topk_ids, topk_logp = _collate_topk(trajectories, t_max)
    return Batch(
        input_ids=input_ids, attention_mask=attention,
        response_start=torch.tensor([len(t.prompt_ids) for t in trajectories]),
        response_len=torch.tensor([len(t.response_ids) for t in trajectories]),
        response_ids=response_ids, loss_mask=loss_mask, rollout_logp=rollout_logp,
        rewards=torch.tensor([float(t.reward) for t in trajectories]),
        group_ids=torch.tensor([t.group_id for t in trajectories]),
        episode_index=episode_index, rollout_topk_ids=topk_ids, rollout_topk_logp=topk_logp,
    )


def _collate_topk(trajectories: list[Trajectory], t_max: int) -> tuple[Tensor | None, Tensor | None]:
    """(B, T, k) ids and log-probs of the sampler's top-k (`Trajectory.rollout_topk`); (None, None) when no trace
    holds any."""
    k = max((len(ids) for t in trajectories for ids, _ in t.rollout_topk), default=0)
    if not k:
        return None, None
    ids = torch.zeros((len(trajectories), t_max, k), dtype=torch.long)
    logp = torch.full((len(trajectories), t_max, k), float("-inf"))
    for i, t in enumerate(trajectories):
        for pos, (top_ids, top_logp) in enumerate(t.rollout_topk):
            if top_ids:
                ids[i, pos] = top_ids[0]  # the padding repeats a present id: a scatter over the k ids stays exact
                ids[i, pos, : len(top_ids)] = torch.tensor(top_ids)
                logp[i, pos, : len(top_logp)] = torch.tensor(top_logp, dtype=torch.float32)
    return ids, logp


@dataclass(frozen=True)
class EpisodeRows:
    """index: (B,) long, the episode of each row, 0..E−1, non-decreasing (an episode's rows are consecutive)."""

    index: Tensor

    @classmethod
    def of(cls, episode_index: Tensor | None, rows: int) -> EpisodeRows:
        """From a batch's `episode_index` (None: every row its own episode)."""
        if episode_index is None:
            return cls(torch.arange(rows))
        if episode_index.shape != (rows,):
            raise ValueError(f"EpisodeRows: episode_index {tuple(episode_index.shape)} for {rows} rows")
        # numbered 0..E−1 in order: a sub-batch (`Batch.select`) keeps its rows' numbers in the whole batch
        return cls(torch.unique_consecutive(episode_index.long(), return_inverse=True)[1])

    @property
    def count(self) -> int:
        """E."""
        return int(self.index.max()) + 1 if self.index.numel() else 0

    @property
    def one_row_each(self) -> bool:
        return self.count == self.index.numel()

    def sum(self, x: Tensor) -> Tensor:
        """Σ over each episode's rows: (B, ...) → (E, ...)."""
        out = x.new_zeros((self.count, *x.shape[1:]))
        return out.index_add_(0, self.index.to(x.device), x)

    def per_row(self, x: Tensor) -> Tensor:
        """An episode value on each of its rows: (E, ...) → (B, ...)."""
        return x[self.index.to(x.device)]

    def total(self, x: Tensor) -> Tensor:
        """Each row's episode total of x: (B, ...) → (B, ...) (x itself with one row an episode)."""
        return x if self.one_row_each else self.per_row(self.sum(x))

    def first_rows(self) -> Tensor:
        """(E,) the first row of each episode."""
        first = torch.ones_like(self.index, dtype=torch.bool)
        first[1:] = self.index[1:] != self.index[:-1]
        return first.nonzero().squeeze(-1)


def row_seq_tokens(mask: Tensor, episodes: EpisodeRows) -> Tensor:
    """(B,) the tokens of m′ in each row's episode, from mask (B, T): the denominator of a row's share of its episode's
    token mean under seq-mean-token-mean, so an episode weighs once whatever its number of traces."""
    return episodes.total(mask.sum(-1))


def episode_count(mask: Tensor, episodes: EpisodeRows) -> Tensor:
    """Episodes with at least one token of m′ among the rows of `mask` (B, T): a sequence mean's denominator."""
    return (episodes.sum(mask.sum(-1)) > 0).sum()
