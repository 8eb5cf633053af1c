"""Engine interface: token ids in, token ids + sampling log-probs out.

An engine samples continuations of token-id prompts and reports, for every sampled token, its
log-probability under the distribution it actually sampled from (after temperature / top-p), so the
trainer can compare `rollout_logp` with its own recomputation.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal, Protocol

import torch

FinishReason = Literal["stop", "eos", "length"]


@dataclass
class GenerationRequest:
    prompt_ids: list[int]
    max_new_tokens: int
    stop_strings: list[str] = field(default_factory=list)
    """Generation ends right after the token that completes one of these strings (the token is kept)."""


@dataclass
class GenerationResult:
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason


class Engine(Protocol):
    def generate(self, requests: list[GenerationRequest], *, greedy: bool = False,
                 seed: int | None = None) -> list[GenerationResult]: ...

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None: ...
