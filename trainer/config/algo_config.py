"""The algorithm sections of the run configuration: what is optimized (`algo`) and ALP's perturbation (`perturb`).

Part of the config tree of `trainer/config/train_config.py` (which holds `TrainConfig` and the loading rules); presets in
`configs/algorithms/` fill these two sections. A default is stated once, here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

VCPO_LR_RULES = ("none", "sqrt", "linear")
"""`algo.vcpo_lr_rule`: how VCPO's ESS ratio scales a step's learning rate (trainer/algorithms/vcpo.py)."""


@dataclass
class AlgoConfig:
    name: str = "grpo"
    """Name of the preset that filled this section (logged; the loop never branches on it)."""
    policy_loss: str = "ppo_clip"
    """Key in trainer.objective.losses.POLICY_LOSSES."""
    clip_low: float = 0.2
    """PPO ε_lo: lower clip 1 - clip_low."""
    clip_high: float = 0.28
    """PPO ε_hi: upper clip 1 + clip_high (clip-higher, DAPO)."""
    clip_dual: float = 3.0
    """Dual-clip constant c > 1 for negative advantages."""
    loss_agg: str = "token-mean"
    """token-mean | seq-mean-token-mean | seq-mean-token-sum | seq-mean-token-sum-norm."""
    loss_agg_norm_len: int = 0
    """T_norm of seq-mean-token-sum-norm (Dr.GRPO): each sequence's token sum is divided by this constant, then
    averaged over sequences; 0: rollout.max_response_tokens (a constant, unlike the padded width)."""
    adv_norm_by_std: bool = True
    """GRPO: divide group-centred rewards by the group std (false = Dr.GRPO)."""
    adv_leave_one_out: bool = False
    """RLOO baseline: subtract the mean of the other group members."""
    advantage: str = "grpo"
    """Advantage estimator: grpo (the episode's group advantage on every sampled token) | gigpo (plus ω times a
    step-level advantage over anchor states, per turn: trainer/objective/gigpo.py; multi-turn envs only) | opob
    (VCPO's off-policy optimal baseline: the group's rewards averaged with weights w², w = π_θold/μ of each
    episode, trainer/algorithms/vcpo.py). All take the episode level's adv_norm_by_std; grpo and gigpo
    adv_leave_one_out too."""
    gigpo_gamma: float = 0.95
    """GiGPO γ: discount of the step returns R_t = Σ_{k≥t} γ^{k−t} r_k (outcome reward only: γ^{N−1−t}·R)."""
    gigpo_step_weight: float = 1.0
    """GiGPO ω: weight of the step-level advantage added to the episode-level one."""
    gigpo_step_norm: str = "mean_std_norm"
    """GiGPO step groups: mean_std_norm (centre, divide by the std) | mean_norm (centre only)."""
    entropy_coef: float = 0.0
    """β_H: weight of the entropy bonus (entropy is always logged)."""
    dynamic_sampling: bool = False
    """DAPO dynamic sampling (verl filter_groups): drop groups whose rewards are all equal and sample more
    prompts until the step has rollout.prompts_per_step informative groups (trainer/algorithms/dapo.py)."""
    dynamic_max_rounds: int = 3
    """DAPO: sampling rounds a step may take in all (verl max_num_gen_batches); then it trains on what it has."""
    overlong_filter: bool = False
    """DAPO overlong filtering: episodes that ran into rollout.max_response_tokens leave the loss."""
    overlong_buffer: int = 0
    """DAPO soft overlong punishment L_cache (tokens): the reward falls linearly over the last L_cache tokens
    of the response budget, to −overlong_penalty at the budget; 0: off."""
    overlong_penalty: float = 1.0
    """DAPO: the soft overlong punishment at the budget itself."""
    kl_coef: float = 0.0
    """β: KL to a frozen reference, the run's starting policy (verl use_kl_loss + kl_loss_coef, TRL beta); 0: off,
    no reference model is loaded. A loss term β·agg(KL) on m′, or with `kl_in_reward` a reward penalty."""
    kl_type: str = "low_var_kl"
    """KL estimator (verl kl_loss_type): k1 | kl | k2 | mse | k3 | low_var_kl (k3 = low_var_kl, clamped) | k3_is
    (k3 · π_θ/π_old, the importance-corrected estimator: TRL use_bias_correction_kl, DeepSeek-V3.2)."""
    opsm_delta: float | None = None
    """OPSM (DeepSeek-V3.2 off-policy sequence masking; slime --opsm-delta 1e-4): a sequence with A < 0 whose mean
    log(μ/π_θ) over its tokens exceeds δ leaves the policy loss (trainer/objective/offpolicy_masks.py); null: off."""
    m2_threshold: float | None = None
    """M2PO (arXiv 2510.01161; AReaL actor.m2_threshold, 0.04 in its example): the tokens with the largest
    (log μ − log π_old)² leave m′ until the mean of the rest is below this; null: off."""
    sapo_tau_pos: float = 1.0
    """SAPO τ for A > 0: temperature of the soft gate σ(τ(r − 1))·4/τ (verl / SkyRL / TRL 1.0)."""
    sapo_tau_neg: float = 1.05
    """SAPO τ for A ≤ 0 (verl / SkyRL / TRL 1.05: a negative sample's gate decays a little faster)."""
    vespo_k_pos: float = 2.0
    """VESPO (arXiv 2602.10693) shape k of the Gamma kernel φ(W) = W^k·e^{λ(1−W)} for A ≥ 0 (TRL, paper code 2)."""
    vespo_lambda_pos: float = 3.0
    """VESPO rate λ for A ≥ 0 (TRL, paper code 3): a larger λ pulls φ down faster once W passes k/λ."""
    vespo_k_neg: float = 3.0
    """VESPO shape k for A < 0 (TRL, paper code 3)."""
    vespo_lambda_neg: float = 2.0
    """VESPO rate λ for A < 0 (TRL, paper code 2)."""
    ctpo_clip_low: float = 0.025
    """CTPO (arXiv 2605.07331) log-space lower clip at the first sampled token: the cumulative log-ratio at
    position t is kept above −ctpo_clip_low·t^ctpo_power (its code's la_clip_low 0.025)."""
    ctpo_clip_high: float = 0.05
    """CTPO log-space upper clip at the first sampled token, scaled by t^ctpo_power (la_clip_high 0.05)."""
    ctpo_clip_dual: float = 0.05
    """CTPO log-space dual clip for A < 0: the loss is capped at −A·exp(ctpo_clip_dual·t^ctpo_power) (its code's
    la_clip_c 0.05)."""
    ctpo_power: float = 0.5
    """CTPO position exponent p of the clip bounds' scale t^p: 0.5 follows the √t growth of the cumulative
    log-ratio's spread; 0 is a uniform log-space clip."""
    vcpo_lr_rule: str = "none"
    """VCPO (arXiv 2602.17616) step scaling by the mini-batch's effective sample size ρ = (Σw)²/(N·Σw²) of the
    sequence weights w = π_θold/μ: none | sqrt (lr·√min(1, ρ/ρ0), the paper's rule for AdamW) | linear
    (lr·min(1, ρ/ρ0)). Every param group's lr is scaled for the step and restored after it
    (trainer/algorithms/vcpo.py); logged as actor/ess_ratio, actor/lr_scale and actor/lr."""
    vcpo_base_ess: float = 1.0
    """VCPO ρ0 in (0, 1]: the ESS ratio at and above which the step is not scaled (its math scripts 1.0, its
    multi-turn tool script 0.55)."""
    kl_in_reward: bool = False
    """verl use_kl_in_reward: subtract β·Σ_t KL_t (sampled tokens, at θ_old) from each episode's reward before the
    advantages, instead of the loss term."""
    upd_level: str = "token"
    """Level of the policy ratio: token | seq (product, stop-grad token form) | geo (length-normalized)."""
    correction: str = "none"
    """Rollout-mismatch correction weights (reference §3.2): none | tis (truncate) | mis (mask)."""
    corr_level: str = "token"
    """Level of the correction value v = π_train(θ_old)/μ: token | seq (product) | geo | turn (product over each
    turn of a multi-turn episode) | turn_geo (per-turn geometric mean; ROLL's segment IS)."""
    corr_upper: float = 5.0
    """C (= U): TIS truncation / MIS upper bound on v (ALP TIR scripts 5; verl's config default is 2)."""
    corr_lower: float | None = None
    """MIS lower bound L on v; null: 0 with paper semantics (ALP TIR scripts), 1/C with verl semantics."""
    mis_semantics: str = "paper"
    """paper: w = v·1[L≤v≤U], rejected tokens stay in the denominator | verl: w = min(v, C), rejected leave it."""
    corr_k1_quirk: bool = False
    """verl compatibility: test the band on k1 = −log v as verl's *_k1 modes do (keeps v in [1/U, 1/L])."""
    corr_veto: bool = False
    """Reject a whole sequence if any token has v < corr_veto_threshold (older verl, slime)."""
    corr_veto_threshold: float = 1e-4
    """Per-token veto threshold on v."""
    rollout_rs: str = ""
    """Rejection by divergence of π_train(θ_old) from μ (verl rollout_rs), comma-separated options that must all
    pass: token_k1..3, seq_sum_k1..3, seq_mean_k1..3 (seq_mean_k1: geometric-mean band), seq_max_k2, seq_max_k3;
    empty: off. Rejected tokens leave m′ (trainer/objective/rejection.py)."""
    rollout_rs_threshold: str = ""
    """verl rollout_rs_threshold: one for all options or one per option; k1: ratio bounds L:U (or verl's L_U,
    quoted: YAML reads an unquoted 0.5_1 as 0.51; or U alone, L = 1/U), k2/k3: an upper bound on the statistic."""
    corr_batch_norm: bool = False
    """Divide w by its batch mean (valid tokens at token level, non-empty rows at seq/geo level)."""
    mipu_screen: bool = False
    """MIPU step 2 (reference §3.6): screen each candidate update on fresh validation groups sampled from the
    synced engine; a rejection restores weights, optimizer state and the engine (trainer/algorithms/mipu.py)."""
    mipu_val_prompts: int = 0
    """MIPU: validation prompts per screening, G = rollout.group_size samples each; 0: rollout.prompts_per_step
    ([R] the paper's 32–64 held-out training-distribution prompts)."""
    mipu_threshold_start: float = 1.0e-3
    """MIPU c_0: accept iff the gap proxy T̂ ≥ −c(k), c annealed linearly from c_0 to c_1 (Qwen3-4B 1e-3 → 0)."""
    mipu_threshold_end: float = 0.0
    """MIPU c_1: the acceptance threshold after `mipu_anneal_steps` iterations."""
    mipu_anneal_steps: int = 100
    """MIPU: iterations over which c(k) goes linearly from c_0 to c_1 (k counts accepted and rejected steps)."""
    mipu_rollback_window: int = 100
    """MIPU: window (iterations) of the `mipu/rollback_rate` moving average."""
    quatro_delta: float = 0.0
    """QUATRO (reference §3.7, [R]): δ > 0 solves a per-query dual λ_x once per rollout batch and replaces the
    advantages by the trust-region target log-ratios; δ is the KL budget in nats per (length-normalized)
    sequence, [R] 0.01–0.05. 0 disables it. The `quatro` loss requires it."""
    quatro_lambda_min: float = 1.0e-4
    """QUATRO: lower clamp of λ_x (also the inactive-constraint value), in advantage units."""
    quatro_lambda_max: float = 1.0e4
    """QUATRO: upper clamp of λ_x (tiny δ)."""
    quatro_log_ratio_clamp: float = 5.0
    """QUATRO safety bound: |log r| and the target log-ratios are clamped to it (0: only the ±20 bound)."""
    quatro_grpo_scale: bool = True
    """QUATRO: scale the λ-normalized objective by 1/√(2δ) so its effective advantage tends to GRPO's
    std-normalized advantage as δ → 0 (learning rates transfer from GRPO); false: unscaled."""


@dataclass
class PerturbConfig:
    enabled: bool = False
    """ALP: add σ_l·ε to the input hidden states of the selected decoder layers in the update forward only."""
    layers: str = "all"
    """Perturbed decoder layers: all, or inclusive ranges / indices such as 0-5 or 0-5,12-17."""
    logits_only: bool = False
    """Ablation: perturb only the final logits (one σ), not hidden states; `layers` is then ignored."""
    sigma_init: float = 1e-6
    """σ0, the initial noise scale (log σ = log σ0); the ALP TIR recipe uses 1e-6, single-turn 0.02."""
    sigma_mode: str = "absolute"
    """absolute: noise σ_l·ε (the paper's; its meaning depends on the model's hidden-state scale) | relative:
    σ_l·rms(h_l)·ε, rms over the hidden size per token, detached, so σ0 = 0.01 is 1% of the hidden state on any
    model (the robustness evaluator's convention)."""
    learnable: bool = True
    """Learn log σ_l from the RL loss (own AdamW param group); false keeps σ fixed."""
    lr: float = 5e-4
    """η_σ, learning rate of the log σ param group (TIR 5e-4, single-turn 1e-2)."""
    weight_decay: float = 0.01
    """AdamW weight decay on log σ (the ALP code applies the policy's 0.01, pulling σ toward 1)."""
    sprpo_adaptive: bool = False
    """SPrPO (reference §3.8, [R]): every `sprpo_every` steps probe per-layer sensitivity and set σ_l
    (trainer/algorithms/sprpo.py); needs enabled=true and learnable=false (σ is allocated, not learned)."""
    sprpo_every: int = 10
    """SPrPO: steps between sensitivity probes / reallocations (the first one runs at step 1)."""
    sprpo_target_kl: float = 0.01
    """SPrPO κ: perturbed-vs-clean KL (k3, nats per sampled token) the allocation budgets and adapts toward."""
    sprpo_clip_cap: float = 0.2
    """SPrPO: cap on the noise-induced clip fraction (perturbed ratio at θ_old outside the PPO band)."""
    sprpo_factor: float = 1.5
    """SPrPO: multiplicative step of the adaptive gain (×f when KL < κ/f, ÷f when KL > κ·f or clip > cap)."""
    sprpo_probe_scale: float = 0.05
    """SPrPO u: relative noise (σ / RMS(h_l)) of the single-layer sensitivity probes."""
    sprpo_probe_rows: int = 16
    """SPrPO: rollout-batch rows used by the probe forwards (L + 2 no-grad forwards per probe)."""


OFFPOLICY_RANGES = (
    # (key under algo, what is allowed, test): VESPO's φ(W) = W^k·e^{λ(1−W)} stays bounded only for k, λ ≥ 0
    # (trainer/objective/offpolicy_losses.py); CTPO's code refuses bounds ≤ 0; ρ0 divides the ESS ratio, in (0, 1]
    *((f"vespo_{name}", ">= 0 (the Gamma kernel's shape k / rate λ)", lambda v: v >= 0)
      for name in ("k_pos", "lambda_pos", "k_neg", "lambda_neg")),
    *((f"ctpo_clip_{name}", "> 0 (a log-space bound)", lambda v: v > 0) for name in ("low", "high", "dual")),
    ("ctpo_power", "a finite exponent (0.5: √t; 0: a uniform clip)", math.isfinite),
    ("vcpo_base_ess", "0 < ρ0 <= 1 (an ESS ratio)", lambda v: 0 < v <= 1),
)


def offpolicy_rules(cfg: Any) -> list[str]:
    """Violations of the VESPO / CTPO / VCPO keys of `cfg` (a `TrainConfig`), each naming the key; called by
    trainer/setup/validation.py with its other rules (checked even while the method is off, as every key)."""
    a = cfg.algo
    out = [f"algo.{key}={getattr(a, key)!r} is out of range; allowed: {allowed}"
           for key, allowed, ok in OFFPOLICY_RANGES if not ok(getattr(a, key))]
    if a.vcpo_lr_rule not in VCPO_LR_RULES:
        out.append(f"algo.vcpo_lr_rule={a.vcpo_lr_rule!r} is not an ESS step rule; valid: {', '.join(VCPO_LR_RULES)}")
    if a.advantage == "opob" and a.adv_leave_one_out:
        out.append("algo.advantage='opob' (VCPO's off-policy optimal baseline) has no leave-one-out form: set "
                   "algo.adv_leave_one_out=false")
    return out
