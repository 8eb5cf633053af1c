"""The numeric ranges of the run config: each key with what is allowed, and the consumer that raises on (or divides by)
a value outside it named in a comment, plus bounds the field docstrings state.

A field is checked even when its feature is off: a bad value is a typo waiting for the day it is switched on.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from envs.tir.tasks import DIFFICULTIES

Check = tuple[str, str, Callable[[Any], bool]]


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


RANGES: tuple[Check, ...] = (
    # (key, what is allowed, test); the reason is the consumer named in the comment
    ("steps", ">= 0", lambda v: v >= 0),
    ("save_every", ">= 1", lambda v: v >= 1),  # step % save_every
    ("degenerate_patience", ">= 0 (0: never)", lambda v: v >= 0),
    ("eval_every", ">= 0", lambda v: v >= 0),
    ("eval_tasks", ">= 0 (0: no evaluation; at most the test split's size)", lambda v: v >= 0),  # file_checks.py
    ("eval_samples", ">= 1", lambda v: v >= 1),
    ("torch_threads", ">= 0", lambda v: v >= 0),
    ("sft.torch_threads", ">= 0 (0: the run's torch_threads)", lambda v: v >= 0),
    ("diagnostics.every", ">= 0 (0: no ratio diagnostics at all)", lambda v: v >= 0),
    ("diagnostics.rows", ">= 0 (0: every row)", lambda v: v >= 0),
    ("diagnostics.scatter_every", ">= 0 (0: first and last step only)", lambda v: v >= 0),  # trainer/diagnostics/scatter.py
    ("diagnostics.scatter_points", ">= 1", lambda v: v >= 1),
    ("diagnostics.drift_window", "0 (off) or >= 2", lambda v: v == 0 or v >= 2),  # a line needs two points
    ("diagnostics.drift_bound", "> 0", lambda v: v > 0),
    *((f"model.{name}", ">= 1", lambda v: v >= 1)
      for name in ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "intermediate_size", "vocab_size")),
    ("env.max_turns", ">= 1", lambda v: v >= 1),
    ("env.difficulty", f"0 (all) or one of {DIFFICULTIES}", lambda v: v == 0 or v in DIFFICULTIES),
    ("env.run_timeout_s", "> 0", lambda v: v > 0),
    ("env.sandbox_retry_s", ">= 0 (0: one try)", lambda v: v >= 0),  # sandbox.client.retry.RetryPolicy.budget_s
    ("env.expert_epsilon", "a probability in [0, 1]", lambda v: 0 <= v <= 1),
    ("env.expert_wrong_option_p", "a probability in [0, 1]", lambda v: 0 <= v <= 1),
    ("env.num_products", ">= 1", lambda v: v >= 1),
    ("env.max_steps", ">= 0 (0: the env's own)", lambda v: v >= 0),
    ("env.projection_min_similarity", "a similarity in [0, 1]", lambda v: 0 <= v <= 1),  # agents/projection.py
    ("env.invalid_action_penalty", ">= 0 (it is subtracted)", lambda v: v >= 0),
    ("rollout.temperature", "> 0 (log-probs use logits / temperature)", lambda v: v > 0),
    ("rollout.top_p", "0 < top_p <= 1", lambda v: 0 < v <= 1),
    ("rollout.top_k", ">= 0 (0: every token)", lambda v: v >= 0),
    ("rollout.max_new_tokens", ">= 1", lambda v: v >= 1),
    ("rollout.max_response_tokens", ">= 1", lambda v: v >= 1),
    ("rollout.max_obs_tokens", ">= 1", lambda v: v >= 1),
    ("rollout.episode_timeout_s", ">= 0 (0: none)", lambda v: v >= 0),
    ("rollout.max_infra_frac", "a share in [0, 1] (1: never an outage)", lambda v: 0 <= v <= 1),
    ("rollout.infra_patience", ">= 0 (0: never stop)", lambda v: v >= 0),  # trainer/runtime/outage.py
    ("rollout.env_concurrency", ">= 1", lambda v: v >= 1),
    ("rollout.prompts_per_step", ">= 1", lambda v: v >= 1),
    # every advantage (GRPO, Dr.GRPO, RLOO) and MIPU's validation centre rewards on the group:
    # trainer/objective/advantages.py refuses a group of one
    ("rollout.group_size", ">= 2 (the advantage needs a group)", lambda v: v >= 2),
    ("rollout.gpu_memory_utilization", "a share in (0, 1]", lambda v: 0 < v <= 1),
    ("rollout.tensor_parallel_size", ">= 1", lambda v: v >= 1),
    ("rollout.max_model_len", ">= 0 (0: the model's)", lambda v: v >= 0),
    ("rollout.sampler_quant_group", ">= 0 (0: one scale per output channel)", lambda v: v >= 0),
    ("rollout.policy_lag", ">= 0 (0: on-policy sampler)", lambda v: v >= 0),
    ("rollout.logprobs_topk", ">= 0 (0: off)", lambda v: v >= 0),
    ("rollout.max_staleness", ">= 1 (updates)", lambda v: v >= 1),
    ("rollout.max_token_version_gap", ">= 0 (0: no bound)", lambda v: v >= 0),
    ("rollout.async_prefetch", ">= 0 (0: rollout.max_staleness)", lambda v: v >= 0),
    ("algo.clip_low", "0 < clip_low <= 1 (the lower clip is 1 - clip_low; 1: no lower clip)", lambda v: 0 < v <= 1),
    ("algo.clip_high", "> 0", lambda v: v > 0),
    ("algo.clip_dual", "> 1 (dual-clip constant c)", lambda v: v > 1),  # trainer/objective/losses.py dual_clip_surrogate
    ("algo.loss_agg_norm_len", ">= 0 (0: rollout.max_response_tokens)", lambda v: v >= 0),
    ("algo.gigpo_gamma", "a discount in [0, 1]", lambda v: 0 <= v <= 1),
    ("algo.gigpo_step_weight", ">= 0 (0: episode level only)", lambda v: v >= 0),
    ("algo.corr_upper", "> 0", lambda v: v > 0),
    ("algo.corr_lower", "null or >= 0",
     lambda v: v is None or (isinstance(v, int | float) and not isinstance(v, bool) and v >= 0)),
    ("algo.corr_veto_threshold", "> 0", lambda v: v > 0),  # log(threshold) in trainer/objective/corrections.py
    ("algo.mipu_val_prompts", ">= 0 (0: rollout.prompts_per_step)", lambda v: v >= 0),
    ("algo.mipu_anneal_steps", ">= 0", lambda v: v >= 0),
    ("algo.kl_coef", ">= 0 (0: no KL to a reference)", lambda v: v >= 0),
    ("algo.opsm_delta", "null (off) or >= 0", lambda v: v is None or (_number(v) and v >= 0)),
    ("algo.m2_threshold", "null (off) or > 0", lambda v: v is None or (_number(v) and v > 0)),
    ("algo.sapo_tau_pos", "> 0", lambda v: v > 0),
    ("algo.sapo_tau_neg", "> 0", lambda v: v > 0),
    ("algo.dynamic_max_rounds", ">= 1", lambda v: v >= 1),
    ("algo.overlong_buffer", ">= 0 (0: no soft overlong punishment)", lambda v: v >= 0),
    ("algo.overlong_penalty", ">= 0", lambda v: v >= 0),
    ("algo.mipu_rollback_window", ">= 1", lambda v: v >= 1),
    ("algo.quatro_delta", ">= 0 (0: off)", lambda v: v >= 0),
    ("algo.quatro_lambda_min", "> 0", lambda v: v > 0),  # trainer/algorithms/quatro.py solve_duals
    ("algo.quatro_log_ratio_clamp", ">= 0 (0: only the ±20 bound)", lambda v: v >= 0),
    ("perturb.lr", "> 0", lambda v: v > 0),
    ("perturb.weight_decay", ">= 0", lambda v: v >= 0),
    ("perturb.sprpo_every", ">= 1", lambda v: v >= 1),
    ("perturb.sprpo_target_kl", "> 0", lambda v: v > 0),  # trainer/algorithms/sprpo.py allocate_sigmas
    ("perturb.sprpo_clip_cap", ">= 0", lambda v: v >= 0),
    ("perturb.sprpo_factor", "> 1", lambda v: v > 1),  # sprpo.py adapt_gain
    ("perturb.sprpo_probe_scale", "> 0", lambda v: v > 0),
    ("perturb.sprpo_probe_rows", ">= 1", lambda v: v >= 1),
    ("optim.lr", "> 0", lambda v: v > 0),
    ("optim.betas", "two values in [0, 1)", lambda v: len(v) == 2 and all(0 <= b < 1 for b in v)),  # AdamW
    ("optim.weight_decay", ">= 0", lambda v: v >= 0),
    ("optim.grad_clip", "> 0", lambda v: v > 0),
    ("optim.num_minibatches", ">= 1", lambda v: v >= 1),
    ("optim.micro_batch_size", ">= 1", lambda v: v >= 1),
    ("sft.num_examples", ">= 1", lambda v: v >= 1),
    ("sft.p_skip_tool", "a probability in [0, 1]", lambda v: 0 <= v <= 1),
    ("sft.p_wrong_copy", "a probability in [0, 1]", lambda v: 0 <= v <= 1),
    ("sft.epochs", ">= 1", lambda v: v >= 1),
    ("sft.lr", "> 0", lambda v: v > 0),
    ("sft.batch_size", ">= 1", lambda v: v >= 1),
    ("sft.save_every", ">= 0 (0: only on SIGINT/SIGTERM)", lambda v: v >= 0),
)


def _get(cfg: Any, key: str) -> Any:
    return functools.reduce(getattr, key.split("."), cfg)


def range_problems(cfg: Any) -> list[str]:
    """One line per key of `RANGES` whose value in `cfg` is out of its range."""
    return [f"{key}={_get(cfg, key)!r} is out of range; allowed: {allowed}"
            for key, allowed, ok in RANGES if not ok(_get(cfg, key))]
