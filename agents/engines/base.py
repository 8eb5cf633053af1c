"""Engine interface: token ids in, token ids + sampling log-probs out.

An engine samples continuations of token-id prompts and reports, for every sampled token, its
log-probability under the distribution it actually sampled from (after temperature, top-k and top-p), so the
trainer can compare `rollout_logp` with its own recomputation, which replays the same truncation.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Literal, Protocol

import torch

FinishReason = Literal["stop", "eos", "length"]
"""stop: a stop string (a tool call) ended the turn; eos: eos or a stop token closed it; length: the budget ran out."""


@dataclass
class GenerationRequest:
    prompt_ids: list[int]
    max_new_tokens: int
    stop_strings: list[str] = field(default_factory=list)
    """Generation ends right after the token that completes one of these strings (the token is kept)."""
    stop_token_ids: list[int] = field(default_factory=list)
    """Generation also ends on one of these tokens, kept, finish reason "eos" (the rollout passes the turn's end:
    eos, the chat template's end-of-turn token, `rollout.stop_token_ids`; agents/control_tokens.py). Each engine
    also stops on the checkpoint's eos ids (tokenizer and generation config), the same set in both."""


@dataclass
class GenerationResult:
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason
    topk: list[tuple[list[int], list[float]]] | None = None
    """(R,) with `rollout.logprobs_topk` = k > 0: each position's k most probable token ids and their log-probs
    under the sampling distribution, most probable first (fewer where it keeps fewer); None when not asked."""


Seed = int | Sequence[int] | None
"""A call's sampling seed: one int for the whole call, one int per request, or None (unseeded)."""


class EngineDied(RuntimeError):
    """The engine's sampler process ended under it (killed, crashed, out of memory). Every waiting and later call
    raises it; the message names the process and how it ended. The run cannot continue: close the engine."""


class Engine(Protocol):
    concurrent_callers: bool
    """True when requests of calls made while others are running join the same running batch (vLLM); False when
    each call is one batched generation of its own (transformers), so only the turn-by-turn schedule fits."""
    overlap_episodes: bool
    """`run_episodes`' default schedule for this engine: overlapped (True) or turn by turn."""
    verify_sync: bool
    """Whether `update_weights` checks every push by checksums and raises `WeightSyncError` naming the first tensor
    the engine does not hold as pushed (agents/engines/weight_check.py)."""
    max_model_len: int
    """The longest prompt + response in tokens. A request is cut to fit it (finish reason "length"); a prompt
    that fills it gets no tokens, which ends its episode (agents/rollout.py)."""
    weight_version: int
    """The policy version of the weights it holds: the trainer's update count they come from (0: the start; the
    trainer sets it at every push, trainer/components.py). Each sampled token records it
    (`Trajectory.token_versions`)."""

    def submit(self, requests: list[GenerationRequest], *, greedy: bool = False,
               seed: Seed = None) -> list[Future[GenerationResult]]:
        """Start sampling one continuation per request; one future per request, in request order, each resolved
        with its result (or the engine's error) as soon as that request is done. The rollout drives every engine
        through this call."""
        ...

    def generate(self, requests: list[GenerationRequest], *, greedy: bool = False,
                 seed: Seed = None) -> list[GenerationResult]:
        """`submit` and wait for every result."""
        ...

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None: ...

    def load_adapter(self, path: str) -> None:
        """Sample from now on with the LoRA adapter in directory `path` (peft's save layout) on the weights the
        engine holds (vLLM started with `enable_lora`); an engine without adapters raises. A LoRA policy reaches
        the others as merged weights through `update_weights` (trainer/runtime/lora.py)."""
        ...

    def sleep(self) -> None:
        """Free the accelerator memory the sampler holds (its weights and KV cache) while the trainer updates;
        a no-op where there is nothing to free. `wake_up` must come before the next sync or generation."""
        ...

    def wake_up(self) -> None:
        """Undo `sleep` (a no-op when awake or where `sleep` does nothing)."""
        ...

    def close(self) -> None:
        """Stop the engine's threads and processes; bounded in time, idempotent."""
        ...
