"""The `model.lora` section (LoRA RL with peft: trainer/runtime/lora.py) and the rules that check it.

`model.lora.r` > 0 trains low-rank adapters on the start model instead of all of its weights; 0 (the default) is
full fine-tuning. `lora_rules` is called by trainer/setup/validation.py's `validate_config` with its other rules,
so a bad value is one line naming the key before anything starts.
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass, field
from typing import Any

LORA_SYNC_MODES = ("auto", "merged", "adapter")
"""How the engine receives a LoRA policy (`model.lora.sync`; trainer/runtime/lora.py `choose_sync`)."""

DECODER_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
"""The linear layers of a Qwen2 / Qwen3 / Llama decoder layer: the default targets, and the ones vLLM serves
adapters on."""


@dataclass
class ModelLoraConfig:
    r: int = 0
    """LoRA rank; 0: off (full fine-tuning). > 0: only the adapters train (peft's LoraConfig r), the checkpoints hold
    them alone, and the KL reference is the start model with the adapters off (no second copy)."""
    alpha: float = 32.0
    """LoRA alpha: the update is (alpha / r)·B·A. 32 whatever the rank, as "LoRA Without Regret" (Thinking Machines,
    2025) holds it fixed, which makes the best learning rate nearly independent of r (about 10× full fine-tuning's)."""
    dropout: float = 0.0
    """Dropout on the adapters' input during the update forward (peft's lora_dropout). Above 0 the update's π_θ is
    noisy while the θ_old and sampler passes are not, so the ratio is no longer 1 at zero mismatch."""
    target_modules: list[str] = field(default_factory=lambda: list(DECODER_LINEARS))
    """Module names that get adapters (peft's target_modules): every linear layer of the decoder by default (Qwen2 /
    Llama names); "LoRA Without Regret" found attention-only adapters fall behind."""
    sync: str = "auto"
    """How the engine gets the policy: merged (the adapters merged into a copy of the weights, pushed through the
    usual weight sync) | adapter (vLLM serves the adapters on its base weights; each sync ships the adapters only) |
    auto (adapter where the engine is vLLM and vLLM serves these adapters, else merged). The run prints its choice
    and why."""
    export_merged: bool = False
    """Also write the merged model into each checkpoint (`<checkpoint>/merged/`, a Hugging Face directory that
    transformers, vLLM and `alprl eval` load); the checkpoint itself holds the adapters only."""


def lora_rules(cfg: Any) -> list[str]:
    """Violations of `cfg.model.lora` (cfg a `TrainConfig`), each naming the key and what is allowed."""
    lo, r, out = cfg.model.lora, cfg.rollout, []
    if lo.r < 0:
        out.append(f"model.lora.r={lo.r}: expected 0 (off: full fine-tuning) or a rank > 0")
    if not (math.isfinite(lo.alpha) and lo.alpha > 0):
        out.append(f"model.lora.alpha={lo.alpha!r}: expected a finite value > 0")
    if not 0 <= lo.dropout < 1:
        out.append(f"model.lora.dropout={lo.dropout!r}: expected 0 <= dropout < 1")
    if lo.sync not in LORA_SYNC_MODES:
        out.append(f"model.lora.sync={lo.sync!r}; valid: {', '.join(LORA_SYNC_MODES)}")
    if lo.r <= 0:
        return out
    if not lo.target_modules or not all(isinstance(m, str) and m for m in lo.target_modules):
        out.append(f"model.lora.target_modules={lo.target_modules!r}: expected module names, e.g. "
                   f"{','.join(DECODER_LINEARS)}")
    if importlib.util.find_spec("peft") is None:
        out.append("model.lora.r > 0 trains adapters with peft, which does not import: pip install -e '.[lora]'")
    if lo.sync == "adapter":
        if r.engine == "hf":
            out.append("model.lora.sync=adapter needs vLLM's adapters (rollout.engine=vllm); the transformers "
                       "engine samples with merged weights: set model.lora.sync=merged or auto")
        views = [f"rollout.{k}={getattr(r, k)}" for k in ("sampler_quant", "policy_lag") if getattr(r, k)]
        if views:
            out.append(f"model.lora.sync=adapter with {' and '.join(views)}: the sampler's views are of whole "
                       "weights; set model.lora.sync=merged or auto")
    return out
