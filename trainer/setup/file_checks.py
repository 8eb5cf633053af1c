"""The checks that read files: the dataset files a run serves, and the model it starts from.

`dataset_rules(cfg)` (part of `validate_config`): `env.dataset` and `env.eval_dataset` only on an env that serves
them, loaded here (once per process, so the run reuses them) so that a missing or malformed file is the loader's one
line; `eval_tasks` is bounded by the test split's size (500 generated, else the file's count),
`rollout.prompts_per_step` (and MIPU's validation prompts) by the train split's.

`validate_model_shape(cfg)` holds the checks that need the shape of the model the run starts from, read from its
`config.json` only (no weights, `trainer/runtime/model_shape.py`'s `config_json`), and `env.think_history=strip`'s
rule, which reads its chat template (agents/templates/check.py); the CLI calls it right after `build_config`. The
tiny model that `alprl sft` builds has `model.num_layers` layers and a context sized to the budget, so its checks
need no file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from agents.env_families import BY_ID as ENV_FAMILIES
from agents.env_families import history_refusal, problem_count
from agents.models import load_tokenizer
from agents.perturbation import parse_layers
from envs.datasets import LAYOUT_NAMES, DatasetError
from trainer.config.errors import ConfigError
from trainer.config.rg_config import reasoning_gym_rules
from trainer.runtime.model_shape import config_json
from trainer.setup.choices import choice


def _split_size(cfg: Any, split: str, key: str) -> tuple[int | None, list[str]]:
    """(size of the env's `split`, []) or (None, [the file's one-line error under `key`])."""
    try:
        return problem_count(cfg.env, split), []
    except (DatasetError, ValueError) as exc:
        return None, [f"env.{key}={getattr(cfg.env, key)!r}: {exc}"]


def dataset_rules(cfg: Any) -> list[str]:
    """Violations of the dataset keys of `cfg` (the module docstring), each naming the key."""
    e, out = cfg.env, []
    entry = ENV_FAMILIES.get(e.id)
    if entry is None:
        return []  # the unknown id is reported by choice_problems
    files = [key for key in ("dataset", "eval_dataset") if getattr(e, key)]
    if files and not entry.datasets:
        serving = ", ".join(f.env_id for f in ENV_FAMILIES.values() if f.datasets)
        return [f"env.{key}={getattr(e, key)!r}: {e.id} does not serve dataset problems; the math envs do: {serving}"
                for key in files]
    options = [key for key in ("dataset_format", "dataset_fields") if getattr(e, key)]
    out += [f"env.{key}={getattr(e, key)!r} needs env.dataset or env.eval_dataset" for key in options if not files]
    if e.dataset_split_field and not e.dataset:
        out.append(f"env.dataset_split_field={e.dataset_split_field!r} splits env.dataset, which is not set")
    out += choice("env.dataset_format", e.dataset_format.lower(), ["", *LAYOUT_NAMES], "a dataset layout")
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
        model_cfg, where = config_json(cfg.model.path) or ({}, cfg.model.path)
        layers, layers_of = model_cfg.get("num_hidden_layers"), where
    else:
        sft = Path(cfg.sft.output_dir)
        model_cfg = json.loads((sft / "config.json").read_text()) if (sft / "config.json").is_file() else {}
        layers, layers_of, where = cfg.model.num_layers, "the tiny model (model.num_layers)", str(sft)
    history = cfg.env.think_history != "keep" or cfg.env.context != "none"
    if history and (Path(where) / "config.json").is_file():  # the template decides whether hermes makes chat turns;
        # a missing tokenizer is the run's loader's error
        if refusal := history_refusal(cfg.env, _tokenizer_or_none(where)):
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
