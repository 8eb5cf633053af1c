"""Reading vLLM's request outputs into the engine interface's `GenerationResult` (agents/engines/base.py; the
engine's `VLLMEngine._result` assembles it).

Per position vLLM reports the sampled token's log-prob and, with `SamplingParams(logprobs=k)`, the k most probable
tokens' (`FlatLogprobs`: the sampled entry first, then ranks 1..k; or a dict per position), all of the distribution
it sampled from (`processed_logprobs`: after temperature, top-k and top-p).

Legend: R sampled tokens of a request, k `rollout.logprobs_topk`.
"""

from __future__ import annotations

from typing import Any

from agents.engines.base import FinishReason


def top_logprobs(positions: Any, k: int) -> list[tuple[list[int], list[float]]]:
    """(R,) the k most probable tokens' ids and log-probs at each position, most probable first."""
    starts = getattr(positions, "start_indices", None)
    if starts is not None:  # FlatLogprobs: ranks 1..k follow the sampled token's entry
        out = []
        for start, end in zip(starts, positions.end_indices, strict=True):
            first = start + 1  # the sampled token's own entry comes first; it is among ranks 1..k when ranked so
            ranked = sorted((r, t, lp) for r, t, lp in zip(positions.ranks[first:end], positions.token_ids[first:end],
                                                           positions.logprobs[first:end], strict=True)
                            if r is not None and r <= k)
            out.append(([t for _, t, _ in ranked], [float(lp) for _, _, lp in ranked]))
        return out
    out = []
    for pos in positions:  # {token: Logprob(logprob, rank)}
        ranked = sorted((lp.rank, t, lp.logprob) for t, lp in pos.items() if lp.rank is not None and lp.rank <= k)
        out.append(([t for _, t, _ in ranked], [float(lp) for _, _, lp in ranked]))
    return out


def finish_reason(reason: str | None, stop_reason: int | str | None) -> FinishReason:
    """Map vLLM's (finish_reason, stop_reason) to ours: a stop string is "stop", eos / stop token "eos"."""
    if reason == "length":
        return "length"
    if reason == "stop":
        return "stop" if isinstance(stop_reason, str) else "eos"
    raise RuntimeError(f"vLLM request ended with finish_reason={reason!r} (aborted); check the engine log")
