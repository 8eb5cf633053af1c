"""A loss `Batch` around hand-written response tensors, for tests that compute an objective by hand (the
objective's aggregation, the KL reference's term) without a model or a rollout."""

from __future__ import annotations

import torch

from trainer.objective.types import Batch


def response_batch(old: torch.Tensor, rollout: torch.Tensor, mask: torch.Tensor, adv: torch.Tensor,
                   width: int | None = None) -> Batch:
    """A Batch around response tensors (b, T); `width` pads the response with masked columns."""
    b, t = mask.shape
    if width is not None and width > t:
        pad = torch.zeros(b, width - t)
        old, rollout, mask, adv = (torch.cat([x, pad], 1) for x in (old, rollout, mask, adv))
        t = width
    return Batch(input_ids=torch.zeros(b, t + 1, dtype=torch.long), attention_mask=torch.ones(b, t + 1),
                 response_start=torch.ones(b, dtype=torch.long), response_len=torch.full((b,), t),
                 response_ids=torch.zeros(b, t, dtype=torch.long), loss_mask=mask, rollout_logp=rollout,
                 rewards=torch.zeros(b), group_ids=torch.zeros(b, dtype=torch.long), advantages=adv, old_logp=old)
