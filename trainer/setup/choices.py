"""The run config's enumerated values, each checked against the registry that consumes it, never a copy of its names.

Policy losses, aggregations, KL estimators and ratio levels (`trainer/objective/losses.py`), advantage estimators
(`trainer/objective/advantages.py`) and GiGPO's step normalizations (`trainer/objective/gigpo.py`), corrections,
their levels and MIS semantics (`trainer/objective/corrections.py`), engines and schedules
(`agents/engines/__init__.py`), rollout dtypes (the engines' dtype tables), staleness policies
(`trainer/runtime/async_rollouts.py`), infrastructure-failure policies (`trainer/config/rollout_config.py`), env ids
(`agents/env_families.py`), TIR styles, think_history policies (`agents/templates/check.py`), action projections,
the household expert's search orders, the perturbation's noise scale modes (`agents/perturbation.py`), and FSDP
modes, training precisions and torch.distributed backends (`trainer/runtime/distributed.py`).
"""

from __future__ import annotations

from typing import Any

from agents.engines import ENGINE_KINDS, SCHEDULES
from agents.engines.hf import DTYPES as HF_DTYPES
from agents.engines.vllm import VLLM_DTYPES
from agents.env_families import BY_ID as ENV_FAMILIES
from agents.perturbation import SIGMA_MODES
from agents.projection import PROJECTIONS
from agents.templates.check import THINK_HISTORY
from agents.templates.history import CONTEXT_POLICIES
from agents.tokenizer import CHAT_TEMPLATES
from envs.household.expert import SEARCH_ORDERS
from envs.tir.styles import STYLES
from trainer.algorithms.staleness import STALE_POLICIES
from trainer.config.rollout_config import INFRA_FAILURE_POLICIES
from trainer.objective.advantages import ADVANTAGE_ESTIMATORS
from trainer.objective.corrections import CORR_LEVELS, CORRECTIONS, MIS_SEMANTICS
from trainer.objective.gigpo import STEP_NORMS
from trainer.objective.losses import AGG_MODES, KL_KINDS, POLICY_LOSSES, RATIO_LEVELS
from trainer.runtime.async_rollouts import STALENESS_POLICIES
from trainer.runtime.distributed import BACKENDS, FSDP_MODES, MIXED_PRECISIONS


def choice(key: str, value: Any, valid: Any, what: str) -> list[str]:
    """[] when `value` is one of `valid`, else the one line naming `key`, `value` and the valid names."""
    if value in valid:
        return []
    return [f"{key}={value!r} is not {what}; valid: {', '.join(map(str, valid))}"]


def choice_problems(cfg: Any) -> list[str]:
    """One line per enumerated key of `cfg` whose value its registry does not hold."""
    a, r, e, d = cfg.algo, cfg.rollout, cfg.env, cfg.distributed
    # `auto` falls back to the transformers engine where vllm does not import, so it takes only what both take
    dtypes = {"hf": HF_DTYPES, "vllm": VLLM_DTYPES}.get(r.engine, [d for d in HF_DTYPES if d in VLLM_DTYPES])
    return [*choice("algo.policy_loss", a.policy_loss, sorted(POLICY_LOSSES), "a policy loss"),
            *choice("algo.loss_agg", a.loss_agg, AGG_MODES, "an aggregation"),
            *choice("algo.upd_level", a.upd_level, RATIO_LEVELS, "a ratio level"),
            *choice("algo.correction", a.correction, CORRECTIONS, "a correction"),
            *choice("algo.kl_type", a.kl_type, KL_KINDS, "a KL estimator"),
            *choice("algo.corr_level", a.corr_level, CORR_LEVELS, "a correction level"),
            *choice("algo.mis_semantics", a.mis_semantics, MIS_SEMANTICS, "an MIS semantics"),
            *choice("algo.advantage", a.advantage, ADVANTAGE_ESTIMATORS, "an advantage estimator"),
            *choice("algo.gigpo_step_norm", a.gigpo_step_norm, STEP_NORMS, "a GiGPO step normalization"),
            *choice("rollout.engine", r.engine, ENGINE_KINDS, "a rollout engine"),
            *choice("rollout.schedule", r.schedule, list(SCHEDULES), "a rollout schedule"),
            *choice("rollout.staleness_policy", r.staleness_policy, list(STALENESS_POLICIES), "a staleness policy"),
            *choice("rollout.stale_token_policy", r.stale_token_policy, list(STALE_POLICIES),
                    "a stale-token policy"),
            *choice("rollout.infra_failures", r.infra_failures, list(INFRA_FAILURE_POLICIES),
                    "an infrastructure-failure policy"),
            *choice("rollout.dtype", r.dtype, list(dtypes), f"a dtype of rollout.engine={r.engine}"),
            *choice("env.id", e.id, list(ENV_FAMILIES), "an alprl env id"),
            *choice("env.style", e.style, list(STYLES), "a TIR style"),
            *choice("env.think_history", e.think_history, list(THINK_HISTORY), "a think_history policy"),
            *choice("env.context", e.context, list(CONTEXT_POLICIES), "a context policy"),
            *choice("model.chat_template", cfg.model.chat_template, list(CHAT_TEMPLATES), "a tiny model chat template"),
            *choice("env.action_projection", e.action_projection, PROJECTIONS, "an action projection"),
            *choice("env.expert_search", e.expert_search, SEARCH_ORDERS, "an expert search order"),
            *choice("perturb.sigma_mode", cfg.perturb.sigma_mode, list(SIGMA_MODES), "a noise scale mode"),
            *choice("distributed.fsdp", d.fsdp, FSDP_MODES, "an FSDP mode"),
            *choice("distributed.mixed_precision", d.mixed_precision, MIXED_PRECISIONS, "a training precision"),
            *choice("distributed.backend", d.backend, BACKENDS, "a torch.distributed backend")]
