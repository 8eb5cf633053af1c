"""Engine keywords for tests that build an engine themselves. The engines take the run config's sampler settings
keyword-only, without defaults of their own (tests/structure/test_defaults_once.py), so a test passes the config's
defaults, as the trainer passes its config, and states only the values it changes.
"""

from __future__ import annotations

from typing import Any

from trainer.config.rollout_config import RolloutConfig, engine_options
from trainer.config.train_config import TrainConfig


def hf_engine_kwargs(**changes: Any) -> dict[str, Any]:
    """`HFEngine` keywords: the `rollout.*` defaults of dtype, temperature, top_p and top_k, `changes` applied."""
    r = RolloutConfig()
    return {"dtype": r.dtype, "temperature": r.temperature, "top_p": r.top_p, "top_k": r.top_k, **changes}


HF_FP32 = hf_engine_kwargs(dtype="float32")
"""`HFEngine` keywords of the tests' usual engine: the config's sampler in fp32, the trainer's precision."""


def vllm_engine_kwargs(**changes: Any) -> dict[str, Any]:
    """`VLLMEngine` keywords: `hf_engine_kwargs()`, the run's seed and the vLLM options the trainer passes (its
    `engine_options`), `changes` applied."""
    return hf_engine_kwargs() | {"seed": TrainConfig().seed} | engine_options(RolloutConfig()) | changes


def make_engine_kwargs(**changes: Any) -> dict[str, Any]:
    """`make_engine` keywords: `vllm_engine_kwargs()` and the rollout schedule, `changes` applied."""
    return vllm_engine_kwargs() | {"schedule": RolloutConfig().schedule} | changes
