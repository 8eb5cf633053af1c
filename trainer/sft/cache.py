"""The SFT warm start's cache key: what the expert data and the model depend on, and the check that `alprl train`
starts from a warm start built for its own config."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

from agents.env_families import env_entry
from agents.experts import EXPERT_DATA_VERSION
from trainer.config.errors import ConfigError
from trainer.config.train_config import TrainConfig
from trainer.sft.base import base_identity

META_FILE = "sft_meta.json"
RL_ONLY_ENV_KEYS = ("sandbox_url", "sandbox_retry_s", "run_timeout_s", "mask_void_turns", "action_projection",
                    "projection_min_similarity", "invalid_action_penalty",  # the expert's data does not depend on them
                    # the expert plays generated train tasks only (`alprl sft` refuses env.dataset), so a warm start
                    # serves RL on any dataset file
                    "dataset", "eval_dataset", "dataset_format", "dataset_split_field", "dataset_fields",
                    "reasoning_gym",
                    "openenv",  # alprl/OpenEnv-v0 has no expert; the server's address is where RL plays
                    "harness",  # rollout.source=harness: a user's agent plays RL episodes, the expert plays SFT's
                    "think_history",  # in the key only with sft.expert_thinking (KEYED_WHEN_SET), the rest: RL's
                    "context", "context_budget", "summarizer")  # compaction is RL's: the expert's episodes stay whole
KEYED_WHEN_SET = {"model.chat_template": "chatml", "sft.expert_thinking": False}
"""Keys added to the warm start's inputs after warm starts were built: in the key only away from these values (their
defaults, which every earlier warm start had), so those keep their fingerprint."""


def sft_inputs(cfg: TrainConfig) -> dict:
    """Everything that changes what the expert plays, how it errs and how the model sees it (not where code runs
    or how RL masks turns): the SFT cache key, stored in sft_meta.json so a mismatch can name its keys."""
    env = {k: v for k, v in asdict(cfg.env).items() if k not in RL_ONLY_ENV_KEYS}
    # model.lora is how RL trains the warm start (SFT trains every weight), so LoRA and full runs share one
    model = ({k: v for k, v in asdict(cfg.model).items() if k not in ("path", "lora")} if not cfg.model.path
             else {"base": base_identity(cfg)})  # a checkpoint's own sizes and tokenizer replace the tiny model's
    sft = {k: v for k, v in asdict(cfg.sft).items() if k not in ("output_dir", "save_every", "torch_threads", "seed")}
    for key, unset in KEYED_WHEN_SET.items():
        section, name = key.split(".")
        part = {"model": model, "sft": sft}[section]
        if part.get(name, unset) == unset:
            part.pop(name, None)
    if cfg.sft.expert_thinking:  # the thinking the expert writes is kept or stripped from later prompts' history
        env["think_history"] = cfg.env.think_history
    # the SFT seed under the key the RL seed had before the two were split, so a warm start built at seed 0 keeps
    # its fingerprint
    return {"sft": sft, "model": model, "env": env, "seed": cfg.sft.seed,
            "max_obs_tokens": cfg.rollout.max_obs_tokens,  # observations are cut in the SFT data too
            "agent_format": env_entry(cfg.env.id).agent_format, "expert_data_version": EXPERT_DATA_VERSION}


def sft_fingerprint(cfg: TrainConfig) -> str:
    return hashlib.sha256(json.dumps(sft_inputs(cfg), sort_keys=True).encode()).hexdigest()[:16]


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        out.update(_flatten(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def check_warm_start(cfg: TrainConfig) -> None:
    """Raise if the SFT model in `sft.output_dir` was built for another config than `cfg` (a stale cache would
    train a model on text it never saw). `model.path` skips the check: the user chose that model."""
    meta_path = Path(cfg.sft.output_dir) / META_FILE
    if cfg.model.path or not meta_path.exists():
        return
    meta = json.loads(meta_path.read_text())
    if meta.get("fingerprint") == sft_fingerprint(cfg):
        return
    if "inputs" in meta:
        now, then = _flatten(json.loads(json.dumps(sft_inputs(cfg)))), _flatten(meta["inputs"])  # tuples as lists
        diff = ", ".join(f"{k}: {then.get(k)!r} there, {now.get(k)!r} here"
                         for k in sorted(now.keys() | then.keys()) if now.get(k) != then.get(k))
    else:
        diff = "it was built by an older alprl that did not record its inputs"
    raise ConfigError(f"the SFT warm start in {cfg.sft.output_dir} was built for another config ({diff}). "
                     f"Rebuild it with `alprl sft` and the same --config and overrides, or set "
                     f"model.path={cfg.sft.output_dir} to start from it anyway")
