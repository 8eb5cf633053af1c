"""LoRA RL with peft (`model.lora.r` > 0; the section is trainer/config/lora_config.py).

The start model is wrapped by peft's `get_peft_model` (`apply_lora`): every base weight is frozen and each target
layer gets A (r × in) and B (out × r), its output `W·x + (α/r)·B·A·x`. A is drawn from a generator seeded by the
run's seed alone (peft's Kaiming init under `torch.random.fork_rng`), B is zero, so the first policy is the start
model exactly and every rank draws the same A. Only A and B reach the optimizer. Where the rest of the trainer
meets the adapters:

- **reference** (`algo.kl_coef` > 0): `AdaptersOff(policy)`, the policy's own forward inside peft's
  `disable_adapter()`, which is the start model: no second copy of the weights (trainer/reference.py's contract);
- **engine sync**, chosen once per run by `choose_sync` and printed with its reason:
  - *merged*: the engine holds plain weights and receives `merged_named_parameters`: for each adapted layer a new
    tensor W + peft's `get_delta_weight` (never `merge()` in place on the trained model), one weight at a time,
    gathered from FSDP shards like any weight (trainer/runtime/sampler_mismatch.py `full_named_parameters`
    streams it for a peft policy, so the sampler's fake quantization and lag apply unchanged);
  - *adapter*: vLLM serves the adapters on its base weights (sampler_mismatch.py `AdapterSync`: each sync writes
    the adapters in peft's layout, `write_adapter`, to a scratch directory and the engine loads them as a new
    version, agents/engines/vllm_lora.py);
- **checkpoints** (trainer/runtime/checkpoint.py): the adapters in peft's layout (`adapter_state`, `write_adapter`;
  `PeftModel.from_pretrained(base, dir)` loads them), the optimizer state over A and B, and with
  `model.lora.export_merged` a merged Hugging Face model; a resume loads the start model again and then the
  adapters (`load_adapter_weights`);
- **ALP** and FSDP2 find the decoder layers through the wrapper (agents/perturbation.py `decoder_layers`).

Legend: r rank, α alpha; A (r, in), B (out, r).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor, nn
from torch.distributed.tensor import DTensor

from envs.splits import derive_seed
from trainer.config.errors import ConfigError
from trainer.config.lora_config import DECODER_LINEARS, ModelLoraConfig

ADAPTER_WEIGHTS = "adapter_model.safetensors"  # peft's SAFETENSORS_WEIGHTS_NAME
BASE_PREFIX = "base_model.model."  # what PeftModelForCausalLM puts before the HF model's parameter names


def is_lora(model: nn.Module) -> bool:
    """Whether `model` is a peft-wrapped policy (peft is imported only by runs that wrap one)."""
    peft = sys.modules.get("peft")
    return peft is not None and isinstance(model, peft.PeftModel)


def apply_lora(model: nn.Module, lora: ModelLoraConfig, seed: int, base_path: str) -> nn.Module:
    """`model` (the start model, changed in place) wrapped by peft with `lora`'s adapters; `base_path` is recorded
    as the adapters' base model (absolute, so a checkpoint names it from anywhere)."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                        target_modules=list(lora.target_modules), bias="none", task_type="CAUSAL_LM",
                        base_model_name_or_path=str(Path(base_path).expanduser().resolve()))
    with torch.random.fork_rng(devices=[]):  # A's init: the same on every rank, the run's RNG stream untouched
        torch.manual_seed(derive_seed("lora-init", seed))
        try:
            policy = get_peft_model(model, config)
        except ValueError as err:  # peft: "Target modules {...} not found in the base model" (when none is)
            raise ConfigError(f"model.lora.target_modules={list(lora.target_modules)}: {err}") from None
    found = {name.rsplit(".", 1)[-1] for name in policy.targeted_module_names}
    if missing := [t for t in lora.target_modules if t not in found]:  # peft skips a name that matches nothing
        raise ConfigError(f"model.lora.target_modules={list(lora.target_modules)}: no module named "
                          f"{', '.join(missing)} in {type(model).__name__}; its adapted layers: {', '.join(sorted(found))}")
    return policy


def trainable_count(model: nn.Module) -> tuple[int, int]:
    """(trainable, all) parameters of the policy, peft's own count."""
    return model.get_nb_trainable_parameters()


def engine_name(name: str) -> str:
    """The name the engine and the start model's checkpoint know a policy parameter by: a peft policy's base
    weight `base_model.model.<hf name>` with `.base_layer` inside an adapted layer is `<hf name>`."""
    name = name.removeprefix(BASE_PREFIX)
    return name.replace(".base_layer.", ".")


def _whole(t: Tensor) -> Tensor:
    return t.full_tensor() if isinstance(t, DTensor) else t


@torch.no_grad()
def _merged(weight: Tensor, layer: nn.Module) -> Tensor:
    """W + (α/r)·B·A of one adapted layer as a new whole tensor (peft's `get_delta_weight`; W untouched)."""
    (adapter,) = layer.active_adapters
    return _whole(weight.detach() + layer.get_delta_weight(adapter))


def merged_named_parameters(model: nn.Module) -> Iterator[tuple[str, Tensor]]:
    """(engine name, whole tensor) of every base parameter of a peft policy, adapted weights merged with their
    adapters, one at a time (under FSDP every rank must iterate in step: each gathers its shards)."""
    from peft.tuners.lora import LoraLayer

    adapted = {f"{name}.base_layer.weight": module for name, module in model.named_modules()
               if isinstance(module, LoraLayer)}
    for name, p in model.named_parameters():
        if ".lora_" in name:
            continue
        layer = adapted.get(name)
        yield engine_name(name), (_merged(p, layer) if layer is not None else _whole(p.detach()))


def adapter_state(model: nn.Module) -> dict[str, Tensor]:
    """The adapters as peft saves them (names without the adapter's name), whole tensors on the CPU; collective
    under FSDP."""
    from peft import get_peft_model_state_dict

    state = get_peft_model_state_dict(model, save_embedding_layers=False)
    return {k: _whole(v.detach()).to("cpu", copy=True).contiguous() for k, v in state.items()}


def write_adapter(model: nn.Module, directory: Path, state: dict[str, Tensor] | None = None) -> None:
    """peft's save layout in `directory`: adapter_config.json and adapter_model.safetensors (`state`, default
    `adapter_state(model)`)."""
    directory.mkdir(parents=True, exist_ok=True)
    model.peft_config["default"].save_pretrained(str(directory))
    save_file(state if state is not None else adapter_state(model), str(directory / ADAPTER_WEIGHTS),
              metadata={"format": "pt"})


def load_adapter_weights(model: nn.Module, directory: str | Path) -> None:
    """Load the adapters a checkpoint holds into the (unsharded) peft policy: a resume."""
    from peft import set_peft_model_state_dict

    path = Path(directory) / ADAPTER_WEIGHTS
    if not path.is_file():
        raise ConfigError(f"--resume: {directory} holds no LoRA adapter ({ADAPTER_WEIGHTS}): it was written by a full "
                          "fine-tuning run; resume it with model.lora.r=0")
    result = set_peft_model_state_dict(model, load_file(str(path)))
    if result.unexpected_keys:
        raise ConfigError(f"--resume: the adapters in {directory} do not fit model.lora "
                          f"({len(result.unexpected_keys)} unexpected, e.g. {result.unexpected_keys[0]})")


class AdaptersOff(nn.Module):
    """The policy with its adapters off (and so their dropout), i.e. the start model: the KL reference without a
    second copy.

    Holds no parameters of its own: the policy is kept outside the module tree, so nothing iterates, shards or
    saves its weights twice. `train` / `eval` switch the policy's mode, as on a model of its own.
    """

    def __init__(self, policy: nn.Module) -> None:
        super().__init__()
        self.__dict__["policy"] = policy  # not a registered submodule
        self.training = policy.training

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        with self.policy.disable_adapter():
            return self.policy(*args, **kwargs)

    def train(self, mode: bool = True) -> AdaptersOff:
        self.training = mode
        self.policy.train(mode)
        return self

    def parameters(self, recurse: bool = True) -> Iterator[nn.Parameter]:
        return self.policy.parameters(recurse)


def choose_sync(lora: ModelLoraConfig, engine_kind: str, rollout: Any) -> tuple[str, str]:
    """(merged | adapter, why) for `model.lora.sync` on an engine of `engine_kind` (vllm | hf). `auto` takes
    adapter where vLLM serves these adapters (a sync then ships r·(in + out) numbers per layer, not in·out) and
    the sampler keeps no view of whole weights; an explicit `adapter` that cannot be served is a ConfigError."""
    if lora.sync == "merged":
        return "merged", "model.lora.sync=merged"
    if engine_kind != "vllm":
        if lora.sync == "adapter":
            raise ConfigError(f"model.lora.sync=adapter needs vLLM (rollout.engine={rollout.engine} resolved to "
                              "the transformers engine); set rollout.engine=vllm or model.lora.sync=merged")
        return "merged", "the transformers engine samples with merged weights"
    from agents.engines.vllm_lora import VLLM_LORA_RANKS, lora_rank_slot, vllm_lora_platform

    serves, platform = vllm_lora_platform()
    problems = [] if serves else [f"vLLM serves no LoRA adapters on {platform}"]
    if lora_rank_slot(lora.r) is None:
        problems.append(f"rank {lora.r} is above vLLM's largest, {VLLM_LORA_RANKS[-1]}")
    if others := sorted(set(lora.target_modules) - set(DECODER_LINEARS)):
        problems.append(f"vLLM serves adapters on the decoder's linear layers only, not {','.join(others)}")
    problems += [f"rollout.{k}={getattr(rollout, k)} views whole weights" for k in ("sampler_quant", "policy_lag")
                 if getattr(rollout, k)]
    if lora.sync == "adapter":
        if problems:
            raise ConfigError(f"model.lora.sync=adapter: {'; '.join(problems)}; set model.lora.sync=merged")
        return "adapter", "model.lora.sync=adapter"
    if problems:
        return "merged", "; ".join(problems)
    return "adapter", f"vLLM serves LoRA adapters on {platform}; a sync ships the adapters only"
