"""Data parallelism: torchrun starts the processes, torch.distributed connects them, FSDP2 shards the policy.

One process per GPU (or per CPU worker under gloo). Every rank samples its own share of the step's GRPO groups
with its own engine, computes θ_old log-probs, advantages and corrections on its rows (a group never spans two
ranks, so group advantages need nothing from the others), and runs the same number of mini-batch and micro-batch
forwards as every other rank. What makes N ranks train like one process on the global batch:

- **global denominators**: the token / sequence counts of a mini-batch are all-reduced, so each rank's loss is
  its rows' sum over the *global* count and the sum over ranks is the one-process loss;
- **summed gradients**: FSDP2 reduce-scatters the gradients with divide factor 1 (a sum, not its default mean),
  and replicated trainable tensors outside FSDP (ALP's log σ) are all-reduced the same way;
- **one global grad norm**: the squared norms of the local shards are summed over ranks before clipping;
- **one overflow decision** (mixed_precision=fp16): the loss scaler's found-inf flag is all-reduced, so every
  rank skips the same steps and keeps the same scale (`build_grad_scaler`).

ALP noise is seeded by (step, mini-batch, micro-batch, rank), so ranks draw different noise. Without torchrun
(WORLD_SIZE unset or 1) nothing here creates a process group and the trainer runs as one process.

Legend: N ranks (world size).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.distributed.tensor import DTensor

from agents.perturbation import decoder_layers
from trainer.config.errors import ConfigError
from trainer.config.train_config import TrainConfig

if TYPE_CHECKING:
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

COLLECTIVE_TIMEOUT = timedelta(hours=2)  # rank 0 evaluates alone while the others wait in a barrier
HALF_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
"""distributed.mixed_precision → FSDP2's param_dtype (forward/backward); fp32 trains without a policy dtype."""
MIXED_PRECISIONS = ("fp32", *HALF_DTYPES)
"""distributed.mixed_precision's values: fp32, or a 16-bit param_dtype of `HALF_DTYPES`."""
FSDP_MODES = ("auto", "on", "off")
"""distributed.fsdp's values, as `init_distributed` reads them: auto (shard above one process or under 16-bit
compute), on, off."""
BACKENDS = ("auto", "nccl", "gloo")
"""distributed.backend's values: auto (nccl with CUDA, else gloo) or a torch.distributed backend `init_distributed`
passes on."""


@dataclass(frozen=True)
class DistContext:
    """Where this process stands: its rank among `world_size` and the device it trains on."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    fsdp: bool = False
    owns_group: bool = False  # this process created the process group (and destroys it at the end)

    @property
    def enabled(self) -> bool:
        """Whether a process group connects several ranks."""
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """Rank 0 writes logs, checkpoints' shared files and evaluation records."""
        return self.rank == 0

    def all_reduce_sum(self, tensor: Tensor) -> Tensor:
        """Σ over ranks, in place (a no-op on one process)."""
        if self.enabled:
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor

    def broadcast_object(self, obj: Any) -> Any:
        """Rank 0's `obj` on every rank."""
        if not self.enabled:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()

    def mean_metrics(self, metrics: dict[str, float]) -> dict[str, float]:
        """Each key's mean over the ranks that logged it (rank-local keys stay, averaged over their ranks)."""
        if not self.enabled:
            return metrics
        gathered: list[dict[str, float] | None] = [None] * self.world_size
        dist.all_gather_object(gathered, metrics)
        keys = dict.fromkeys(k for m in gathered for k in m)  # rank 0's order first
        out = {}
        for key in keys:
            values = [m[key] for m in gathered if key in m]
            out[key] = math.fsum(values) / len(values)
        return out


SINGLE = DistContext()


def launched_world_size() -> int:
    """Processes torchrun started (its WORLD_SIZE; 1 without torchrun)."""
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


def check_world_size(cfg: TrainConfig) -> int:
    """The world size of this launch, checked against the config (ConfigError names both and the fix)."""
    world, want, mode = launched_world_size(), cfg.distributed.world_size, cfg.distributed.fsdp
    if want and want != world:
        raise ConfigError(f"distributed.world_size={want} but this launch has {world} process(es) (WORLD_SIZE); "
                          f"start it with `torchrun --nproc-per-node {want} -m app.cli train ...` or set "
                          f"distributed.world_size=0 (as launched)")
    if world > 1 and mode == "off":
        raise ConfigError(f"distributed.fsdp=off with {world} processes: replicated weights are not supported; "
                          "set distributed.fsdp=auto")
    if world > 1:
        r = cfg.rollout
        if r.prompts_per_step % world:
            raise ConfigError(f"rollout.prompts_per_step={r.prompts_per_step} does not split over {world} ranks "
                              f"(groups never span two ranks); use a multiple of {world}")
        val = cfg.algo.mipu_val_prompts or r.prompts_per_step
        if cfg.algo.mipu_screen and val % world:
            raise ConfigError(f"MIPU validates on {val} prompts (algo.mipu_val_prompts), which do not split over "
                              f"{world} ranks; use a multiple of {world}")
    return world


def rank_share(items: list, ctx: DistContext) -> tuple[list, int]:
    """(this rank's contiguous share of a step's episodes, the index of its first): whole GRPO groups, since the
    group count is a multiple of the world size (`check_world_size`)."""
    per_rank = len(items) // ctx.world_size
    first = ctx.rank * per_rank
    return items[first: first + per_rank], first


def init_distributed(cfg: TrainConfig) -> DistContext:
    """Join torchrun's process group (gloo on CPU, nccl with CUDA) and pick this rank's device."""
    world = check_world_size(cfg)
    cuda = torch.cuda.is_available() and cfg.distributed.backend != "gloo"
    local_rank = int(os.environ.get("LOCAL_RANK", "0") or 0)
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    mode, half = cfg.distributed.fsdp, cfg.distributed.mixed_precision in HALF_DTYPES
    fsdp = mode == "on" or (mode == "auto" and (world > 1 or half))  # 16-bit compute is FSDP's MixedPrecisionPolicy
    if world == 1 and not fsdp:
        return DistContext(device=device)
    owns = not dist.is_initialized()
    if owns:
        backend = cfg.distributed.backend if cfg.distributed.backend != "auto" else ("nccl" if cuda else "gloo")
        if world == 1:  # distributed.fsdp=on without torchrun: a process group of one
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ.setdefault("MASTER_PORT", str(_free_port()))
            dist.init_process_group(backend, rank=0, world_size=1, timeout=COLLECTIVE_TIMEOUT)
        else:
            dist.init_process_group(backend, timeout=COLLECTIVE_TIMEOUT)
    return DistContext(rank=dist.get_rank(), world_size=dist.get_world_size(), local_rank=local_rank,
                       device=device, fsdp=fsdp, owns_group=owns)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def visible_devices(ctx: DistContext) -> Iterator[None]:
    """While a rank starts its colocated engine on a GPU node with several ranks: CUDA_VISIBLE_DEVICES names only
    the rank's own GPU, so the engine's spawned processes (vLLM's engine core) use that one. This process's CUDA
    view is fixed by then and unaffected."""
    if ctx.device.type != "cuda" or not ctx.enabled:
        yield
        return
    previous = os.environ.get("CUDA_VISIBLE_DEVICES")
    physical = previous.split(",")[ctx.local_rank] if previous else str(ctx.local_rank)
    os.environ["CUDA_VISIBLE_DEVICES"] = physical
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = previous


def close_distributed(ctx: DistContext) -> None:
    if ctx.owns_group and dist.is_initialized():
        dist.destroy_process_group()


def shard_policy(model: nn.Module, cfg: TrainConfig, ctx: DistContext) -> nn.Module:
    """FSDP2 over each decoder layer, then the root (embeddings, final norm, LM head), in place; with
    `distributed.activation_checkpointing` each layer recomputes its activations in backward."""
    if cfg.distributed.activation_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if not ctx.fsdp:
        return model
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
    # bf16 / fp16 compute, fp32 master weights (the sharded parameters) and fp32 gradient reductions
    policy = MixedPrecisionPolicy(param_dtype=HALF_DTYPES.get(cfg.distributed.mixed_precision),
                                  reduce_dtype=torch.float32)
    for layer in decoder_layers(model):
        fully_shard(layer, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    for module in model.modules():  # each fully_shard unit keeps its own reduction settings
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)  # losses are over the global token count already: sum, not mean
            module.set_force_sum_reduction_for_comms(True)  # a plain SUM (gloo has no pre-multiplied sum)
    return model


def global_counts(ctx: DistContext, *counts: Tensor) -> tuple[Tensor, ...]:
    """The mini-batch denominators summed over ranks (each a 0-dim tensor)."""
    if not ctx.enabled:
        return counts
    stacked = ctx.all_reduce_sum(torch.stack([c.detach().double() for c in counts]))
    return tuple(stacked[i].to(c.dtype) for i, c in enumerate(counts))


def reduce_replicated_grads(ctx: DistContext, params: Iterable[Tensor]) -> None:
    """Sum the gradients of trainable tensors outside FSDP (replicated on every rank) over ranks."""
    if not ctx.enabled:
        return
    for p in params:
        if not isinstance(p, DTensor) and p.grad is not None:
            ctx.all_reduce_sum(p.grad)


def clip_global_grad_norm(ctx: DistContext, params: list[Tensor], max_norm: float) -> float:
    """Clip to the global L2 norm over sharded (DTensor) and replicated gradients; returns the pre-clip norm."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return 0.0
    sharded = [g for g in grads if isinstance(g, DTensor)]
    local = [g for g in grads if not isinstance(g, DTensor)]
    squared = torch.zeros((), dtype=torch.float64)
    if sharded:  # DTensor's norm all-reduces the shards' partial sums
        norm = torch.nn.utils.get_total_norm(sharded)
        squared = squared + (norm.full_tensor() if isinstance(norm, DTensor) else norm).double().cpu() ** 2
    if local:  # replicated (already summed over ranks): counted once
        squared = squared + torch.nn.utils.get_total_norm(local).double().cpu() ** 2
    total = squared.sqrt()
    if math.isfinite(float(total)):
        scale = (max_norm / (total + 1e-6)).clamp(max=1.0)
        for g in grads:
            g.mul_(scale.to(device=g.device, dtype=g.dtype))
    return float(total)


# ---------------------------------------------------------------------------------------- fp16 loss scaling

FP16_GROWTH_INTERVAL = 400  # verl's ShardedGradScaler(growth_interval=400) when FSDP's param_dtype is fp16


def build_grad_scaler(cfg: TrainConfig, ctx: DistContext) -> ShardedGradScaler | None:
    """The dynamic loss scaler of `distributed.mixed_precision=fp16` (None otherwise), created once per run.

    torch's ShardedGradScaler, as verl uses: its `unscale_` all-reduces the found-inf flag over the process group,
    so every rank skips the same steps and keeps the same scale. fp16 always runs under FSDP (validation), so the
    group exists, a group of one without torchrun (`init_distributed`).
    """
    if cfg.distributed.mixed_precision != "fp16":
        return None
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler  # here: only fp16 runs import it

    # process_group=None is the default group at each call; the keyword's default (WORLD at import) would go stale
    # once a run in this process destroys its group and a later run makes another
    return ShardedGradScaler(ctx.device.type, init_scale=cfg.distributed.fp16_init_scale,
                             growth_interval=FP16_GROWTH_INTERVAL, process_group=None)


class LocalGrads:
    """The optimizer as a grad scaler is shown it: every gradient as a plain tensor, and the optimizer's `step`.

    torch's scalers unscale with one foreach call per device and dtype, and that call refuses FSDP2's DTensor
    gradients beside plain ones (ALP's log σ lives outside FSDP): "got mixed torch.Tensor and DTensor" (torch
    2.13, seen on CPU/gloo; DTensor's dispatch does not depend on the device). A DTensor's local shard is a view of its storage, so unscaling the shard in place
    unscales the gradient; a rank sees only its shards, which is why the found-inf flag is all-reduced.
    """

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizer = optimizer
        self.param_groups = [{"params": [SimpleNamespace(grad=_local(p.grad)) for p in group["params"]
                                         if p.grad is not None]} for group in optimizer.param_groups]

    def step(self) -> None:
        self.optimizer.step()


def _local(grad: Tensor) -> Tensor:
    return grad.to_local() if isinstance(grad, DTensor) else grad
