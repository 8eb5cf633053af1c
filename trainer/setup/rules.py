"""Cross-field rules of the run config: values that are each valid alone but contradict one another, or that a
consumer refuses once the run has started.

A loss's required aggregation, GiGPO's multi-turn env, QUATRO's δ, SPrPO's fixed per-layer σ, correction bounds,
verl's rejection options (`trainer/objective/rejection.py`'s parser), the response budget against a configured
context, mini-batches against the rollout batch, what the transformers engine cannot do, the sampler's fake
quantization (`trainer/runtime/sampler_mismatch.py`'s parser) and policy lag (a group needs a format; a lag excludes
MIPU's screening), what asynchronous rollouts exclude (a lag, MIPU, sleep mode, many ranks), the envs that take an
action projection, `env.think_history=strip` where no model is needed to refuse it, and 16-bit training without
FSDP.
"""

from __future__ import annotations

import os
from typing import Any

from agents.env_families import BY_ID as ENV_FAMILIES
from agents.env_families import history_refusal
from agents.perturbation import parse_layers
from envs.tir.styles import STYLES
from trainer.objective.losses import MULTI_TRACE_SEQ_REFUSAL, REQUIRED_AGG
from trainer.objective.rejection import parse_rs
from trainer.runtime.distributed import HALF_DTYPES
from trainer.runtime.sampler_mismatch import parse_sampler_quant


def distributed_rules(cfg: Any) -> list[str]:
    d = cfg.distributed
    out = []  # the enumerated keys: trainer/setup/choices.py
    if d.world_size < 0:
        out.append(f"distributed.world_size={d.world_size}: expected 0 (as launched) or the number of processes")
    if d.device_memory_gib < 0:
        out.append(f"distributed.device_memory_gib={d.device_memory_gib}: expected GiB > 0, or 0 (not checked)")
    if d.mixed_precision in HALF_DTYPES and d.fsdp == "off":
        out.append(f"distributed.mixed_precision={d.mixed_precision} needs FSDP (its MixedPrecisionPolicy); set "
                   "distributed.fsdp=auto or on, or distributed.mixed_precision=fp32")
    if not 0 < d.fp16_init_scale < float("inf"):  # a scale of inf or nan overflows every step, forever
        out.append(f"distributed.fp16_init_scale={d.fp16_init_scale!r} is out of range; allowed: a finite scale > 0")
    return out


def env_rules(cfg: Any) -> list[str]:
    e, out = cfg.env, []
    if e.task_types:
        family = ENV_FAMILIES.get(e.id)
        valid = family.task_types if family else ()
        if not valid:
            out.append(f"env.task_types={e.task_types!r}: {e.id} has no task types; leave it empty")
        elif unknown := [t for t in e.task_types if t not in valid]:
            out.append(f"env.task_types={e.task_types!r} names unknown task types of {e.id} "
                       f"({', '.join(unknown)}); valid: {', '.join(valid)}")
    # agents/env_families.py make_env raises this too, but only once the engine has started
    entry = ENV_FAMILIES.get(e.id)
    projects = (e.action_projection, e.invalid_action_penalty) != ("exact", 0.0)
    if projects and entry is not None and not entry.admissible_commands:
        out.append(f"env.action_projection={e.action_projection!r} / env.invalid_action_penalty="
                   f"{e.invalid_action_penalty!r} need an env with admissible commands (household, WebShop); "
                   f"{e.id} has none: use exact and 0")
    if entry is not None and (e.style in STYLES or not entry.styled):  # the template's part: validate_model_shape
        out += [r for r in [history_refusal(e)] if r]
    if e.context_budget < 0:
        out.append(f"env.context_budget={e.context_budget}: expected tokens > 0, or 0 (the engine's max_model_len)")
    if e.summarizer and e.context != "summarize":
        out.append(f"env.summarizer={e.summarizer!r} writes summaries for env.context=summarize only; set it, or "
                   "leave env.summarizer empty")
    if not (e.think_history == "keep" and e.context == "none"):
        if cfg.rollout.source == "harness":
            out.append(f"env.think_history={e.think_history} / env.context={e.context} build alprl's own rollout's "
                       "prompts; with rollout.source=harness the harness builds its own (a prompt that does not "
                       "extend the episode's tokens starts a trace by itself): leave them keep / none")
        if cfg.algo.policy_loss == "quatro" and cfg.algo.upd_level == "seq":
            out.append(MULTI_TRACE_SEQ_REFUSAL)
    return out

def algo_rules(cfg: Any) -> list[str]:
    a, out = cfg.algo, []
    required = REQUIRED_AGG.get(a.policy_loss)
    if required and a.loss_agg != required:
        out.append(f"algo.loss_agg={a.loss_agg!r}: policy loss {a.policy_loss!r} needs algo.loss_agg={required}")
    if a.policy_loss == "quatro" and not a.quatro_delta > 0:
        out.append(f"algo.quatro_delta={a.quatro_delta!r}: policy loss 'quatro' needs the KL budget δ > 0 "
                   "(e.g. 0.02)")
    entry = ENV_FAMILIES.get(cfg.env.id)
    if a.advantage == "gigpo" and entry is not None and not entry.multi_turn:
        out.append(f"algo.advantage='gigpo' needs a multi-turn env; {cfg.env.id} takes one turn per episode, so "
                   "every step group would be the episode group itself: use algo.advantage=grpo (algorithm=grpo)")
    if not a.quatro_lambda_min < a.quatro_lambda_max:
        out.append(f"algo.quatro_lambda_max={a.quatro_lambda_max!r} must exceed algo.quatro_lambda_min="
                   f"{a.quatro_lambda_min!r}")
    lower_ok = not isinstance(a.corr_lower, str)  # a string is reported by the range check
    if a.corr_upper > 0 and lower_ok:
        if a.corr_lower is not None and a.corr_lower >= a.corr_upper:
            out.append(f"algo.corr_lower={a.corr_lower!r} must be below algo.corr_upper={a.corr_upper!r}")
        elif a.corr_lower is None and a.mis_semantics == "verl" and a.corr_upper < 1:
            out.append(f"algo.corr_upper={a.corr_upper!r} with mis_semantics=verl puts the default lower bound "
                       "1/C above C; use corr_upper >= 1 or set algo.corr_lower")
    return out


def budget_rules(cfg: Any) -> list[str]:
    r, out = cfg.rollout, []
    if r.max_model_len > 0 and not r.max_response_tokens < r.max_model_len:
        out.append(f"rollout.max_response_tokens={r.max_response_tokens} does not fit rollout.max_model_len="
                   f"{r.max_model_len} with a prompt; lower it or raise max_model_len")
    rows = r.prompts_per_step * r.group_size
    if cfg.optim.num_minibatches > rows >= 1:
        out.append(f"optim.num_minibatches={cfg.optim.num_minibatches} exceeds the rollout batch "
                   f"(rollout.prompts_per_step × rollout.group_size = {rows} trajectories)")
    if r.engine == "hf" and r.schedule == "overlapped":
        out.append("rollout.schedule='overlapped' needs rollout.engine=vllm (the transformers engine runs turn by "
                   "turn); use auto or turn_by_turn")
    return out


def dapo_rules(cfg: Any) -> list[str]:
    # dynamic sampling's need for groups of two or more is rollout.group_size's own range (trainer/setup/ranges.py)
    a, r, out = cfg.algo, cfg.rollout, []
    if a.overlong_buffer >= r.max_response_tokens:
        out.append(f"algo.overlong_buffer={a.overlong_buffer} must be below rollout.max_response_tokens="
                   f"{r.max_response_tokens} (the punishment ramps over the budget's last overlong_buffer tokens)")
    return out


def rejection_rules(cfg: Any) -> list[str]:
    a = cfg.algo
    try:  # trainer/objective/rejection.py's parser, the one compute_correction uses
        parse_rs(a.rollout_rs, a.rollout_rs_threshold)
    except ValueError as exc:
        return [str(exc)]
    if a.rollout_rs_threshold and not a.rollout_rs:
        return [f"algo.rollout_rs_threshold={a.rollout_rs_threshold!r} is set but algo.rollout_rs is empty; name the "
                "options it bounds (e.g. algo.rollout_rs=seq_mean_k1) or clear the threshold"]
    return []


def sampler_rules(cfg: Any) -> list[str]:
    r, out = cfg.rollout, []
    try:  # trainer/runtime/sampler_mismatch.py's parser, the one build_components uses
        parse_sampler_quant(r.sampler_quant, r.sampler_quant_group)
    except ValueError as exc:
        out.append(str(exc))
    if r.sampler_quant_group > 0 and not r.sampler_quant:
        out.append(f"rollout.sampler_quant_group={r.sampler_quant_group} groups a fake quantization, but "
                   "rollout.sampler_quant is empty; set it (e.g. int4) or the group to 0")
    if r.policy_lag > 0 and cfg.algo.mipu_screen:
        out.append(f"rollout.policy_lag={r.policy_lag} with algo.mipu_screen=true: MIPU screens the candidate on the "
                   "engine, which under a lag holds an older policy; use policy_lag=0 with MIPU")
    return out


def async_rules(cfg: Any) -> list[str]:
    """What asynchronous rollouts cannot be combined with (trainer/runtime/async_rollouts.py)."""
    r = cfg.rollout
    if not r.async_rollouts:
        return []
    out = []
    if r.policy_lag > 0:
        out.append(f"rollout.async_rollouts=true with rollout.policy_lag={r.policy_lag}: both produce policy lag; "
                   "bound it with rollout.max_staleness and set policy_lag=0")
    if cfg.algo.mipu_screen:
        out.append("rollout.async_rollouts=true with algo.mipu_screen=true: MIPU screens the candidate on the engine, "
                   "which samples ahead with older weights; use one or the other")
    if r.enable_sleep_mode:
        out.append("rollout.async_rollouts=true with rollout.enable_sleep_mode=true: the engine would sleep during "
                   "the update its rollouts overlap; set enable_sleep_mode=false")
    world = max(int(os.environ.get("WORLD_SIZE", "1") or 1), cfg.distributed.world_size)
    if world > 1:
        out.append(f"rollout.async_rollouts=true with {world} processes: data-parallel asynchronous rollouts are not "
                   "supported; run one process or set async_rollouts=false")
    return out


def perturb_rules(cfg: Any) -> list[str]:
    p, out = cfg.perturb, []
    # σ0's one rule here (agents/perturbation.py's constructor raises on the same bound once a run has started)
    if not (p.sigma_init > 0 or (p.sigma_init == 0 and not p.learnable)):
        out.append(f"perturb.sigma_init={p.sigma_init!r} is out of range; allowed: > 0, or 0 with "
                   "perturb.learnable=false (σ ≡ 0; log σ = −inf cannot be learned)")
    if p.sprpo_adaptive and not (p.enabled and not p.learnable and not p.logits_only):
        out.append("perturb.sprpo_adaptive=true needs perturb.enabled=true, perturb.learnable=false and "
                   "perturb.logits_only=false (σ is allocated per decoder layer, not learned)")
    if p.sprpo_adaptive and p.sigma_mode != "absolute":
        out.append("perturb.sprpo_adaptive=true allocates absolute σ_l from each layer's measured rms(h_l); "
                   "set perturb.sigma_mode=absolute")
    try:  # syntax only: the range needs the model's layer count (validate_model_shape)
        parse_layers(p.layers, 1 << 16)
    except ValueError:
        out.append(f"perturb.layers={p.layers!r} is not a layer selection; valid: all, or inclusive ranges / "
                   "indices such as 0-5 or 0-5,12-17")
    return out
