"""SPrPO — Stable Perturbation-Robust Policy Optimization: sensitivity-aware σ allocation (arXiv 2609.34064).

Only the abstract is public: RL-trained agents are fragile to hidden-state noise, pruning and
quantization; SPrPO trains with adaptive, sensitivity-aware perturbations. Everything below is a
reconstruction **[R]** (reference §3.8), its knobs in `PerturbConfig.sprpo_*`.

- **Loss** (a preset, configs/algorithms/sprpo.yaml): GRPO dual clip on the perturbed ratio
  r̃ = π_{P_ξ(θ)}(a|s)/π_old(a|s): `ppo_clip` whose `logp` comes from the update forward run inside
  `LayerwisePerturbation.active` (clean rollouts, fresh noise per micro-batch, ALP's injection point and
  seeding). σ_l is allocated here, not learned (`perturb.learnable=false`).
- **Allocation** (`Allocator.maybe_allocate`, at the first step, then every `sprpo_every` steps, at θ_old on
  `sprpo_probe_rows` rows of the rollout batch, all forwards no-grad): a clean forward gives log π and
  RMS(h_l), the RMS of layer l's input over real tokens; one probe forward per layer with only l
  perturbed at the same relative scale u (σ = u·RMS(h_l)) gives S_l = mean_m k3(π_clean ‖ π_probe_l).
  Under the second-order model KL ≈ Σ_l S_l·(σ_l / (u·RMS_l))² (independent layers add), the allocation

      σ_l = ξ·RMS(h_l)/√(S_l / mean S),   ξ = g·u·√(κ / Σ_l S_l)

  gives every layer the same predicted share and a predicted total g²·κ: with gain g = 1 it meets the
  divergence budget κ, and more sensitive layers get proportionally less noise.
- **Adaptive scale**: one more forward with the allocated σ measures the perturbed-vs-clean KL and the
  noise-induced clip fraction (r̃ = π̃/π_clean outside [1 − ε_lo, 1 + ε_hi]); g is multiplied by f when
  KL < κ/f and divided by f when KL > κ·f or the clip fraction exceeds its cap, and σ is rescaled at once.
  The gain persists across allocations (it corrects the second-order model), ξ follows it.
- Metrics (`perturb/sprpo_*`): `kl` and `clip_frac` measured before this step's gain change, `gain`, `xi`
  and `predicted_kl` after it, per-layer `sensitivity/layer_l` and `rms/layer_l`, `skipped`.
- Departure from "only agents/perturbation.py touches hidden states": none — probes use its
  `LayerwisePerturbation` (one layer each) and RMS(h_l) comes from `output_hidden_states`.

Not implemented (optional in the reference, they need a second, clean update forward per micro-batch in
the update stage): the clean/perturbed loss mix α and the consistency term β·k3. Robustness is measured
with the evaluator (`alprl robustness`), not here.

Legend: B probe rows, T response positions, L perturbed layers, D hidden size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from agents.perturbation import LayerwisePerturbation, decoder_layers
from envs.splits import derive_seed
from trainer.config.train_config import TrainConfig
from trainer.objective.logprobs import compute_logprobs
from trainer.objective.losses import kl_penalty, masked_mean
from trainer.objective.types import Batch
from trainer.runtime.distributed import SINGLE, DistContext

SENSITIVITY_FLOOR = 1e-12  # nats: a layer whose probe does not register is treated as barely sensitive


@torch.no_grad()
def layer_input_rms(model: nn.Module, batch: Batch) -> Tensor:
    """RMS of every decoder layer's input over the real tokens of `batch`, (num_layers,) float32.

    Uses `output_hidden_states` (hidden_states[l] is the input of layer l), so nothing is hooked.
    """
    out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False,
                output_hidden_states=True)
    n_layers = len(decoder_layers(model))
    real = batch.attention_mask.to(torch.float32)[..., None]  # (B, S, 1)
    rms = [((h.float().square() * real).sum() / (real.sum() * h.shape[-1])).sqrt()
           for h in out.hidden_states[:n_layers]]
    return torch.stack(rms)


def k3_mean(clean_logp: Tensor, other_logp: Tensor, mask: Tensor) -> float:
    """mean_m k3 estimate of KL(π_clean ‖ π_other) on the sampled tokens (sampled from ≈ π_clean), (B, T)."""
    return masked_mean(kl_penalty(clean_logp, other_logp, kind="k3"), mask).item()


@torch.no_grad()
def probe_sensitivity(model: nn.Module, batch: Batch, layer_ids: list[int], rms: Tensor, probe_scale: float,
                      clean_logp: Tensor, temperature: float, seed: int, *, top_p: float = 1.0,
                      top_k: int = 0) -> Tensor:
    """S_l = mean_m k3(π_clean ‖ π with only layer l perturbed at σ = u·RMS(h_l)), (L,) in nats/token; both
    log-probs replay the sampler's truncation `top_p` / `top_k`, as the loss's do."""
    out = []
    for idx in layer_ids:
        sigma = probe_scale * rms[idx].item()
        probe = LayerwisePerturbation(model, layers=[idx], sigma_init=sigma, learnable=False, logits_only=False,
                                      sigma_mode="absolute")
        with probe.active(seed=seed):
            logp, _ = compute_logprobs(model, batch, temperature, top_p=top_p, top_k=top_k)
        out.append(k3_mean(clean_logp, logp, batch.loss_mask))
    return torch.tensor(out, dtype=torch.float64)


def allocate_sigmas(sensitivity: Tensor, rms: Tensor, *, probe_scale: float, target_kl: float,
                    gain: float = 1.0) -> tuple[Tensor, float, float]:
    """σ_l = ξ·RMS_l/√(S_l/mean S) with ξ = g·u·√(κ/Σ S): (sigma (L,), ξ, predicted KL = g²κ).

    sensitivity S and rms are (L,) for the perturbed layers, in the same order.
    """
    if not (probe_scale > 0 and target_kl > 0 and gain > 0):
        raise ValueError(f"SPrPO needs sprpo_probe_scale, sprpo_target_kl and the gain > 0, got {probe_scale}, "
                         f"{target_kl}, {gain}")
    s = sensitivity.double().clamp(min=SENSITIVITY_FLOOR)
    rms = rms.double()
    xi = gain * probe_scale * math.sqrt(target_kl / s.sum().item())
    sigma = xi * rms / torch.sqrt(s / s.mean())
    return sigma, xi, predicted_kl(s, sigma, rms, probe_scale)


def predicted_kl(sensitivity: Tensor, sigma: Tensor, rms: Tensor, probe_scale: float) -> float:
    """Second-order prediction Σ_l S_l·(σ_l / (u·RMS_l))² of the all-layer perturbed-vs-clean KL."""
    return (sensitivity.double() * (sigma.double() / (probe_scale * rms.double())).square()).sum().item()


def adapt_gain(gain: float, measured_kl: float, clip_frac: float, *, target_kl: float, clip_cap: float,
               factor: float) -> float:
    """Multiplicative step toward the target: ÷f if KL > κ·f or clip > cap, ×f if KL < κ/f, else unchanged."""
    if factor <= 1.0:
        raise ValueError(f"perturb.sprpo_factor must be > 1, got {factor}")
    if measured_kl > target_kl * factor or clip_frac > clip_cap:
        return gain / factor
    if measured_kl < target_kl / factor:
        return gain * factor
    return gain


@torch.no_grad()
def measure_perturbation(model: nn.Module, batch: Batch, perturbation: LayerwisePerturbation, clean_logp: Tensor,
                         temperature: float, seed: int, clip_low: float, clip_high: float, *, top_p: float = 1.0,
                         top_k: int = 0) -> tuple[float, float]:
    """(KL, clip fraction) of the configured perturbation vs the clean forward on `batch` at θ_old (the sampler's
    truncation `top_p` / `top_k` replayed)."""
    with perturbation.active(seed=seed):
        logp, _ = compute_logprobs(model, batch, temperature, top_p=top_p, top_k=top_k)
    log_ratio = torch.where(batch.loss_mask > 0, logp - clean_logp, torch.zeros_like(logp))  # (B, T)
    ratio = log_ratio.exp()
    outside = ((ratio < 1 - clip_low) | (ratio > 1 + clip_high)).float()
    return k3_mean(clean_logp, logp, batch.loss_mask), masked_mean(outside, batch.loss_mask).item()


def probe_rows(batch: Batch, n: int, seed: int) -> Tensor:
    """Up to n seeded-random rows that have sampled tokens."""
    rows = (batch.loss_mask.sum(-1) > 0).nonzero().squeeze(-1)
    if len(rows) == 0:
        raise ValueError("SPrPO probe: no row of the rollout batch has a sampled token")
    perm = torch.randperm(len(rows), generator=torch.Generator().manual_seed(seed))
    return rows[perm[:n]].sort().values


def check_perturbation(perturbation: LayerwisePerturbation | None) -> LayerwisePerturbation:
    if perturbation is None:
        raise ValueError("perturb.sprpo_adaptive needs perturb.enabled=true (there is no perturbation to allocate)")
    if perturbation.learnable or perturbation.logits_only:
        raise ValueError("perturb.sprpo_adaptive allocates σ per decoder layer: set perturb.learnable=false "
                         "and perturb.logits_only=false")
    return perturbation


@dataclass
class Allocator:
    """Per-run SPrPO state: the adaptive gain g (ξ = g·u·√(κ/Σ S)) and the step of the last allocation."""

    gain: float = 1.0
    last_step: int = 0

    def maybe_allocate(self, model: nn.Module, perturbation: LayerwisePerturbation | None, batch: Batch,
                       cfg: TrainConfig, step: int, ctx: DistContext = SINGLE) -> dict[str, float]:
        """Reallocate σ at the first step and then every `perturb.sprpo_every` steps; {} when off or not due.

        A batch without any trainable token (e.g. every trajectory void) cannot be probed: the allocation is
        skipped (`perturb/sprpo_skipped`) and retried at the next step. Under data parallelism every rank probes
        its own rows and the measurements are averaged over ranks, so all ranks write the same σ and gain (and
        skip together when any rank has nothing to probe).
        """
        p = cfg.perturb
        if not p.sprpo_adaptive:
            return {}
        perturbation = check_perturbation(perturbation)
        if self.last_step and step - self.last_step < max(p.sprpo_every, 1):
            return {}
        probeable = torch.tensor(float((batch.loss_mask.sum(-1) > 0).any()))
        if float(ctx.all_reduce_sum(probeable)) < ctx.world_size:
            return {"perturb/sprpo_skipped": 1.0}
        metrics = self.allocate(model, perturbation, batch, cfg, step, ctx)
        self.last_step = step
        return metrics | {"perturb/sprpo_skipped": 0.0}

    def allocate(self, model: nn.Module, perturbation: LayerwisePerturbation, batch: Batch, cfg: TrainConfig,
                 step: int, ctx: DistContext = SINGLE) -> dict[str, float]:
        """Probe, allocate, measure, adapt the gain; writes σ into `perturbation`; returns `perturb/sprpo_*`."""
        p, temperature = cfg.perturb, cfg.rollout.temperature
        top_p, top_k = cfg.rollout.top_p, cfg.rollout.top_k  # the sampler's truncation, replayed
        seed = derive_seed("sprpo-probe", cfg.seed, step) + ctx.rank  # ranks probe their own rows, own noise

        def over_ranks(t: Tensor) -> Tensor:  # the mean over ranks (the value itself on one process)
            return ctx.all_reduce_sum(t.detach().double().cpu().clone()) / ctx.world_size if ctx.enabled else t
        was_training = model.training
        model.eval()
        try:
            sub = batch.select(probe_rows(batch, max(min(p.sprpo_probe_rows, cfg.optim.micro_batch_size), 1), seed))
            rms = over_ranks(layer_input_rms(model, sub))  # (num_layers,)
            clean_logp, _ = compute_logprobs(model, sub, temperature, top_p=top_p, top_k=top_k)
            layers = perturbation.layer_ids
            sens = over_ranks(probe_sensitivity(model, sub, layers, rms, p.sprpo_probe_scale, clean_logp,
                                                temperature, seed, top_p=top_p, top_k=top_k))
            sigma, xi, predicted = allocate_sigmas(sens, rms[layers], probe_scale=p.sprpo_probe_scale,
                                                   target_kl=p.sprpo_target_kl, gain=self.gain)
            _write_sigma(perturbation, sigma)
            kl, clip = measure_perturbation(model, sub, perturbation, clean_logp, temperature, seed + 1,
                                            cfg.algo.clip_low, cfg.algo.clip_high, top_p=top_p, top_k=top_k)
            kl, clip = over_ranks(torch.tensor([kl, clip], dtype=torch.float64)).tolist()
        finally:
            model.train(was_training)
        old_gain = self.gain
        self.gain = adapt_gain(old_gain, kl, clip, target_kl=p.sprpo_target_kl, clip_cap=p.sprpo_clip_cap,
                               factor=p.sprpo_factor)
        change = self.gain / old_gain
        _write_sigma(perturbation, sigma * change)  # apply the adaptation at once
        out = {"perturb/sprpo_xi": xi * change, "perturb/sprpo_gain": self.gain, "perturb/sprpo_kl": kl,
               "perturb/sprpo_clip_frac": clip, "perturb/sprpo_predicted_kl": predicted * change**2}
        for idx, s_l, r_l in zip(layers, sens.tolist(), rms[layers].tolist(), strict=True):
            out[f"perturb/sprpo_sensitivity/layer_{idx}"] = s_l
            out[f"perturb/sprpo_rms/layer_{idx}"] = r_l
        return out

    def state_dict(self) -> dict:
        return {"gain": self.gain, "last_step": self.last_step}

    def load_state_dict(self, state: dict) -> None:
        self.gain = float(state.get("gain", 1.0))
        self.last_step = int(state.get("last_step", 0))


@torch.no_grad()
def _write_sigma(perturbation: LayerwisePerturbation, sigma: Tensor) -> None:
    """Set σ_l (the fixed log σ buffer), in the perturbation's layer order."""
    if sigma.shape != perturbation.log_sigma.shape or not bool((sigma > 0).all()):
        raise ValueError(f"SPrPO: σ must be positive with shape {tuple(perturbation.log_sigma.shape)}, "
                         f"got {tuple(sigma.shape)}")
    perturbation.log_sigma.copy_(sigma.log().to(perturbation.log_sigma.dtype))
