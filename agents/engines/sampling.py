"""The sampler's truncation of the next-token distribution (top-k, then top-p), written once: the transformers
engine samples from it and the trainer replays it on its own logits (trainer/objective/truncation.py), so that
both compute the log-probs of the distribution the vLLM engine samples from.

vLLM's order and boundary rule (vllm/v1/sample/ops/topk_topp_sampler.py `apply_top_k_top_p_pytorch`, 0.32), on
logits already divided by the temperature:

- top-k: keep the tokens whose logit is ≥ the k-th largest (ties with it are kept); k = 0 or k ≥ V keeps all.
- top-p, on what top-k kept, renormalized: sort ascending, cumulative probability c; drop the tokens with
  c ≤ 1 − p, never the most probable one. Equivalently: keep a token while the mass strictly above it is < p,
  so the token that crosses p is kept. `1 − p` is computed in float32, as vLLM does with its p tensor.

The kept set is returned as a threshold, the smallest kept logit per position, so a caller masks `logits <
threshold` without a (…, V) index tensor. Departure: where fp32 logits tie exactly at the top-p boundary, every
tied token is kept; vLLM keeps those its sort happens to put last. vLLM's GPU Triton kernel (`topk_topp_triton`)
computes the same set by a pivot search; any token where the two sets still differ is counted by the trainer
(`rollout_corr/truncation_outside_frac`).

Legend: V vocabulary; `...` any leading shape.
"""

from __future__ import annotations

import torch
from torch import Tensor

SORT_CHUNK_ELEMENTS = 1 << 24
"""Logits sorted at once (rows × V): bounds the sort's values and int64 indices to ~200 MB on a 152k vocabulary."""


def keeps_all(top_p: float, top_k: int) -> bool:
    """Whether (top_p, top_k) keeps every token: the sampler's full softmax, nothing to replay."""
    return top_p >= 1.0 and top_k <= 0


@torch.no_grad()
def kept_threshold(logits: Tensor, *, top_p: float, top_k: int) -> Tensor:
    """The smallest logit the sampler keeps at each position, (..., 1); -inf where it keeps every token.
    logits (..., V): already divided by the temperature. No gradient (the set is piecewise constant)."""
    v = logits.shape[-1]
    k = top_k if 0 < top_k < v else 0
    flat = logits.reshape(-1, v)  # (N, V)
    if top_p >= 1.0 and not k:
        out = flat.new_full((flat.shape[0], 1), float("-inf"))
    elif top_p >= 1.0:  # top-k alone: no sort (vLLM's `apply_top_k_only`)
        out = flat.topk(k, dim=-1).values[:, -1:]  # (N, 1)
    else:
        rows = max(1, SORT_CHUNK_ELEMENTS // v)
        out = torch.cat([_nucleus_threshold(chunk, top_p, k) for chunk in flat.split(rows)])  # (N, 1)
    return out.reshape(*logits.shape[:-1], 1)


def _nucleus_threshold(logits: Tensor, top_p: float, k: int) -> Tensor:
    """(n, V) → (n, 1): vLLM's top-k then top-p on one chunk of rows, as the smallest kept logit."""
    s = logits.sort(dim=-1).values  # (n, V) ascending, as vLLM sorts
    v = s.shape[-1]
    if k:
        s = s.masked_fill(s < s[:, v - k: v - k + 1], float("-inf"))  # top-k first: top-p sees its renormalization
    cum = s.softmax(-1).cumsum(-1)  # (n, V), nondecreasing: the dropped tokens are a prefix
    drop = cum <= 1 - torch.tensor(top_p, dtype=torch.float32, device=s.device).to(cum.dtype)
    drop[:, -1] = False  # at least one token
    return s.gather(-1, drop.sum(-1, keepdim=True))  # (n, 1) the first kept value


def truncate_logits(logits: Tensor, *, top_p: float, top_k: int) -> Tensor:
    """logits (..., V) with every token the sampler drops set to -inf (the input itself when it keeps all)."""
    if keeps_all(top_p, top_k):
        return logits
    return logits.masked_fill(logits < kept_threshold(logits, top_p=top_p, top_k=top_k), float("-inf"))
