"""A per-GPU memory plan of a training run, printed by `alprl train --dry-run` and checked against the device.

`plan_memory(cfg)` estimates the bytes one rank (one GPU) holds for the configured world size
(`distributed.world_size`, 0 → 1), from the start model's shape (`trainer/runtime/model_shape.py`) and the config alone:
nothing is loaded. Two phases peak differently and both are reported:

- update peak: sharded fp32 master weights, gradients and AdamW moments, FSDP's unsharded layers in flight, the
  frozen reference model (algo.kl_coef > 0), one micro-batch's activations and logits, and what the sampler keeps
  while the trainer updates (a small residual with rollout.enable_sleep_mode, else its whole share);
- rollout peak: the persistent training state (gradients are freed by `zero_grad(set_to_none=True)` in
  trainer/update.py) plus the sampler awake (vLLM takes rollout.gpu_memory_utilization × device memory).

The check uses the larger. With LoRA (`model.lora.r` > 0, trainer/runtime/lora.py) the plan is the LoRA run's, and
`format_plan` prints the full fine-tuning plan of the same recipe beside it: the start weights stay (frozen, fp32),
while gradients and AdamW moments shrink to the adapters' and the reference model goes (it is the policy with its
adapters off). Every row is an estimate with its formula and source in a comment; what is left out
(allocator fragmentation, the RMSNorm fp32 upcasts, transient copies inside kernels) is why a plan that fits by a
hair may still not. `format_plan` renders the table; `refusal(plan)` is the one-line error of a plan that does not fit.

Without CUDA the same bytes land in host memory: `host_memory_warning(cfg)` is the one line a run (and
`--dry-run`) logs when the ranks' plan exceeds the machine's RAM, e.g. a 151,936-token vocabulary's logits at the
demo's micro-batch of 64.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from trainer.config.errors import ConfigError
from trainer.runtime.model_shape import ModelShape, model_shape

GIB = 1024**3
PROMPT_TOKENS = 512
"""Prompt length assumed when rollout.max_model_len is not set (else the prompt is what the context leaves after
rollout.max_response_tokens)."""
SLEEP_RESIDUAL_GIB = 1.0
"""What a sleeping vLLM keeps on the GPU: level-1 sleep offloads the weights to host memory and drops the KV cache
(agents/engines/vllm.py); its CUDA context and graphs stay. An assumption, not a measurement."""
RUNTIME_GIB = 1.0
"""The trainer process's CUDA context and NCCL buffers (an assumption; counted when device memory is given)."""


@dataclass
class Row:
    name: str
    update: int  # bytes at the update peak
    rollout: int  # bytes while the sampler is awake
    note: str  # how it is computed


@dataclass
class MemoryPlan:
    model: str
    params: int
    world: int
    precision: str  # compute dtype: bf16 | fp16 | fp32
    fsdp: bool
    micro_batch: int
    seq_tokens: int  # prompt + response tokens of one sequence
    checkpointing: bool
    rows: list[Row] = field(default_factory=list)
    device_bytes: int | None = None
    lora_rank: int = 0  # model.lora.r (0: full fine-tuning)
    adapter_params: int = 0  # the LoRA adapters' parameters (A and B of every targeted layer)
    full: MemoryPlan | None = None  # a LoRA plan's full fine-tuning counterpart, printed beside it

    @property
    def update_peak(self) -> int:
        return sum(r.update for r in self.rows)

    @property
    def rollout_peak(self) -> int:
        return sum(r.rollout for r in self.rows)

    @property
    def total(self) -> int:
        """Bytes per GPU the check uses: the larger phase."""
        return max(self.update_peak, self.rollout_peak)

    @property
    def fits(self) -> bool | None:
        return None if self.device_bytes is None else self.total <= self.device_bytes


def _activation_elems(s: ModelShape) -> int:
    """Elements one token keeps for backward in one decoder layer (HF Qwen2 with SDPA/flash attention).

    Adapted from Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models", §4.1),
    whose 34·s·b·h + 5·a·s²·b bytes per layer (16-bit GPT layer) count: norm inputs, the QKV input, Q and K, the
    attention scores, softmax and dropout, V, the output-projection input, the MLP input, the 4h GeLU input and
    output, and dropout masks. Here: no dropout (Qwen2 trains with none) and fused attention (no s² scores, it keeps
    Q, K, V, its output and a log-sum-exp), and a SwiGLU MLP of width F:
      attention: norm input D + norm output D (the q/k/v input) + Q, K, V as SDPA keeps them (D + 2·kv)
                 + SDPA output D + its contiguous copy, o_proj's input, D + 2·kv of RoPE/GQA intermediates
                 (rounded; transformers versions that repeat K and V to H heads before SDPA keep ~2·D more)
                                                                                           = 5·D + 4·kv
      MLP:       norm input D + norm output D (gate/up input) + gate F + silu(gate) F + up F
                 + silu(gate)·up F (down_proj input)                                      = 2·D + 4·F
    """
    return 7 * s.hidden + 4 * s.kv_dim + 4 * s.intermediate


def _seq_tokens(cfg: Any) -> int:
    """Tokens of one padded sequence: prompt + rollout.max_response_tokens (a micro-batch pads to its longest)."""
    r = cfg.rollout
    prompt = r.max_model_len - r.max_response_tokens if r.max_model_len > r.max_response_tokens else PROMPT_TOKENS
    return prompt + r.max_response_tokens


def _state_rows(s: ModelShape, cfg: Any, shard: int, fsdp: bool, e: int, rank: int = 0) -> list[Row]:
    """Weights, gradients, optimizer state, FSDP's gathered copy, the reference model; `rank` > 0: LoRA's."""
    p = s.params()
    per = (f"/ {shard} (FSDP shards)" if shard > 1 else "(FSDP, one shard)") if fsdp else "(whole: no FSDP)"
    a_layer = s.lora_layer_params(rank, cfg.model.lora.target_modules) if rank else 0
    a = s.layers * a_layer  # the adapters' parameters: what trains under LoRA
    trained, what = (a, "A") if rank else (p, "P")  # A: adapter parameters
    rows = [Row("master parameters fp32", (p + a) * 4 // shard, (p + a) * 4 // shard,
                f"(P + A) × 4 B {per}, the start weights frozen" if rank else f"P × 4 B {per}"),
            Row("gradients fp32", trained * 4 // shard, 0, f"{what} × 4 B {per}; freed before rollout (set_to_none)"),
            Row("AdamW moments fp32", trained * 8 // shard, trained * 8 // shard,
                f"2 × {what} × 4 B {per} (exp_avg, exp_avg_sq)")]
    if fsdp:  # FSDP2 keeps the root (embeddings, norm, head) unsharded through forward+backward and all-gathers
        # each decoder layer as it runs, prefetching the next: about two layers at a time, plus their unsharded
        # fp32 gradients before the reduce-scatter (under LoRA the adapters' only)
        unsharded = s.root_params() + 2 * (s.layer_params() + a_layer)
        grads = 2 * a_layer if rank else unsharded
        note = (f"(embed/head + 2 layers) × {e} B params + their adapters × 4 B grads" if rank else
                f"(embed/head + 2 layers) × ({e} B params + 4 B grads)")
        rows.append(Row("FSDP all-gathered copy", unsharded * e + grads * 4, 0, note))
    if cfg.algo.kl_coef > 0 and rank:  # trainer/runtime/lora.py AdaptersOff: the policy with its adapters off
        rows.append(Row("reference model", 0, 0, "the policy with its adapters off: no copy"))
    elif cfg.algo.kl_coef > 0:  # trainer/reference.py: the frozen starting policy of the KL term
        dtype = cfg.distributed.mixed_precision if e == 2 else "fp32"
        rows.append(Row(f"reference model {dtype}", p * e // shard, p * e // shard, f"P × {e} B {per}"))
    return rows


def _batch_rows(s: ModelShape, cfg: Any, e: int, checkpointing: bool, rank: int = 0) -> list[Row]:
    """One micro-batch's activations and logits (activations are not sharded: each rank runs its own); under LoRA
    each adapted layer also keeps its r-wide A·x."""
    b, seq, r_tokens = cfg.optim.micro_batch_size, _seq_tokens(cfg), cfg.rollout.max_response_tokens
    tokens = b * seq
    layer = tokens * _activation_elems(s) * e  # one layer's saved activations (see _activation_elems)
    if checkpointing:  # keep each layer's input; backward recomputes one layer at a time
        act, note = tokens * s.hidden * e * s.layers + layer, f"{tokens} tok × D × {e} B × L + one layer's"
    else:
        act, note = layer * s.layers, f"{tokens} tok × (7D + 4kv + 4F) × {e} B × L (Korthikanti 2022, adapted)"
    # trainer/objective/logprobs.py: the model's logits over every position (compute dtype, freed after the gather), then the
    # response positions' fp32 logits / temperature and their log-softmax, both kept for backward
    logits = tokens * s.vocab * e + 2 * b * r_tokens * s.vocab * 4
    rows = [Row("activations (micro-batch)", act, 0, note),
            Row("logits (micro-batch)", logits, 0, f"{tokens} tok × V × {e} B + 2 × {b * r_tokens} resp tok × V × 4 B")]
    if rank:
        n = len(set(cfg.model.lora.target_modules) & set(s.linear_dims()))
        layers = 1 if checkpointing else s.layers
        rows.append(Row("adapter activations", tokens * rank * n * e * layers, 0,
                        f"{tokens} tok × r × {n} adapted layers × {e} B × {'one layer' if checkpointing else 'L'}"))
    return rows


def _sampler_row(s: ModelShape, cfg: Any, device: int | None) -> Row:
    """The rollout engine's share of this GPU, asleep (update) and awake (rollout)."""
    r = cfg.rollout
    # engine auto picks vLLM where it imports (agents/engines/__init__.py): assumed on a GPU, i.e. device memory given
    if r.engine == "hf" or (r.engine == "auto" and device is None):
        return Row("sampler (transformers)", 0, 0, "samples with the policy's weights; KV cache not counted")
    if device is not None:
        awake, how = int(r.gpu_memory_utilization * device), f"{r.gpu_memory_utilization:g} × device memory"
    else:  # unknown device: at least the rollout weights
        awake = s.params() * (4 if r.dtype == "float32" else 2) // r.tensor_parallel_size
        how = "device memory unknown: its weights only"
    if r.enable_sleep_mode:
        asleep, how = int(SLEEP_RESIDUAL_GIB * GIB), f"awake {how}; asleep ~{SLEEP_RESIDUAL_GIB:g} GiB (assumed)"
    else:
        asleep, how = awake, f"{how}, awake throughout (no sleep mode)"
    return Row("sampler (vLLM)", asleep, awake, how)


def plan_memory(cfg: Any, lora: bool = True) -> MemoryPlan:
    """Per-GPU memory of `cfg`'s run at its configured world size; raises `ConfigError` when the shape is unknown.
    With `model.lora.r` > 0 the LoRA run's, its full fine-tuning counterpart in `.full` (`lora=False`: that one)."""
    d, s = cfg.distributed, model_shape(cfg)
    world = d.world_size or 1
    # trainer/config/dist_config.py's fsdp modes; bf16 and fp16 need FSDP2's MixedPrecisionPolicy (validation refuses them
    # with fsdp=off), so auto with either is planned as FSDP even on one process
    half = d.mixed_precision in ("bf16", "fp16")
    fsdp = d.fsdp == "on" or (d.fsdp == "auto" and (world > 1 or half))
    shard = world if fsdp else 1
    e = 2 if half else 4  # bytes per element of the forward/backward compute
    device = int(d.device_memory_gib * GIB) if d.device_memory_gib > 0 else None
    rank = cfg.model.lora.r if lora else 0
    rows = [*_state_rows(s, cfg, shard, fsdp, e, rank), *_batch_rows(s, cfg, e, d.activation_checkpointing, rank),
            _sampler_row(s, cfg, device)]
    if device is not None:
        rows.append(Row("CUDA context, NCCL", int(RUNTIME_GIB * GIB), int(RUNTIME_GIB * GIB), "assumed"))
    return MemoryPlan(model=s.name, params=s.params(), world=world, precision=d.mixed_precision if half else "fp32",
                      fsdp=fsdp, micro_batch=cfg.optim.micro_batch_size, seq_tokens=_seq_tokens(cfg),
                      checkpointing=d.activation_checkpointing, rows=rows, device_bytes=device, lora_rank=rank,
                      adapter_params=s.layers * s.lora_layer_params(rank, cfg.model.lora.target_modules),
                      full=plan_memory(cfg, lora=False) if rank else None)


def _gib(n: int) -> str:
    return f"{n / GIB:.2f}"


def format_plan(plan: MemoryPlan) -> str:
    """An aligned table in GiB per GPU: a header, one line per row, the two peaks, and whether it fits (a LoRA
    plan: beside its full fine-tuning counterpart, `_format_beside`)."""
    if plan.full is not None:
        return _format_beside(plan.full, plan)
    head = (f"memory plan per GPU: {plan.model} ({plan.params / 1e9:.2f} B parameters), world {plan.world}, "
            f"FSDP {'on' if plan.fsdp else 'off'}, {plan.precision} compute, micro-batch {plan.micro_batch} × "
            f"{plan.seq_tokens} tokens, activation checkpointing {'on' if plan.checkpointing else 'off'}")
    width = max(len(r.name) for r in plan.rows) + 2
    lines = [head, f"{'':{width}}{'update':>9}{'rollout':>9}  GiB, how", *(
        f"{r.name:{width}}{_gib(r.update):>9}{_gib(r.rollout):>9}  {r.note}" for r in plan.rows)]
    lines.append(f"{'peak':{width}}{_gib(plan.update_peak):>9}{_gib(plan.rollout_peak):>9}")
    if plan.fits is None:
        lines.append(f"{_gib(plan.total)} GiB per GPU: not checked (distributed.device_memory_gib=0)")
    else:
        verdict = "fits" if plan.fits else "does not fit"
        lines.append(f"{_gib(plan.total)} GiB per GPU {verdict} in {_gib(plan.device_bytes)} GiB")
    return "\n".join(lines)


def _verdict(plan: MemoryPlan) -> str:
    if plan.fits is None:
        return f"{_gib(plan.total)} GiB per GPU: not checked (distributed.device_memory_gib=0)"
    return f"{_gib(plan.total)} GiB per GPU {'fits' if plan.fits else 'does not fit'} in {_gib(plan.device_bytes)} GiB"


def _format_beside(full: MemoryPlan, lora: MemoryPlan) -> str:
    """Full fine-tuning and LoRA side by side, row by row (a row one of them lacks reads 0), the LoRA rows' notes."""
    head = (f"memory plan per GPU: {lora.model} ({lora.params / 1e9:.2f} B parameters), world {lora.world}, "
            f"FSDP {'on' if lora.fsdp else 'off'}, {lora.precision} compute, micro-batch {lora.micro_batch} × "
            f"{lora.seq_tokens} tokens, activation checkpointing {'on' if lora.checkpointing else 'off'}; "
            f"LoRA r={lora.lora_rank}: {lora.adapter_params / 1e6:.1f} M adapter parameters")
    names = list(dict.fromkeys([r.name for r in full.rows] + [r.name for r in lora.rows]))
    by = [{r.name: r for r in p.rows} for p in (full, lora)]
    zero = Row("", 0, 0, "")
    width = max(len(n) for n in names) + 2
    cols = "".join(f"{h:>9}" for h in ("update", "rollout", "update", "rollout"))
    lines = [head, f"{'':{width}}{'full fine-tuning':>18}{f'LoRA r={lora.lora_rank}':>18}",
             f"{'':{width}}{cols}  GiB, how (LoRA)"]
    for name in names:
        f, lo = by[0].get(name, zero), by[1].get(name, zero)
        lines.append(f"{name:{width}}{_gib(f.update):>9}{_gib(f.rollout):>9}{_gib(lo.update):>9}{_gib(lo.rollout):>9}"
                     f"  {lo.note or '(none under LoRA)'}")
    lines.append(f"{'peak':{width}}{_gib(full.update_peak):>9}{_gib(full.rollout_peak):>9}"
                 f"{_gib(lora.update_peak):>9}{_gib(lora.rollout_peak):>9}")
    lines.append(f"LoRA: {_verdict(lora)}; full fine-tuning: {_verdict(full)}")
    return "\n".join(lines)


def _largest(plan: MemoryPlan) -> tuple[str, Row]:
    """The peak phase and its largest row."""
    phase = "update" if plan.update_peak >= plan.rollout_peak else "rollout"
    return phase, max(plan.rows, key=lambda r: getattr(r, phase))


def host_memory_warning(cfg: Any, host_bytes: int | None = None) -> str | None:
    """One line when a run without CUDA needs more than the host's memory (`host_bytes`, default the machine's
    physical RAM): every rank of `distributed.world_size` on this host holds its plan's peak. None when CUDA is
    there or the config plans for a GPU (`distributed.device_memory_gib`: `--dry-run`'s table checks that), when it
    fits, or when the model's shape is unknown."""
    import torch

    if torch.cuda.is_available() or cfg.distributed.device_memory_gib > 0:
        return None
    try:
        plan = plan_memory(cfg)
    except ConfigError:
        return None
    host = host_bytes if host_bytes is not None else os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    need = plan.total * plan.world
    if need <= host:
        return None
    phase, largest = _largest(plan)
    return (f"memory plan: this run needs about {_gib(need)} GiB of host memory ({plan.world} × "
            f"{_gib(plan.total)} GiB, {phase} peak; largest: {largest.name} {_gib(getattr(largest, phase))} GiB) "
            f"but this machine has {_gib(host)} GiB; lower optim.micro_batch_size or rollout.max_response_tokens")


def refusal(plan: MemoryPlan) -> str:
    """The one-line reason a plan that does not fit is refused, with the ways out."""
    phase, largest = _largest(plan)
    ways = ["raise distributed.world_size", "lower optim.micro_batch_size or rollout.max_response_tokens"]
    if not plan.checkpointing:
        ways.append("set distributed.activation_checkpointing=true")
    if phase == "rollout":
        ways.append("lower rollout.gpu_memory_utilization")
    return (f"memory plan: {_gib(plan.total)} GiB per GPU ({phase} peak) on {plan.world} × "
            f"{_gib(plan.device_bytes)} GiB does not fit (largest: {largest.name} {_gib(getattr(largest, phase))} "
            f"GiB); {', '.join(ways)}")
