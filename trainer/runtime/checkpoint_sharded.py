"""Sharded checkpoints under FSDP2: `torch.distributed.checkpoint` (DCP) beside the Hugging Face export.

`<checkpoint>/dcp/` holds every rank's shards of the model and optimizer state (DCP's own files and metadata),
`<checkpoint>/rng_rank<r>.pt` each rank's RNG states. The Hugging Face directory next to them (written by
rank 0 from the gathered full state dict) is what transformers, vLLM and `alprl eval` load; `--resume` on the
same world size loads the shards back into the sharded model and optimizer. trainer/runtime/checkpoint.py is the only
caller and writer of the checkpoint layout.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)

from trainer.config.errors import ConfigError
from trainer.runtime.distributed import DistContext

SHARDS_DIR = "dcp"
SHARD_OPTIONS = StateDictOptions(ignore_frozen_params=True)
"""The trained state only: a LoRA policy's frozen start weights are the start model's, never saved (with every
parameter trained, as in full fine-tuning, this is the whole model)."""


def rng_file(rank: int) -> str:
    return f"rng_rank{rank}.pt"


def full_model_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The whole model's state dict, gathered on CPU (every rank must call it; rank 0 uses it)."""
    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def save_shards(directory: Path, model: nn.Module, optimizer: torch.optim.Optimizer, ctx: DistContext,
                rng: dict[str, Any]) -> None:
    """Every rank writes its model and optimizer shards into `directory/dcp` and its RNG states."""
    model_state, optim_state = get_state_dict(model, optimizer, options=SHARD_OPTIONS)
    dcp.save({"model": model_state, "optimizer": optim_state}, checkpoint_id=str(directory / SHARDS_DIR))
    torch.save(rng, directory / rng_file(ctx.rank))


def load_shards(directory: Path, model: nn.Module, optimizer: torch.optim.Optimizer,
                ctx: DistContext) -> dict[str, Any]:
    """Load this rank's shards from `directory/dcp` into the sharded model and optimizer; returns its RNG states.

    The world size must be the one that saved them (DCP could reshard; the per-rank RNG files cannot)."""
    rng_path = directory / rng_file(ctx.rank)
    if not rng_path.exists() or (directory / rng_file(ctx.world_size)).exists():
        saved = len(list(directory.glob("rng_rank*.pt")))
        raise ConfigError(f"--resume: {directory} was saved by {saved} rank(s); this run has {ctx.world_size}. "
                         f"Resume with `torchrun --nproc-per-node {saved}`, or start a new run from its Hugging "
                         f"Face weights (model.path={directory})")
    model_state, optim_state = get_state_dict(model, optimizer, options=SHARD_OPTIONS)
    state = {"model": model_state, "optimizer": optim_state}
    dcp.load(state, checkpoint_id=str(directory / SHARDS_DIR))
    loaded = set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"],
                            options=StateDictOptions(ignore_frozen_params=True, strict=False))
    frozen = {name for name, p in model.named_parameters() if not p.requires_grad}  # not saved: see SHARD_OPTIONS
    missing = [key for key in loaded.missing_keys if key not in frozen]
    if missing or loaded.unexpected_keys:  # strict, but for the frozen weights
        raise RuntimeError(f"--resume: {directory / SHARDS_DIR} does not fit this model: missing {missing[:3]}, "
                           f"unexpected {loaded.unexpected_keys[:3]}")
    return torch.load(rng_path, weights_only=False)
