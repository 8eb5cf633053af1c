"""Engine interface: token ids in, token ids + sampling log-probs out.

An engine samples continuations of token-id prompts and reports, for every sampled token, its
log-probability under the distribution it actually sampled from (after temperature / top-p), so the
trainer can compare `rollout_logp` with its own recomputation.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
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


Seed = int | Sequence[int] | None
"""A call's sampling seed: one int for the whole call, one int per request, or None (unseeded)."""


class EngineDied(RuntimeError):
    """The engine's sampler process ended under it (killed, crashed, out of memory). Every waiting and later call
    raises it; the message names the process and how it ended. The run cannot continue: close the engine."""


class Engine(Protocol):
    concurrent_callers: bool
    """True when `generate` may be called from many threads at once and batches their requests together; such an
    engine also has `submit(requests, greedy=, seed=) -> list[Future]`, which the overlapped rollout uses."""
    overlap_episodes: bool
    """`run_episodes`' default schedule for this engine: overlapped (True) or turn by turn."""
    max_model_len: int
    """The longest prompt + response in tokens. A request is cut to fit it (finish reason "length"); a prompt
    that fills it gets no tokens, which ends its episode (agents/rollout.py)."""

    def generate(self, requests: list[GenerationRequest], *, greedy: bool = False,
                 seed: Seed = None) -> list[GenerationResult]: ...

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None: ...
