"""Sampler-side mismatch you can dial on any machine: which weights the trainer pushes into the rollout engine.

The engine samples with its own copy of the policy; `SamplerSync` decides what that copy holds, while the
trainer keeps its own full-precision weights. Knobs (`RolloutConfig`):

- `sampler_quant` / `sampler_quant_group`: round-to-nearest, symmetric fake quantization of every nn.Linear
  weight inside the decoder layers, with the robustness evaluator's quantizers (`evaluation/robustness.py`
  `parse_quant` / `fake_quantize`, its `quant` family). Embeddings, the LM head, norms and biases are pushed as
  they are. Every push is quantized, the engine's first load included (`initial_push`: the engine starts from
  the full-precision model), so step 1's rollouts already come from the quantized policy. This is not vLLM's
  own `rollout.quantization` (real fp8 kernels, GPU only): the two compose, vLLM quantizes what it is pushed.
- `policy_lag` = k: the push after training step s carries the weights after step max(s − k, 0), so the
  rollouts of step s + 1 come from a policy k steps older than the trainer's, as asynchronous trainers produce.
  The trainer's θ_old stays current, so the mismatch metrics (`rollout_corr/*`) measure the lag. A step is one
  rollout batch (its `optim.num_minibatches` optimizer steps). The versions are CPU copies of the named
  parameters, k + 1 of them.
- `rollout.dtype` is the third knob; the engine casts what it is pushed into it.

What a resume loses: the lag's copies live in memory only (a checkpoint would hold k + 1 models). A resumed run
starts its queue afresh from the checkpoint's weights, so its first k steps sample with those and the lag ramps
up again as at the start of a run (`mismatch/policy_lag_effective` shows it). MIPU's screening needs the engine
to hold the candidate it screens, so config validation (`trainer/setup/rules.py`) refuses a lag with `algo.mipu_screen`.

What is streamed (`full_named_parameters`) is each parameter whole, gathered from its FSDP shards one at a time;
for a LoRA policy (`model.lora.r` > 0), the start model's weights with each adapted one merged with its adapter
(trainer/runtime/lora.py), so the knobs above apply to LoRA runs unchanged. `AdapterSync` is the other thing an
engine may hold: vLLM's own LoRA adapters on its start weights (`model.lora.sync=adapter`; no knobs).

The engines are not changed: imports point agents ← evaluation ← trainer, so the quantizers apply here, and
`Engine.update_weights` receives plain tensors.
"""

from __future__ import annotations

import shutil
import tempfile
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn
from torch.distributed.tensor import DTensor

from agents.engines.base import Engine
from agents.engines.hf import DTYPES
from evaluation.robustness import fake_quantize, parse_quant, target_linears
from trainer.runtime.lora import engine_name, is_lora, merged_named_parameters, write_adapter

Named = Iterable[tuple[str, Tensor]]


def full_named_parameters(model: nn.Module) -> Iterator[tuple[str, Tensor]]:
    """(name, full tensor) of every parameter, one all-gather per sharded parameter (never the whole model at
    once); every rank must iterate in step. Unsharded parameters are yielded as they are. A LoRA policy yields
    what an engine holds instead: the start model's weights under their own names, each adapted one merged with
    its adapter into a new tensor (trainer/runtime/lora.py `merged_named_parameters`)."""
    if is_lora(model):
        yield from merged_named_parameters(model)
        return
    for name, p in model.named_parameters():
        yield name, (p.full_tensor() if isinstance(p, DTensor) else p)


@dataclass(frozen=True)
class SamplerQuant:
    """One fake-quantization setting: `kind` "int" | "e4m3" | "e5m2", `bits`, `group_size` (None: per row)."""

    name: str
    kind: str
    bits: int
    group_size: int | None


def parse_sampler_quant(name: str, group_size: int = 0) -> SamplerQuant | None:
    """`rollout.sampler_quant` / `sampler_quant_group` → a setting, None when off; ValueError on a bad name."""
    if not name:
        return None
    if "-g" in name:  # parse_quant's suffix: one way to set the group, the config key
        raise ValueError(f"rollout.sampler_quant={name!r}: give the group size with rollout.sampler_quant_group "
                         f"(e.g. rollout.sampler_quant={name.split('-g')[0]} rollout.sampler_quant_group="
                         f"{name.split('-g')[-1]})")
    try:
        kind, bits, _ = parse_quant(name)
    except ValueError:
        raise ValueError(f"rollout.sampler_quant={name!r} is not a fake quantization; valid: empty (none), int8, "
                         "int4 (any of int2..int8), fp8 (= fp8_e4m3), fp8_e5m2") from None
    return SamplerQuant(name, kind, bits, group_size or None)


def quantized_names(model: nn.Module) -> frozenset[str]:
    """Names of the weights `fake_quantize` applies to (the decoder layers' nn.Linear), as the engine receives
    them (`full_named_parameters`)."""
    ids = {id(lin.weight) for _, lin in target_linears(model)}
    rename = engine_name if is_lora(model) else str
    return frozenset(rename(name) for name, p in model.named_parameters() if id(p) in ids)


def cpu_copy(model: nn.Module) -> dict[str, Tensor]:
    """The named parameters (the names engines take: tied weights once), whole (gathered when FSDP shards them),
    cloned to the CPU."""
    return {name: p.detach().to("cpu", copy=True) for name, p in full_named_parameters(model)}


def dtype_bits(name: str) -> int:
    """Bits of a rollout dtype name (bf16 → 16, float32 → 32); 0 for vLLM's "auto" (the model's)."""
    return torch.finfo(DTYPES[name]).bits if name in DTYPES else 0


class SamplerSync:
    """What the engine holds: the trainer's weights, fake-quantized and/or `lag` training steps old.

    `initial_push` once after the engine is built, `push_update` after every update (each call is one new policy
    version), `push_trainer_weights` / `push_current` around held-out evaluation, `metrics` at rollout time.
    """

    def __init__(self, model: nn.Module, quant: SamplerQuant | None = None, lag: int = 0, dtype: str = ""):
        self.quant = quant
        self.lag = lag
        self.dtype_bits = dtype_bits(dtype)
        self.names = quantized_names(model) if quant else frozenset()
        self.version = 0  # updates the trainer made since this object was built (a resume starts at 0)
        # (version, CPU weights), oldest first; the engine holds versions[0]
        self.versions: deque[tuple[int, dict[str, Tensor]]] = deque(maxlen=lag + 1)
        if lag:
            self.versions.append((0, cpu_copy(model)))
        self.rel_err = 0.0

    @property
    def differs(self) -> bool:
        """Whether the engine's weights differ from the trainer's beyond the dtype cast."""
        return self.quant is not None or self.lag > 0

    def pushed_version(self) -> int:
        return self.versions[0][0] if self.lag else self.version

    def initial_push(self, engine: Engine, model: nn.Module) -> None:
        """The engine loaded the full-precision model: replace it by the quantized view (nothing else to do)."""
        if self.quant is not None:
            engine.update_weights(self._view(full_named_parameters(model)))

    def push_update(self, engine: Engine, model: nn.Module) -> None:
        """After an update: record it as a new version and push the one `lag` versions old (or the oldest kept)."""
        self.version += 1
        if self.lag:
            self.versions.append((self.version, cpu_copy(model)))  # the deque drops the one lag + 1 old
        self.push_current(engine, model)

    def push_current(self, engine: Engine, model: nn.Module) -> None:
        """Push the sampler's view of the current version again (after `push_trainer_weights`)."""
        source = self.versions[0][1].items() if self.lag else full_named_parameters(model)
        engine.update_weights(self._view(source))

    def push_trainer_weights(self, engine: Engine, model: nn.Module) -> None:
        """The trainer's own weights, unquantized and current (held-out evaluation measures the trained policy)."""
        engine.update_weights(full_named_parameters(model))

    def metrics(self) -> dict[str, float]:
        """`mismatch/*`: the knobs and what the engine holds now (call at rollout time, before the update)."""
        q = self.quant
        return {"mismatch/sampler_quant_bits": float(q.bits if q else 0),
                "mismatch/sampler_quant_group": float((q.group_size or 0) if q else 0),
                "mismatch/sampler_quant_rel_err": self.rel_err,
                "mismatch/sampler_dtype_bits": float(self.dtype_bits),
                "mismatch/policy_lag": float(self.lag),
                "mismatch/policy_lag_effective": float(self.version - self.pushed_version())}

    def _view(self, named: Named) -> Iterator[tuple[str, Tensor]]:
        """Stream the tensors with the target weights fake-quantized; sets `rel_err` (‖q − w‖ / ‖w‖ over them)."""
        err = ref = 0.0
        for name, tensor in named:
            if name in self.names:
                w = tensor.detach()
                q = fake_quantize(w, self.quant.kind, self.quant.bits, self.quant.group_size)
                err += float((q.float() - w.float()).pow(2).sum())
                ref += float(w.float().pow(2).sum())
                yield name, q
            else:
                yield name, tensor
        self.rel_err = (err / ref) ** 0.5 if ref else 0.0

    def close(self) -> None:
        """Nothing to release here (`AdapterSync` removes its scratch directory)."""


class AdapterSync(SamplerSync):
    """What a vLLM engine serving LoRA adapters holds: the start model's weights (loaded from its directory) and
    the policy's current adapters, pushed after every update as a new adapter version (agents/engines/vllm_lora.py).
    SamplerSync's interface and metrics without its views (validation refuses fake quantization and a lag with
    adapters)."""

    def __init__(self, model: nn.Module, dtype: str = "") -> None:
        super().__init__(model, None, 0, dtype)
        self.root = Path(tempfile.mkdtemp(prefix="alprl-lora-"))  # this rank's engine reads its own copy
        self.pushes = 0

    def initial_push(self, engine: Engine, model: nn.Module) -> None:
        self.push_current(engine, model)

    def push_current(self, engine: Engine, model: nn.Module) -> None:
        self.pushes += 1
        path = self.root / f"v{self.pushes}"
        write_adapter(model, path)  # collective under FSDP: every rank gathers the adapters for its engine
        engine.load_adapter(str(path))
        shutil.rmtree(self.root / f"v{self.pushes - 1}", ignore_errors=True)  # loaded and replaced

    def push_trainer_weights(self, engine: Engine, model: nn.Module) -> None:
        self.push_current(engine, model)

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
