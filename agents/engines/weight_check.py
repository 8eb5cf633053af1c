"""Weight-sync forensics: a checksum per tensor on both sides of a push, and one refusal naming the first that differs.

A sync bug (a tensor lost in transport, a fused layer loaded half, a packed GEMM left on the old weights) does not
crash anything: the sampler simply samples from another policy and the mismatch metrics drift. prime-rl found its
NIXL transfer bug with per-tensor checksums of the trainer's and the inference server's weights; this is the same
check. After `update_weights` an engine with `verify_sync` compares, for every tensor it was pushed:

- the trainer's side: the tensor as pushed, in the dtype the engine stores (the cast is part of the push), and
- the engine's side: what it holds after loading, read back from its own copy (transformers: its parameters;
  vLLM: its parameters, and on CPU the matmul weights through the engine's own packed GEMM, agents/engines/
  vllm_readback.py), each a "reading"; a fused vLLM layer (qkv, gate-up) is split back into the checkpoint's names.

The checksum is (elements, Σx, Σx², Σ|x|) in float64: cheap on any device and order-independent up to float64
rounding, so both sides compute it from their own copy, whatever its layout. Two checksums agree when the element
counts match and Σx and Σx² agree to `RTOL` of Σ|x| and Σx² (summation order moves them by ~1e-15 relative).
A changed element moves Σx² by 2·x·δ; far below RTOL a corruption goes unseen, which is the price of not hashing
bytes (a byte hash would need both sides to hold the same bytes, which vLLM's packed GEMMs do not expose).

A mismatch raises `WeightSyncError` naming the first differing tensor in push order (and the reading that
differs); the trainer logs `rollout/weight_sync_ok` = 0 for the step and stops (trainer/loop.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import torch

Checksum = tuple[int, float, float, float]
"""(elements, Σx, Σx², Σ|x|) of a tensor, in float64."""
Reading = tuple[str, Checksum]
"""One way the engine reads a tensor back ("param": its stored copy; "gemm": the weight its matmul kernel uses)."""

RTOL = 1e-9


class WeightSyncError(RuntimeError):
    """The engine holds different weights from those the trainer pushed; the message names the first tensor."""


CHUNK_ELEMENTS = 1 << 22
"""Elements converted to float64 at once (32 MB): a 7B model's embedding whole would take 4 GB on the sampler's GPU."""


@torch.no_grad()
def checksum(t: torch.Tensor) -> Checksum:
    total, squares, absolute = 0.0, 0.0, 0.0
    for chunk in t.detach().reshape(-1).split(CHUNK_ELEMENTS):
        x = chunk.double()
        total, squares, absolute = total + float(x.sum()), squares + float(x.square().sum()), \
            absolute + float(x.abs().sum())
    return (t.numel(), total, squares, absolute)


def add(a: Checksum, b: Checksum) -> Checksum:
    """The checksum of two tensors' elements together (every field is a sum)."""
    return (a[0] + b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3])


def agrees(pushed: Checksum, held: Checksum) -> bool:
    n, s, sq, absum = pushed
    return (n == held[0] and abs(s - held[1]) <= RTOL * max(absum, held[3]) + 1e-30
            and abs(sq - held[2]) <= RTOL * max(sq, held[2]) + 1e-30)


def first_mismatch(pushed: Mapping[str, Checksum], held: Mapping[str, Iterable[Reading]]) -> str | None:
    """A one-line description of the first pushed tensor (in push order) whose engine readings do not all agree
    with the pushed checksum, or that the engine cannot read back; None when every one agrees."""
    for name, expected in pushed.items():
        readings = list(held.get(name, ()))
        if not readings:
            return f"{name}: the engine holds no tensor of that name to compare"
        for how, got in readings:
            if not agrees(expected, got):
                return (f"{name} ({how}): the trainer pushed {expected[0]} elements, sum {expected[1]:.9g}, sum of "
                        f"squares {expected[2]:.9g}; the engine holds {got[0]}, {got[1]:.9g}, {got[2]:.9g}")
    return None


def verify(pushed: Mapping[str, Checksum], held: Mapping[str, Iterable[Reading]], engine: str) -> None:
    """Raise `WeightSyncError` naming the first tensor whose readings differ (`first_mismatch`)."""
    bad = first_mismatch(pushed, held)
    if bad is not None:
        raise WeightSyncError(f"weight sync refused: {engine} does not hold the weights the trainer pushed; first "
                              f"differing tensor {bad}. The sampler would sample another policy than the trainer "
                              "scores (rollout.verify_weight_sync=false turns this check off)")
