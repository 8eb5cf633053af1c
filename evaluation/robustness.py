"""Robustness evaluation: perturb a COPY of the policy, evaluate it, and record every episode.

Families (each takes one scale value; `FAMILIES` is the registry, `DEFAULT_SCALES` the default grids):

- `noise`, scale s ≥ 0 (relative): `h̃ = h + s·rms(h)·ε` at the input of each selected decoder layer
  (before its input norm, so the residual carries it); rms over the hidden size, per token; fresh
  ε ~ N(0, I) at every forward from a seeded generator.
- `prune`, scale = sparsity in [0, 1): unstructured magnitude pruning; exactly round(s·numel)
  smallest-|w| weights of each targeted linear layer become 0.
- `prune_nm`, scale "N:M" (e.g. "2:4"): semi-structured; in every group of M consecutive inputs of a
  row the M − N smallest-|w| become 0.
- `quant`, scale "int8" | "int4" | "int4-g32" | "fp8" | "fp8_e5m2": weight-only round-to-nearest fake
  quantization, symmetric, one scale per output channel (per group of G inputs with "-gG"); fp8 is
  simulated by a cast through torch's float8 dtype and back.

Targets: weights of the `nn.Linear` modules inside the selected decoder layers (q/k/v/o, gate/up/down);
biases, norms, the embedding and the LM head (tied or not) are never touched. The noise σ is relative to
the hidden-state RMS (as in robustness studies of LLMs) so one grid fits any model size.

Departure from the style rule "only agents/perturbation.py touches hidden states": ALP's
`LayerwisePerturbation` injects an absolute, learnable σ and re-seeds identical noise at every call (what
training needs); evaluation needs a relative scale and fresh noise per decoding step, so the hook lives
here. It reuses `decoder_layers` / `parse_layers` from there.

`robustness_sweep` evaluates the clean model once and then every (family, scale) on its own copy with
the same `run_eval` (hence the same task seeds) and returns per-episode records; reductions live in
`evaluation.robustness_metrics`.

Legend: O output features, I input features, G group size, D hidden size, T tokens, V vocabulary.
"""

from __future__ import annotations

import copy
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from agents.perturbation import decoder_layers, parse_layers
from envs.splits import derive_seed

Scale = float | str


# ------------------------------------------------------------------------------------------ targets

def target_linears(model: nn.Module, layers: str | list[int] = "all") -> list[tuple[str, nn.Linear]]:
    """(qualified name, module) of every nn.Linear inside the selected decoder layers.

    Raises if one of them shares its weight with the input or output embedding (tied weights must stay
    untouched, and a shared tensor would silently perturb them).
    """
    blocks = decoder_layers(model)
    protected = {p.data_ptr() for emb in (model.get_input_embeddings(), model.get_output_embeddings())
                 if emb is not None for p in emb.parameters()}
    out = []
    for idx in parse_layers(layers, len(blocks)):
        for name, mod in blocks[idx].named_modules():
            if isinstance(mod, nn.Linear):
                if mod.weight.data_ptr() in protected:
                    raise ValueError(f"layer {idx} linear {name!r} shares its weight with an embedding; "
                                     "robustness perturbations leave embeddings untouched")
                out.append((f"layers.{idx}.{name}", mod))
    if not out:
        raise ValueError(f"no nn.Linear in decoder layers {layers!r} of {type(model).__name__}")
    return out


# ------------------------------------------------------------------------------------------ pruning

@torch.no_grad()
def magnitude_prune_(weight: Tensor, sparsity: float) -> int:
    """Zero exactly round(sparsity·numel) entries of smallest magnitude, in place; returns that count.

    topk picks indices, so ties at the threshold cannot over- or under-prune.
    """
    if not 0.0 <= sparsity < 1.0:
        raise ValueError(f"prune sparsity must be in [0, 1), got {sparsity}")
    k = round(sparsity * weight.numel())
    if k:
        idx = weight.abs().flatten().topk(k, largest=False).indices
        weight.view(-1)[idx] = 0
    return k


def parse_nm(scale: Scale) -> tuple[int, int]:
    match = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*", str(scale))
    if not match or not 0 < int(match[1]) <= int(match[2]):
        raise ValueError(f"prune_nm scale {scale!r}: expected 'N:M' with 0 < N <= M, e.g. '2:4'")
    return int(match[1]), int(match[2])


@torch.no_grad()
def nm_prune_(weight: Tensor, n: int, m: int) -> None:
    """Keep the n largest-|w| of every m consecutive inputs of each row, in place. weight: (O, I)."""
    out_f, in_f = weight.shape
    if in_f % m:
        raise ValueError(f"prune_nm {n}:{m}: input size {in_f} is not a multiple of {m}")
    groups = weight.view(out_f, in_f // m, m)  # (O, I/M, M), a view: writes land in weight
    drop = groups.abs().topk(m - n, dim=-1, largest=False).indices
    groups.scatter_(-1, drop, 0.0)


# ------------------------------------------------------------------------------------------ quantization

def parse_quant(scale: Scale) -> tuple[str, int, int | None]:
    """'int8' → ('int', 8, None); 'int4-g32' → ('int', 4, 32); 'fp8[_e4m3|_e5m2][-gG]' → (fmt, 8, G)."""
    match = re.fullmatch(r"(int([2-8])|fp8(?:_(e4m3|e5m2))?)(?:-g(\d+))?", str(scale).strip().lower())
    if not match:
        raise ValueError(f"quant scale {scale!r}: expected int2..int8 or fp8 / fp8_e4m3 / fp8_e5m2, "
                         "optionally with a group size suffix like 'int4-g32'")
    group = int(match[4]) if match[4] else None
    if match[2]:
        return "int", int(match[2]), group
    return match[3] or "e4m3", 8, group


def _fp8_dtype(fmt: str) -> torch.dtype:
    name = {"e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2"}[fmt]
    if not hasattr(torch, name):
        raise RuntimeError(f"torch {torch.__version__} has no {name}; fp8 simulation needs torch >= 2.1")
    return getattr(torch, name)


@torch.no_grad()
def fake_quantize(weight: Tensor, kind: str, bits: int = 8, group_size: int | None = None) -> Tensor:
    """Round-to-nearest symmetric fake quantization of a (O, I) weight; returns a new tensor, same dtype.

    One scale per row (or per group of `group_size` inputs; the last group may be partial): int: scale =
    amax/(2^(b−1) − 1), values clamped to ±(2^(b−1) − 1); fp8: scale = amax/finfo.max, then a cast to float8
    and back.
    """
    out_f, in_f = weight.shape
    g = group_size or in_f
    pad = -in_f % g  # a last, partial group is zero-padded: zeros change neither amax nor the kept values
    w = torch.nn.functional.pad(weight.float(), (0, pad)).reshape(out_f, (in_f + pad) // g, g)  # (O, I/G, G)
    amax = w.abs().amax(-1, keepdim=True)  # (O, I/G, 1)
    if kind == "int":
        qmax = 2 ** (bits - 1) - 1
        scale = amax / qmax
        q = (w / scale.clamp_min(1e-30)).round().clamp(-qmax, qmax) * scale
    else:
        fp8 = _fp8_dtype(kind)
        scale = amax / torch.finfo(fp8).max
        q = (w / scale.clamp_min(1e-30)).to(fp8).float() * scale
    q = torch.where(amax > 0, q, torch.zeros_like(q))  # all-zero groups stay zero (no 0/0)
    return q.reshape(out_f, in_f + pad)[:, :in_f].to(weight.dtype)


# ------------------------------------------------------------------------------ hidden-state noise

def add_hidden_noise(model: nn.Module, scale: float, layers: str | list[int] = "all",
                     seed: int = 0) -> list[torch.utils.hooks.RemovableHandle]:
    """Forward pre-hooks adding `scale·rms(h)·ε` to the input of each selected decoder layer.

    `rms(h)` is per token over D, in fp32; ε is drawn in fp32 from a per-layer generator seeded
    `derive_seed("robustness-noise", seed, l)` and advanced by every call, so decoding steps get fresh noise and a rerun
    with the same seed and call order gets the same noise. scale 0 adds exact zeros: the clean forward.
    The hooks are closures (not bound methods), so `copy.deepcopy` of the model (as engines do) keeps them.
    """
    if not scale >= 0:
        raise ValueError(f"noise scale must be >= 0, got {scale}")
    blocks = decoder_layers(model)
    handles = []
    for idx in parse_layers(layers, len(blocks)):
        gens: dict[torch.device, torch.Generator] = {}

        def hook(module, args, kwargs, idx=idx, gens=gens):
            h = args[0] if args else kwargs["hidden_states"]  # (..., T, D)
            if h.device not in gens:
                gen = torch.Generator(device=h.device)
                gens[h.device] = gen.manual_seed(derive_seed("robustness-noise", seed, idx))
            eps = torch.randn(h.shape, generator=gens[h.device], device=h.device, dtype=torch.float32)
            hf = h.float()
            rms = hf.pow(2).mean(-1, keepdim=True).sqrt()  # (..., T, 1)
            noisy = (hf + scale * rms * eps).to(h.dtype)
            if args:
                return (noisy, *args[1:]), kwargs
            return args, {**kwargs, "hidden_states": noisy}

        handles.append(blocks[idx].register_forward_pre_hook(hook, with_kwargs=True))
    return handles


# ------------------------------------------------------------------------------------------ families

def _apply_noise(model: nn.Module, scale: Scale, layers, seed: int) -> dict[str, float]:
    add_hidden_noise(model, float(scale), layers, seed)
    return {"perturb_noise_scale": float(scale)}


def _apply_prune(model: nn.Module, scale: Scale, layers, seed: int) -> dict[str, float]:
    zeroed = total = 0
    for _, lin in target_linears(model, layers):
        magnitude_prune_(lin.weight.data, float(scale))
        zeroed += int((lin.weight == 0).sum())
        total += lin.weight.numel()
    return {"perturb_sparsity": zeroed / total}


def _apply_prune_nm(model: nn.Module, scale: Scale, layers, seed: int) -> dict[str, float]:
    n, m = parse_nm(scale)
    zeroed = total = 0
    for _, lin in target_linears(model, layers):
        nm_prune_(lin.weight.data, n, m)
        zeroed += int((lin.weight == 0).sum())
        total += lin.weight.numel()
    return {"perturb_sparsity": zeroed / total}


def _apply_quant(model: nn.Module, scale: Scale, layers, seed: int) -> dict[str, float]:
    kind, bits, group = parse_quant(scale)
    err = ref = 0.0
    for _, lin in target_linears(model, layers):
        q = fake_quantize(lin.weight.data, kind, bits, group)
        err += float((q.float() - lin.weight.float()).pow(2).sum())
        ref += float(lin.weight.float().pow(2).sum())
        lin.weight.data.copy_(q)
    return {"perturb_weight_rel_err": (err / ref) ** 0.5 if ref else 0.0}


FAMILIES: dict[str, Callable[[nn.Module, Scale, Any, int], dict[str, float]]] = {
    "noise": _apply_noise, "prune": _apply_prune, "prune_nm": _apply_prune_nm, "quant": _apply_quant,
}
DEFAULT_SCALES: dict[str, list[Scale]] = {
    "noise": [0.05, 0.1, 0.2, 0.4, 0.8], "prune": [0.1, 0.3, 0.5, 0.7], "prune_nm": ["2:4", "1:4"],
    "quant": ["int8", "fp8", "int4-g32", "int4", "int3"],
}


def check_families(families: Iterable[str]) -> list[str]:
    names = [f.strip() for f in families if f.strip()]
    unknown = [f for f in names if f not in FAMILIES]
    if unknown or not names:
        raise ValueError(f"unknown perturbation families {unknown or names}; valid: {', '.join(FAMILIES)}")
    return names


def check_scale(family: str, scale: Scale) -> None:
    """Raise one clear error for a scale the family cannot take (before any model is copied or evaluated)."""
    if family == "prune_nm":
        parse_nm(scale)
    elif family == "quant":
        parse_quant(scale)
    else:
        try:
            value = float(scale)
        except (TypeError, ValueError):
            raise ValueError(f"{family} scale {scale!r} is not a number") from None
        if not (0.0 <= value < 1.0 if family == "prune" else value >= 0.0):
            raise ValueError(f"{family} scale {scale!r} out of range: "
                             f"{'sparsity in [0, 1)' if family == 'prune' else 'relative noise >= 0'}")


def perturbed_copy(model: nn.Module, family: str, scale: Scale, *, layers: str | list[int] = "all",
                   seed: int = 0) -> tuple[nn.Module, dict[str, float]]:
    """A deep copy of `model` with one perturbation applied, and what was achieved (sparsity, error, ...).

    The original is never modified: everything happens on the copy (weights and hooks).
    """
    (family,) = check_families([family])
    check_scale(family, scale)
    clone = copy.deepcopy(model).eval()
    with torch.no_grad():
        info = FAMILIES[family](clone, scale, layers, seed)
    return clone, info


# ------------------------------------------------------------------------------------------ sweep

@torch.no_grad()
def probe_logprobs(model: nn.Module, probe_ids: Sequence[Sequence[int]]) -> list[Tensor]:
    """fp32 next-token log-probs, (T, V) per probe sequence (one forward each: no padding involved)."""
    device = next(model.parameters()).device
    return [model(input_ids=torch.tensor([list(ids)], device=device)).logits[0].float().log_softmax(-1)
            for ids in probe_ids]


def probe_kl(clean: Sequence[Tensor], perturbed: Sequence[Tensor]) -> float:
    """Mean over probe positions of KL(π_clean ‖ π_perturbed) in nats/token (SPrPO's robustness measure)."""
    kls = [(c.exp() * (c - p)).sum(-1) for c, p in zip(clean, perturbed, strict=True)]  # (T,) each
    return float(torch.cat(kls).mean())


def robustness_sweep(model: nn.Module, run_eval: Callable[[nn.Module], list[dict[str, Any]]],
                     families: Iterable[str], scales: Mapping[str, Sequence[Scale]] | None = None, *,
                     layers: str | list[int] = "all", seed: int = 0,
                     probe_ids: Sequence[Sequence[int]] = (), progress: Callable[[str], None] | None = None,
                     ) -> list[dict[str, Any]]:
    """Per-(family, scale, episode) records: the clean model first (family "clean", scale 0), then each
    family at each of its scales (`scales[family]`, else `DEFAULT_SCALES[family]`).

    run_eval(model) must evaluate the model it is given on the same tasks and seeds every time and return
    per-episode records (e.g. `evaluation_records` through an engine built on that model). Each record
    gains `family`, `scale`, `condition` ("prune@0.5"), the achieved perturbation (`perturb_*`) and,
    with `probe_ids`, `probe_kl` (KL of the clean vs the perturbed next-token distributions on them).
    `progress`, if given, gets one line as each condition finishes (`progress_line`).
    """
    names = check_families(families)
    scales = dict(scales or {})
    clean_lp = probe_logprobs(model, probe_ids) if probe_ids else None
    grid = [(f, s) for f in names for s in (scales.get(f) or DEFAULT_SCALES[f])]
    for family, scale in grid:  # fail before the first (possibly long) evaluation, not halfway through
        check_scale(family, scale)
    conditions = [("clean", 0.0), *grid]
    records: list[dict[str, Any]] = []
    clean_success = None
    for done, (family, scale) in enumerate(conditions, 1):
        start = time.monotonic()
        if family == "clean":
            perturbed, info = copy.deepcopy(model).eval(), {}
        else:
            perturbed, info = perturbed_copy(model, family, scale, layers=layers, seed=seed)
        if clean_lp is not None:
            info["probe_kl"] = probe_kl(clean_lp, probe_logprobs(perturbed, probe_ids))
        played = [{**rec, "family": family, "scale": scale, "condition": f"{family}@{scale}", **info}
                  for rec in run_eval(perturbed)]
        records += played
        del perturbed
        success = sum(bool(r["won"]) for r in played) / len(played) if played else None
        clean_success = success if family == "clean" else clean_success
        if progress:
            progress(progress_line(done, len(conditions), f"{family}@{scale}", len(played), success,
                                   clean_success, info.get("probe_kl"), time.monotonic() - start))
    return records


def progress_line(done: int, total: int, condition: str, episodes: int, success: float | None,
                  clean_success: float | None, kl: float | None, seconds: float) -> str:
    """One condition's line, e.g. `[ 3/15] noise@0.1: success 72.0% of 100 episodes, -7.0 points vs clean,
    probe KL 0.0123, 41 s` (the change is against the clean condition's success, which runs first)."""
    width = len(str(total))
    text = f"[{done:>{width}}/{total}] {condition}: "
    text += "no episodes" if success is None else f"success {100 * success:.1f}% of {episodes} episodes"
    if not condition.startswith("clean@") and success is not None and clean_success is not None:
        text += f", {100 * (success - clean_success):+.1f} points vs clean"
    if kl is not None and not condition.startswith("clean@"):
        text += f", probe KL {kl:.4g}"
    return text + f", {seconds:.0f} s"
