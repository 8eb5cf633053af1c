"""Whole parameters of a model that FSDP2 may have sharded: what weight sync and sampler views stream.

Kept apart from trainer/runtime/distributed.py (which reads the run config) so the sampler's view, which the config's
validation imports, does not import the config back.
"""

from __future__ import annotations

from collections.abc import Iterator

from torch import Tensor, nn
from torch.distributed.tensor import DTensor


def full_named_parameters(model: nn.Module) -> Iterator[tuple[str, Tensor]]:
    """(name, full tensor) of every parameter, one all-gather per sharded parameter (never the whole model at
    once); every rank must iterate in step. Unsharded parameters are yielded as they are."""
    for name, p in model.named_parameters():
        yield name, (p.full_tensor() if isinstance(p, DTensor) else p)
