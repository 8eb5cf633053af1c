"""The `distributed:` section of the run config: how the update is spread over processes (torchrun + FSDP2).

Kept beside `trainer/config/train_config.py` (which nests it) so that file stays about loading and coercion.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class DistributedConfig:
    world_size: int = 0
    """Processes (one per GPU) the run trains on. 0: as launched (torchrun's WORLD_SIZE, 1 without torchrun); a
    positive value must match what torchrun started, and is the world size `alprl train --dry-run` plans for."""
    fsdp: str = "auto"
    """auto: FSDP2 (`fully_shard`, each decoder layer then the root) when the world size is > 1 or
    mixed_precision is bf16 or fp16; on: also on one process; off: never (refused above one process)."""
    mixed_precision: str = "fp32"
    """fp32, bf16 or fp16. bf16: bf16 parameters for forward/backward, fp32 master weights, optimizer state and
    gradient reductions (FSDP2 MixedPrecisionPolicy(param_dtype=bfloat16); needs FSDP). fp16: the same with
    param_dtype=float16, plus dynamic loss scaling (each micro-batch loss × the scale before backward, gradients
    unscaled before clipping, a step whose gradients overflow skipped and the scale halved; doubled after
    growth_interval=400 clean steps, as verl). An fp16 sampler and trainer share fp16's 10-bit mantissa
    (arXiv 2510.26788, "Defeating the training-inference mismatch via FP16")."""
    fp16_init_scale: float = 65536.0
    """The loss scale fp16 starts from (torch's GradScaler default 2^16); restored from a checkpoint on resume."""
    activation_checkpointing: bool = False
    """Recompute each decoder layer's activations in backward (transformers' gradient checkpointing)."""
    backend: str = "auto"
    """torch.distributed backend: auto (nccl with CUDA, else gloo), nccl or gloo."""
    device_memory_gib: float = 0.0
    """Memory of one accelerator (80 for an 80 GB A100/H100). The memory plan of `--dry-run` is checked against it
    and a plan that does not fit is refused (exit 2); 0: not checked (CPU runs)."""
