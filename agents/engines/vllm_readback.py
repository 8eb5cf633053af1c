"""What a vLLM worker holds, read back per checkpoint tensor name for the weight-sync check (agents/engines/
weight_check.py). Runs inside the worker (`WeightSyncExtension.alprl_checksums`, agents/engines/vllm_sync.py).

- Every parameter is read as stored ("param"); a fused layer (vLLM's `packed_modules_mapping`: qkv_proj,
  gate_up_proj) is split back along its output rows by the layer's `output_sizes` into the checkpoint's names
  (q_proj, k_proj, v_proj; gate_proj, up_proj). An embedding's vocabulary padding is left out.
- On vLLM-CPU a matmul's weight lives in a packed oneDNN / sgl handle (`module.cpu_linear`) and the parameter
  is often emptied; the weight the kernel multiplies by is read through the kernel itself ("gemm"): the
  identity matrix times Wᵀ, in chunks of rows, is Wᵀ exactly (one product with 1, the rest with 0). A tied LM head
  (its own module, the embedding's weight) is read under the embedding's name, its handle included: the one vLLM's
  reload leaves stale unless repacked (vllm_sync.py).

Tensor parallelism is not handled (a worker holds shards); the engine checks only with one worker.

Legend: K a matmul's input features, N its output features, c rows of the identity per chunk.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import nn

from agents.engines.weight_check import Checksum, Reading, add, checksum

IDENTITY_CHUNK_ELEMENTS = 1 << 24
"""Elements of one chunk of the GEMM read-back's output (c × N), ~64 MB in fp32."""


def engine_readings(model: nn.Module) -> dict[str, list[Reading]]:
    """{checkpoint name: [(how, checksum), ...]} of every parameter of a vLLM model."""
    packed = dict(getattr(model, "packed_modules_mapping", {}) or {})
    out: dict[str, list[Reading]] = {}
    first_name: dict[int, str] = {}  # a tied parameter (the LM head's weight is the embedding's) → its first name
    for prefix, module in model.named_modules():
        prefix = prefix.replace(".base_layer", "")  # a LoRA-wrapped layer holds the checkpoint's weight inside
        for pname, param in module.named_parameters(recurse=False):
            own = f"{prefix}.{pname}"
            tied_to = first_name.setdefault(id(param), own)  # the trainer pushes a tied tensor once, by that name
            readings: list[tuple[str, dict[str, Checksum]]] = []
            if param.numel():
                readings.append(("param", _split_rows(param, module, prefix, pname, packed)))
            if pname == "weight" and hasattr(module, "cpu_linear"):
                readings.append(("gemm", _gemm_readback(module, prefix, packed)))
            for how, sums in readings:
                for name, value in sums.items():
                    out.setdefault(tied_to if name == own else name, []).append((how, value))
    return out


def _sources(module: nn.Module, prefix: str, pname: str, packed: dict[str, list[str]]) -> list[tuple[str, int]]:
    """(checkpoint name, rows) of each part of the parameter's output rows, in order; one part when not fused."""
    base, _, leaf = prefix.rpartition(".")
    sizes = getattr(module, "output_sizes", None)
    if leaf in packed and sizes and len(sizes) == len(packed[leaf]):
        where = f"{base}." if base else ""
        return [(f"{where}{src}.{pname}", int(n)) for src, n in zip(packed[leaf], sizes, strict=True)]
    rows = getattr(module, "org_vocab_size", None)  # an embedding: the checkpoint's rows, not the padding
    return [(f"{prefix}.{pname}", int(rows) if rows else -1)]


def _split_rows(t: torch.Tensor, module: nn.Module, prefix: str, pname: str,
                packed: dict[str, list[str]]) -> dict[str, Checksum]:
    out, start = {}, 0
    for name, rows in _sources(module, prefix, pname, packed):
        stop = t.shape[0] if rows < 0 else start + rows
        out[name] = checksum(t[start:stop])
        start = stop
    return out


@torch.no_grad()
def _gemm_readback(module: nn.Module, prefix: str, packed: dict[str, list[str]]) -> dict[str, Checksum]:
    """Checksums of Wᵀ = cpu_linear(I) per checkpoint name, without holding Wᵀ whole."""
    weight = module.weight
    k = weight.shape[1] if weight.numel() else int(module.input_size_per_partition)
    parts = _sources(module, prefix, "weight", packed)
    n_out = weight.shape[0] if weight.numel() else int(module.output_size_per_partition)
    chunk = max(1, IDENTITY_CHUNK_ELEMENTS // max(1, n_out))
    sums: dict[str, Checksum] = {}
    for rows in _identity_chunks(k, chunk, weight.dtype, weight.device):
        wt = module.cpu_linear(rows, weight, None)  # (c, N) = rows of Wᵀ
        start = 0
        for name, n in parts:
            stop = wt.shape[1] if n < 0 else start + n
            part = checksum(wt[:, start:stop])
            sums[name] = add(sums[name], part) if name in sums else part
            start = stop
    return sums


def _identity_chunks(k: int, chunk: int, dtype: torch.dtype, device: torch.device) -> Iterator[torch.Tensor]:
    for start in range(0, k, chunk):
        stop = min(k, start + chunk)
        rows = torch.zeros((stop - start, k), dtype=dtype, device=device)  # (c, K)
        rows[torch.arange(stop - start), torch.arange(start, stop)] = 1
        yield rows
