"""Config validation: every value a run would trip over later is refused before anything starts.

`validate_config(cfg)` runs at the end of `build_config`, so every command (train, sft, demo, --dry-run) and
every caller of `build_config` sees the same rules. It checks the whole tree and raises one `ConfigError`
whose single line joins every violation with "; ", each naming the key, the value and what is allowed.

- Enumerated values are checked against the registry that consumes them, never a copy of its names: policy
  losses, aggregations, required aggregations and ratio levels (`trainer/objective/losses.py`), advantage estimators
  (`trainer/objective/advantages.py`) and GiGPO's step normalizations (`trainer/objective/gigpo.py`), corrections and MIS
  semantics (`trainer/objective/corrections.py`), engines and schedules (`agents/engines/__init__.py`), rollout dtypes
  (the engines' dtype tables), env ids and which envs take an action projection (`agents/env_families.py`),
  TIR styles and difficulties, each env's task types (its own constant), action projections, perturbation
  layer specs (`agents/perturbation.py`'s parser). The one list kept here is the household expert's search
  orders, which have no constant there.
- Numeric ranges are those the consumers raise on (or divide by), plus bounds the field docstrings state.
  A field is checked even when its feature is off: a bad value is a typo waiting for the day it is switched on.
- Cross-field rules: a loss's required aggregation, GiGPO's multi-turn env, QUATRO's δ, SPrPO's fixed per-layer
  σ, correction bounds, the response budget against a configured context, mini-batches against the rollout
  batch, what the transformers engine cannot do, the sampler's fake quantization and policy lag (a group needs
  a format; a lag excludes MIPU's screening), and what asynchronous rollouts exclude (a lag, MIPU, sleep mode,
  many ranks).
  Fake-quantization formats are those of `trainer/runtime/sampler_mismatch.py`'s parser.
- Dataset files (`env.dataset`, `env.eval_dataset`): only on an env that serves them, loaded here (once per
  process, so the run reuses them) so that a missing or malformed file is the loader's one line; `eval_tasks` is
  bounded by the test split's size (500 generated, else the file's count), `rollout.prompts_per_step` (and
  MIPU's validation prompts) by the train split's.

`validate_model_shape(cfg)` holds the checks that need the shape of the model the run starts from, read from
its `config.json` only (no weights), and `env.think_history=strip`'s rule, which reads its chat template
(agents/templates/check.py); the CLI calls it right after `build_config`. The tiny model that
`alprl sft` builds has `model.num_layers` layers and a context sized to the budget, so its checks need no file.

`cfg` is a `trainer.config.train_config.TrainConfig`; this module does not import train_config.py, which imports it (and both raise
`trainer/config/errors.py`'s `ConfigError`), so that the two stay free of an import circle.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agents.engines import ENGINE_KINDS, SCHEDULES
from agents.engines.hf import DTYPES as HF_DTYPES
from agents.engines.vllm import VLLM_DTYPES
from agents.env_families import BY_ID as ENV_FAMILIES
from agents.env_families import problem_count, think_history_refusal
from agents.models import load_tokenizer, resolve_local
from agents.perturbation import SIGMA_MODES, parse_layers
from agents.projection import PROJECTIONS
from agents.templates.check import THINK_HISTORY
from envs.datasets import LAYOUT_NAMES, DatasetError
from envs.household.expert import SEARCH_ORDERS
from envs.tir.styles import STYLES
from envs.tir.tasks import DIFFICULTIES
from trainer.config.algo_config import offpolicy_rules
from trainer.config.errors import ConfigError
from trainer.config.lora_config import lora_rules
from trainer.config.rg_config import reasoning_gym_rules
from trainer.config.rollout_config import INFRA_FAILURE_POLICIES
from trainer.config.source_rules import source_rules
from trainer.objective.advantages import ADVANTAGE_ESTIMATORS
from trainer.objective.corrections import CORR_LEVELS, CORRECTIONS, MIS_SEMANTICS
from trainer.objective.gigpo import STEP_NORMS
from trainer.objective.losses import AGG_MODES, KL_KINDS, POLICY_LOSSES, RATIO_LEVELS, REQUIRED_AGG
from trainer.objective.rejection import parse_rs
from trainer.runtime.async_rollouts import STALENESS_POLICIES
from trainer.runtime.sampler_mismatch import parse_sampler_quant

Check = tuple[str, str, Callable[[Any], bool]]


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


RANGES: tuple[Check, ...] = (
    # (key, what is allowed, test); the reason is the consumer named in the comment
    ("steps", ">= 0", lambda v: v >= 0),
    ("save_every", ">= 1", lambda v: v >= 1),  # step % save_every
    ("eval_every", ">= 0", lambda v: v >= 0),
    ("eval_tasks", ">= 0 (0: no evaluation; at most the test split's size, see _dataset_rules)", lambda v: v >= 0),
    ("eval_samples", ">= 1", lambda v: v >= 1),
    ("torch_threads", ">= 0", lambda v: v >= 0),
    ("sft.torch_threads", ">= 0 (0: the run's torch_threads)", lambda v: v >= 0),
    ("diagnostics.every", ">= 0 (0: no ratio diagnostics at all)", lambda v: v >= 0),
    ("diagnostics.rows", ">= 0 (0: every row)", lambda v: v >= 0),
    ("diagnostics.scatter_every", ">= 0 (0: first and last step only)", lambda v: v >= 0),  # trainer/diagnostics/scatter.py
    ("diagnostics.scatter_points", ">= 1", lambda v: v >= 1),
    *((f"model.{name}", ">= 1", lambda v: v >= 1)
      for name in ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "intermediate_size", "vocab_size")),
    ("env.max_turns", ">= 1", lambda v: v >= 1),
    ("env.difficulty", f"0 (all) or one of {DIFFICULTIES}", lambda v: v == 0 or v in DIFFICULTIES),
    ("env.run_timeout_s", "> 0", lambda v: v > 0),
    ("env.sandbox_retry_s", ">= 0 (0: one try)", lambda v: v >= 0),  # sandbox.client.retry.RetryPolicy.budget_s
    ("env.sandbox_max_failing_steps", ">= 0 (0: never stop)", lambda v: v >= 0),  # trainer/loop.py
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
    ("rollout.max_staleness", ">= 1 (updates)", lambda v: v >= 1),
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


def _choice(key: str, value: Any, valid: Any, what: str) -> list[str]:
    if value in valid:
        return []
    return [f"{key}={value!r} is not {what}; valid: {', '.join(map(str, valid))}"]


def _ranges(cfg: Any) -> list[str]:
    return [f"{key}={_get(cfg, key)!r} is out of range; allowed: {allowed}"
            for key, allowed, ok in RANGES if not ok(_get(cfg, key))]


def _choices(cfg: Any) -> list[str]:
    a, r, e = cfg.algo, cfg.rollout, cfg.env
    # `auto` falls back to the transformers engine where vllm does not import, so it takes only what both take
    dtypes = {"hf": HF_DTYPES, "vllm": VLLM_DTYPES}.get(r.engine, [d for d in HF_DTYPES if d in VLLM_DTYPES])
    return [*_choice("algo.policy_loss", a.policy_loss, sorted(POLICY_LOSSES), "a policy loss"),
            *_choice("algo.loss_agg", a.loss_agg, AGG_MODES, "an aggregation"),
            *_choice("algo.upd_level", a.upd_level, RATIO_LEVELS, "a ratio level"),
            *_choice("algo.correction", a.correction, CORRECTIONS, "a correction"),
            *_choice("algo.kl_type", a.kl_type, KL_KINDS, "a KL estimator"),
            *_choice("algo.corr_level", a.corr_level, CORR_LEVELS, "a correction level"),
            *_choice("algo.mis_semantics", a.mis_semantics, MIS_SEMANTICS, "an MIS semantics"),
            *_choice("algo.advantage", a.advantage, ADVANTAGE_ESTIMATORS, "an advantage estimator"),
            *_choice("algo.gigpo_step_norm", a.gigpo_step_norm, STEP_NORMS, "a GiGPO step normalization"),
            *_choice("rollout.engine", r.engine, ENGINE_KINDS, "a rollout engine"),
            *_choice("rollout.schedule", r.schedule, list(SCHEDULES), "a rollout schedule"),
            *_choice("rollout.staleness_policy", r.staleness_policy, list(STALENESS_POLICIES), "a staleness policy"),
            *_choice("rollout.infra_failures", r.infra_failures, list(INFRA_FAILURE_POLICIES),
                     "an infrastructure-failure policy"),
            *_choice("rollout.dtype", r.dtype, list(dtypes), f"a dtype of rollout.engine={r.engine}"),
            *_choice("env.id", e.id, list(ENV_FAMILIES), "an alprl env id"),
            *_choice("env.style", e.style, list(STYLES), "a TIR style"),
            *_choice("env.think_history", e.think_history, list(THINK_HISTORY), "a think_history policy"),
            *_choice("env.action_projection", e.action_projection, PROJECTIONS, "an action projection"),
            *_choice("env.expert_search", e.expert_search, SEARCH_ORDERS, "an expert search order"),
            *_choice("perturb.sigma_mode", cfg.perturb.sigma_mode, list(SIGMA_MODES), "a noise scale mode")]


def _distributed_rules(cfg: Any) -> list[str]:
    d = cfg.distributed
    out = [*_choice("distributed.fsdp", d.fsdp, ["auto", "on", "off"], "an FSDP mode"),
           *_choice("distributed.mixed_precision", d.mixed_precision, ["fp32", "bf16", "fp16"],
                   "a training precision"),
           *_choice("distributed.backend", d.backend, ["auto", "nccl", "gloo"], "a torch.distributed backend")]
    if d.world_size < 0:
        out.append(f"distributed.world_size={d.world_size}: expected 0 (as launched) or the number of processes")
    if d.device_memory_gib < 0:
        out.append(f"distributed.device_memory_gib={d.device_memory_gib}: expected GiB > 0, or 0 (not checked)")
    if d.mixed_precision in ("bf16", "fp16") and d.fsdp == "off":
        out.append(f"distributed.mixed_precision={d.mixed_precision} needs FSDP (its MixedPrecisionPolicy); set "
                   "distributed.fsdp=auto or on, or distributed.mixed_precision=fp32")
    if not 0 < d.fp16_init_scale < float("inf"):  # a scale of inf or nan overflows every step, forever
        out.append(f"distributed.fp16_init_scale={d.fp16_init_scale!r} is out of range; allowed: a finite scale > 0")
    return out


def _env_rules(cfg: Any) -> list[str]:
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
        out += [r for r in [think_history_refusal(e)] if r]
    return out


def _split_size(cfg: Any, split: str, key: str) -> tuple[int | None, list[str]]:
    """(size of the env's `split`, []) or (None, [the file's one-line error under `key`])."""
    try:
        return problem_count(cfg.env, split), []
    except (DatasetError, ValueError) as exc:
        return None, [f"env.{key}={getattr(cfg.env, key)!r}: {exc}"]


def _dataset_rules(cfg: Any) -> list[str]:
    e, out = cfg.env, []
    entry = ENV_FAMILIES.get(e.id)
    if entry is None:
        return []  # the unknown id is reported by _choices
    files = [key for key in ("dataset", "eval_dataset") if getattr(e, key)]
    if files and not entry.datasets:
        serving = ", ".join(f.env_id for f in ENV_FAMILIES.values() if f.datasets)
        return [f"env.{key}={getattr(e, key)!r}: {e.id} does not serve dataset problems; the math envs do: {serving}"
                for key in files]
    options = [key for key in ("dataset_format", "dataset_fields") if getattr(e, key)]
    out += [f"env.{key}={getattr(e, key)!r} needs env.dataset or env.eval_dataset" for key in options if not files]
    if e.dataset_split_field and not e.dataset:
        out.append(f"env.dataset_split_field={e.dataset_split_field!r} splits env.dataset, which is not set")
    out += _choice("env.dataset_format", e.dataset_format.lower(), ["", *LAYOUT_NAMES], "a dataset layout")
    out += reasoning_gym_rules(e)
    if out and files:
        return out  # the files are read with these options: fix them first
    test, errors = _split_size(cfg, "test", "eval_dataset" if e.eval_dataset else "dataset")  # no file: nothing read
    if test is not None and cfg.eval_tasks > test:
        where = f" of {e.eval_dataset or e.dataset}" if files else ""
        errors.append(f"eval_tasks={cfg.eval_tasks!r} is out of range; allowed: 0..{test} (0: no evaluation; the "
                      f"test split{where} has {test} problems)")
    if e.dataset:
        train, train_errors = _split_size(cfg, "train", "dataset")
        errors += [err for err in train_errors if err not in errors]
        r = cfg.rollout
        if train is not None and r.prompts_per_step > train:
            errors.append(f"rollout.prompts_per_step={r.prompts_per_step} exceeds the {train} problems of the train "
                          f"split of env.dataset={e.dataset!r} (a step takes distinct problems)")
        val = cfg.algo.mipu_val_prompts or r.prompts_per_step
        if train is not None and cfg.algo.mipu_screen and r.prompts_per_step + val > train:
            errors.append(f"algo.mipu_val_prompts={cfg.algo.mipu_val_prompts}: MIPU validates on {val} train "
                          f"problems outside the step's {r.prompts_per_step}, but env.dataset={e.dataset!r} has "
                          f"{train} train problems")
    return out + errors


def _algo_rules(cfg: Any) -> list[str]:
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


def _budget_rules(cfg: Any) -> list[str]:
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


def _dapo_rules(cfg: Any) -> list[str]:
    # dynamic sampling's need for groups of two or more is rollout.group_size's own range (RANGES)
    a, r, out = cfg.algo, cfg.rollout, []
    if a.overlong_buffer >= r.max_response_tokens:
        out.append(f"algo.overlong_buffer={a.overlong_buffer} must be below rollout.max_response_tokens="
                   f"{r.max_response_tokens} (the punishment ramps over the budget's last overlong_buffer tokens)")
    return out


def _rejection_rules(cfg: Any) -> list[str]:
    a = cfg.algo
    try:  # trainer/objective/rejection.py's parser, the one compute_correction uses
        parse_rs(a.rollout_rs, a.rollout_rs_threshold)
    except ValueError as exc:
        return [str(exc)]
    if a.rollout_rs_threshold and not a.rollout_rs:
        return [f"algo.rollout_rs_threshold={a.rollout_rs_threshold!r} is set but algo.rollout_rs is empty; name the "
                "options it bounds (e.g. algo.rollout_rs=seq_mean_k1) or clear the threshold"]
    return []


def _sampler_rules(cfg: Any) -> list[str]:
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


def _async_rules(cfg: Any) -> list[str]:
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


def _perturb_rules(cfg: Any) -> list[str]:
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


def validate_config(cfg: Any) -> None:
    """Raise one `ConfigError` listing every violation in `cfg` (see the module docstring); None if valid."""
    problems = [*_choices(cfg), *_ranges(cfg), *_env_rules(cfg), *_dataset_rules(cfg), *_algo_rules(cfg),
                *_budget_rules(cfg), *_sampler_rules(cfg), *_async_rules(cfg), *_rejection_rules(cfg),
                *_dapo_rules(cfg), *_perturb_rules(cfg), *_distributed_rules(cfg), *source_rules(cfg),
                *lora_rules(cfg), *offpolicy_rules(cfg)]
    if problems:
        raise ConfigError("; ".join(problems))


# ---------------------------------------------------------------------------------------------- model shape


def _config_json(path: str) -> tuple[dict, str] | None:
    """(config.json, its directory) of a model directory or a hub id in the local cache (never the network)."""
    try:
        local = resolve_local(path)
    except FileNotFoundError:
        return None  # loading the model reports that, before anything starts
    config = json.loads((local / "config.json").read_text())
    return config.get("text_config", config), str(local)  # multimodal configs nest the language model's


def _tokenizer_or_none(where: str) -> Any:
    try:
        return load_tokenizer(where)
    except (OSError, ValueError):
        return None


def _rope_scaled(model_cfg: dict) -> bool:
    """RoPE scaling (yarn, linear, ...) in transformers 4's `rope_scaling` or 5's `rope_parameters`."""
    for key in ("rope_scaling", "rope_parameters"):
        rope = model_cfg.get(key) or {}
        if rope.get("rope_type", rope.get("type", "default")) != "default":
            return True
    return False


def validate_model_shape(cfg: Any) -> list[str]:
    """Checks that need the start model's shape (its config.json only); raises `ConfigError`, returns warnings.

    With model.path: perturb.layers must lie within its decoder layers, and a configured rollout.max_model_len
    within its positions (vLLM refuses it once started). Without: the tiny model (built by `alprl sft`, or a
    warm start `alprl train` accepts, which has the same model.* settings) has model.num_layers layers, and its
    context is sized by `alprl sft`. A context too short for the response budget is a warning, as
    trainer/components.py logs it when the engine starts (episodes end when the context is full); for the SFT
    warm start it is read from sft.output_dir when one is there (possibly one `alprl sft` is about to rebuild).
    """
    p, r = cfg.perturb, cfg.rollout
    if cfg.model.path:
        model_cfg, where = _config_json(cfg.model.path) or ({}, cfg.model.path)
        layers, layers_of = model_cfg.get("num_hidden_layers"), where
    else:
        sft = Path(cfg.sft.output_dir)
        model_cfg = json.loads((sft / "config.json").read_text()) if (sft / "config.json").is_file() else {}
        layers, layers_of, where = cfg.model.num_layers, "the tiny model (model.num_layers)", str(sft)
    if cfg.env.think_history == "strip" and (Path(where) / "config.json").is_file():  # the template decides (the
        # tiny ChatML `alprl sft` will build drops no thinking); a missing tokenizer is the run's loader's error
        if refusal := think_history_refusal(cfg.env, _tokenizer_or_none(where)):
            raise ConfigError(refusal)
    if p.enabled and not p.logits_only and layers:
        try:
            parse_layers(p.layers, layers)
        except ValueError:
            raise ConfigError(f"perturb.layers={p.layers!r} selects layers outside the {layers} decoder layers "
                              f"(0..{layers - 1}) of {layers_of}") from None
    positions = model_cfg.get("max_position_embeddings")
    if not positions:
        return []
    # vLLM refuses a longer max_model_len unless RoPE scaling stretches the positions or it is told to allow it
    scaled = _rope_scaled(model_cfg) or os.environ.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN")
    if cfg.model.path and r.engine != "hf" and r.max_model_len > positions and not scaled:
        raise ConfigError(f"rollout.max_model_len={r.max_model_len} exceeds the {positions} positions of {where} "
                          f"(max_position_embeddings); lower it or set 0")
    context = r.max_model_len if r.engine != "hf" and r.max_model_len else positions
    if context <= r.max_response_tokens:
        return [f"the model's context ({context} tokens, from {where}) cannot hold a prompt plus "
                f"rollout.max_response_tokens={r.max_response_tokens}: episodes end when the context is full. "
                "Lower rollout.max_response_tokens, or rebuild the SFT model (`alprl sft --force`), which sizes "
                "its context to the budget"]
    return []
