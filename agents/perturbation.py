"""Adaptive Layerwise Perturbation (ALP, arXiv 2603.19470; reference/algorithms.md §3.5).

During the update forward only, each selected decoder layer l sees `h̃_l = h_l + σ_l·ε_l` at its input,
before its input norm, so the noise also enters the residual stream; `σ_l = exp(s_l)` with one learnable
scalar `s_l` per layer. With `sigma_mode="relative"` the noise is `σ_l·rms(h_l)·ε_l` instead, rms over the hidden
size per token and detached (the robustness evaluator's convention, evaluation/robustness.py), so σ0 = 0.01 is 1%
of the hidden state on any model; the paper's σ is absolute, and its meaning depends on the model's hidden-state
scale. Usage (the only place in alprl that touches hidden states):

    pert = LayerwisePerturbation(model, layers="all", sigma_init=1e-6, learnable=True, logits_only=False,
                                 sigma_mode="absolute")
    optimizer = AdamW([*policy_groups, pert.param_group(lr=5e-4, weight_decay=0.01)])
    with pert.active(seed=noise_seed(k)):        # k counts update micro-batches
        loss = objective(model(...)); loss.backward()   # backward inside: see "Checkpointing"
    metrics |= pert.metrics()                    # before grad clipping: grad norm of log σ is pre-clip
                                                 # effective_frac: from the first micro-batch since the last call

- Noise `ε_l ~ N(0, I)` of h's shape and dtype, from a `torch.Generator` seeded `seed + l` and re-seeded
  at every layer call (never the global RNG): the same seed gives the same noise, another micro-batch
  (another seed) different noise. One generator per device is kept and re-seeded before each draw, so ε
  depends on (seed + l, shape, dtype, device) only, as with a fresh generator per draw.
- On accelerators the noise is not stored for backward: a custom autograd function regenerates it from the
  seed, giving `∂L/∂s_l = σ_l·Σ(∂L/∂h̃_l ⊙ ε_l)` exactly (the ALP code micro-checkpoints the injection for
  the same reason). On CPU ε is kept instead (one (N, D) tensor per layer) and the injection is a plain
  differentiable `addcmul`: there the serial mt19937 draw, not memory, is the cost, and a Python backward
  per layer call costs more than autograd's own (bench/alp_overhead.py); the gradient is the same.
- σ_l = exp(s_l) is recomputed at every layer call: one exp node shared by all layers would be backpropagated
  once per checkpointed segment under reentrant checkpointing, which autograd refuses.
- Checkpointing: in transformers ≥ 5 the checkpointed `forward` runs inside the hooks, so the recompute
  reuses h̃; older versions re-run the hook, which re-seeds and redraws identical noise. Either way run
  `backward()` inside `active()` so a re-run hook is still attached.
- `s_l` lives in this module, never in the model: `model.state_dict()`, `save_pretrained` and weight
  sync never see it. Hooks are attached only inside `active()` and always removed (also on exceptions).
- Logits-only ablation [R]: `z̃ = z + σ_z·ε` on the LM-head output (before temperature), one σ_z
  (relative mode: rms over the vocabulary per token).
- `perturb/rel_noise/*`: the realized noise rms(h̃ − h)/rms(h) per layer, averaged over tokens, measured in h's
  dtype on the first micro-batch after each `metrics()` call: σ0 itself in relative mode (up to ε's own rms), and
  what an absolute σ0 means on this model, 0 where bf16 rounds it away.
- Departures from the ALP code: explicit context manager instead of a `module.training` gate (the
  multi-turn patch also noised the old-log-prob pass); layers are hooked, not patched classes.

Legend: L selected layers, N tokens of the micro-batch (B·S), D hidden size.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from envs.splits import derive_seed

EFFECTIVE_SAMPLE = 4096  # elements per layer call checked for h̃ ≠ h (perturb/effective_frac)
SIGMA_MODES = ("absolute", "relative")


def noise_seed(k: int, rank: int = 0) -> int:
    """Base seed of update micro-batch k on data-parallel rank `rank` (layer l draws from base + l)."""
    return derive_seed("alp-noise", k, rank)


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The decoder layers of a Qwen2/Qwen3/Llama-style HF model (`model.model.layers`), also under a peft wrapper
    (LoRA RL: its `get_base_model()` is the HF model, adapters injected into the layers)."""
    model = model.get_base_model() if hasattr(model, "get_base_model") else model
    for owner in (getattr(model, "model", None), model):
        layers = getattr(owner, "layers", None)
        if isinstance(layers, nn.ModuleList) and len(layers):
            return layers
    raise ValueError(f"{type(model).__name__}: no decoder layers at model.model.layers or model.layers; "
                     "ALP supports Qwen2/Qwen3/Llama-style Hugging Face causal LMs")


def parse_layers(spec: str | list[int], num_layers: int) -> list[int]:
    """`all`, `0-5`, `0-5,12-17`, `3` (inclusive ranges, as the paper's 0–5 / 23–27) or a list → indices."""
    if isinstance(spec, list | tuple):
        parts = [str(p) for p in spec]
    elif str(spec).strip().lower() == "all":
        return list(range(num_layers))
    else:
        parts = [p.strip() for p in str(spec).split(",") if p.strip()]
    out: set[int] = set()
    try:
        for part in parts:
            lo, _, hi = part.partition("-")
            first, last = int(lo), int(hi or lo)
            if not 0 <= first <= last < num_layers:
                raise ValueError
            out.update(range(first, last + 1))
    except ValueError:
        raise ValueError(f"perturb.layers={spec!r}: expected 'all' or inclusive ranges like '0-5,12-17' "
                         f"within 0..{num_layers - 1}") from None
    if not out:
        raise ValueError(f"perturb.layers={spec!r} selects no layer")
    return sorted(out)


def _noise(like: Tensor, seed: int, gen: torch.Generator) -> Tensor:
    """ε(seed) of like's shape, dtype and device: `gen` is re-seeded first, so only `seed` decides ε."""
    gen.manual_seed(seed)
    return torch.randn(like.shape, generator=gen, dtype=like.dtype, device=like.device)


def _keeps_noise(h: Tensor) -> bool:
    """Whether ε is kept for backward (CPU: the draw is the cost) rather than regenerated (accelerators: memory)."""
    return h.device.type == "cpu"


def token_rms(h: Tensor) -> Tensor:
    """rms(h) over the last (hidden) dimension per token, in fp32 (fp64 for fp64 h), detached: (..., D) → (..., 1)."""
    return h.detach().to(torch.promote_types(h.dtype, torch.float32)).pow(2).mean(-1, keepdim=True).sqrt()


def _scaled_noise(like: Tensor, seed: int, gen: torch.Generator, rms: Tensor | None) -> Tensor:
    """ε(seed), times rms(h) per token in relative mode (rms (..., 1) or None), in like's dtype."""
    eps = _noise(like, seed, gen)
    return eps if rms is None else (eps.to(rms.dtype) * rms).to(like.dtype)


class _AddSeededNoise(torch.autograd.Function):
    """h̃ = h + σ·[rms(h)·]ε(seed) with ε regenerated in backward instead of saved (accelerators: memory is the
    cost); the per-token rms (N, 1) is small and kept."""

    @staticmethod
    def forward(ctx, h: Tensor, sigma: Tensor, seed: int, gen: torch.Generator, rms: Tensor | None) -> Tensor:
        ctx.save_for_backward(sigma, rms)
        ctx.seed, ctx.gen = seed, gen
        return torch.addcmul(h, _scaled_noise(h, seed, gen, rms), sigma.to(h.dtype))  # one fused kernel

    @staticmethod
    def backward(ctx, grad_out: Tensor) -> tuple[Tensor | None, Tensor | None, None, None, None]:
        grad_sigma = None
        if ctx.needs_input_grad[1]:
            sigma, rms = ctx.saved_tensors
            noise = _scaled_noise(grad_out, ctx.seed, ctx.gen, rms)  # same seed, shape, dtype: the forward's
            g, e = grad_out.reshape(-1), noise.reshape(-1)  # (N·D,)
            if g.dtype not in (torch.float32, torch.float64):  # accumulate bf16/fp16 products in fp32
                g, e = g.float(), e.float()
            grad_sigma = torch.dot(g, e).to(sigma.dtype)  # Σ(∂L/∂h̃ ⊙ [rms·]ε), no product tensor
        return grad_out, grad_sigma, None, None, None


class LayerwisePerturbation(nn.Module):
    """Per-layer learnable noise scales and the hooks that apply them (see the module docstring).

    The settings are the `perturb.*` keys, keyword-only and without defaults here: the run config states them
    once (trainer/components.py `build_perturbation` passes them).
    model: the HF causal LM (held by reference, never registered as a submodule).
    layers: `all` or inclusive ranges (`0-5,12-17`); ignored with `logits_only`.
    sigma_init: σ0 ≥ 0; 0 gives σ ≡ 0 exactly (only with learnable=False: AdamW decay would turn −inf to NaN).
    learnable: log σ is an `nn.Parameter` (its own param group); else a fixed buffer.
    logits_only: one σ on the LM-head output instead of the layers (the ablation).
    sigma_mode: `absolute` (the paper's: noise σ·ε) or `relative` (σ·rms(h)·ε, rms per token, detached).
    """

    def __init__(self, model: nn.Module, *, layers: str | list[int], sigma_init: float, learnable: bool,
                 logits_only: bool, sigma_mode: str) -> None:
        super().__init__()
        if sigma_init < 0 or (learnable and sigma_init == 0):
            raise ValueError(f"perturb.sigma_init must be > 0 (or 0 with learnable=false), got {sigma_init}")
        if sigma_mode not in SIGMA_MODES:
            raise ValueError(f"perturb.sigma_mode={sigma_mode!r}; valid: {', '.join(SIGMA_MODES)}")
        self.relative = sigma_mode == "relative"
        self._model = [model]  # a list, so the model is not a submodule and its weights stay out of ours
        self.logits_only = logits_only
        if logits_only:
            if model.get_output_embeddings() is None:
                raise ValueError(f"{type(model).__name__} has no output embeddings for logits-only perturbation")
            self.layer_ids: list[int] = []
        else:
            self.layer_ids = parse_layers(layers, len(decoder_layers(model)))
        init = torch.full((max(len(self.layer_ids), 1),), math.log(sigma_init) if sigma_init > 0 else -math.inf)
        if learnable:
            self.log_sigma = nn.Parameter(init)  # (L,)
        else:
            self.register_buffer("log_sigma", init)
        self._active = False
        self._gens: dict[torch.device, torch.Generator] = {}  # one per device, re-seeded at every draw
        self._checked, self._changed = 0, 0  # Python int; a device tensor once counted (no host sync per call)
        self._rel_noise: dict[int, Tensor] = {}  # slot → realized rms(h̃ − h)/rms(h), on the device until metrics()
        self._check_pending = True  # the first micro-batch after metrics() samples h̃ ≠ h, the rest skip it
        self._checking = False

    @property
    def learnable(self) -> bool:
        return isinstance(self.log_sigma, nn.Parameter)

    def param_group(self, *, lr: float, weight_decay: float) -> dict:
        """Own optimizer param group for log σ (betas come from the optimizer's defaults)."""
        if not self.learnable:
            raise ValueError("param_group: log σ is fixed (learnable=false); nothing to optimize")
        return {"params": [self.log_sigma], "lr": lr, "weight_decay": weight_decay, "name": "perturb/log_sigma"}

    def _inject(self, h: Tensor, slot: int, seed: int) -> Tensor:
        gen = self._gens.get(h.device)
        if gen is None:
            gen = self._gens[h.device] = torch.Generator(device=h.device)
        sigma = self.log_sigma[slot].exp().to(h.device)  # ()
        rms = token_rms(h) if self.relative else None  # (..., 1)
        if _keeps_noise(h):  # ε kept for backward; autograd's C++ backward of addcmul gives Σ(∂L/∂h̃ ⊙ [rms·]ε)
            out = torch.addcmul(h, _scaled_noise(h, seed, gen, rms), sigma.to(h.dtype))
        else:
            out = _AddSeededNoise.apply(h, sigma, seed, gen, rms)
        if not self._checking:  # the check's small ops cost ~2% of a step at hidden 128 if run every call
            return out
        with torch.no_grad():  # σ0 = 1e-6 under bf16 rounds back to h: count how often it does not
            step = max(1, h.numel() // EFFECTIVE_SAMPLE)
            flat_h = h.reshape(-1)[::step]  # (≤ EFFECTIVE_SAMPLE,)
            self._checked += flat_h.numel()
            self._changed = self._changed + flat_h.ne(out.reshape(-1)[::step]).sum()  # on the device until metrics()
            realized = token_rms(out - h) / (rms if rms is not None else token_rms(h)).clamp_min(1e-30)  # (..., 1)
            self._rel_noise[slot] = realized.mean()
        return out

    def _layer_hook(self, slot: int, seed: int):
        def hook(module: nn.Module, args: tuple, kwargs: dict):
            if args:  # transformers passes hidden_states positionally
                return (self._inject(args[0], slot, seed), *args[1:]), kwargs
            return args, {**kwargs, "hidden_states": self._inject(kwargs["hidden_states"], slot, seed)}
        return hook

    @contextmanager
    def active(self, seed: int) -> Iterator[LayerwisePerturbation]:
        """Attach the noise hooks for one update micro-batch; they are removed on exit, always."""
        if self._active:
            raise RuntimeError("LayerwisePerturbation.active() is already entered (nested use)")
        model = self._model[0]
        handles = []
        self._active = True
        self._checking, self._check_pending = self._check_pending, False
        try:
            if self.logits_only:  # seeded like one more layer after the last decoder layer
                head, logits_seed = model.get_output_embeddings(), seed + len(decoder_layers(model))
                handles.append(head.register_forward_hook(
                    lambda mod, args, out: self._inject(out, 0, logits_seed)))
            else:
                layers = decoder_layers(model)
                for slot, idx in enumerate(self.layer_ids):
                    handles.append(layers[idx].register_forward_pre_hook(
                        self._layer_hook(slot, seed + idx), with_kwargs=True))
            yield self
        finally:
            for handle in handles:
                handle.remove()
            self._active = self._checking = False

    def sigmas(self) -> Tensor:
        """σ_l = exp(s_l), (L,), detached."""
        return self.log_sigma.detach().exp()

    def metrics(self) -> dict[str, float]:
        """`perturb/*`: σ per layer and its spread, grad norm of log σ, effective fraction (then reset)."""
        sig = self.sigmas().float()
        names = ["logits"] if self.logits_only else [f"layer_{i}" for i in self.layer_ids]
        out = {f"perturb/sigma/{n}": s for n, s in zip(names, sig.tolist(), strict=True)}
        out |= {"perturb/enabled": 1.0, "perturb/sigma_mean": sig.mean().item(),
                "perturb/sigma_std": sig.std().item() if sig.numel() > 1 else 0.0,
                "perturb/sigma_min": sig.min().item(), "perturb/sigma_max": sig.max().item()}
        grad = self.log_sigma.grad if self.learnable else None
        out["perturb/grad_log_sigma_norm"] = grad.norm().item() if grad is not None else 0.0
        if self._checked:
            out["perturb/effective_frac"] = int(self._changed) / self._checked
        if self._rel_noise:
            rel = {slot: float(v) for slot, v in sorted(self._rel_noise.items())}
            out |= {f"perturb/rel_noise/{names[slot]}": v for slot, v in rel.items()}
            out["perturb/rel_noise_mean"] = sum(rel.values()) / len(rel)
        self._checked, self._changed, self._rel_noise = 0, 0, {}
        self._check_pending = True
        return out
