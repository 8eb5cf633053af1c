"""`alprl sft model.path=DIR`: the warm start fine-tunes a checkpoint the user brings instead of the tiny model.

The expert's episodes, their masks and the optimizer are the tiny model's; what changes is where the tokenizer
and the weights come from. The checkpoint's own tokenizer (and, through the agent, its chat template) tokenizes
the episodes, and each episode ends at the token the checkpoint closes a turn with (its template's end-of-turn
token, else eos), as its rollouts will. The model trains in fp32 and is saved in fp32 to `sft.output_dir`, which
RL then starts from (`model.path=<sft.output_dir>`; `alprl demo` does that itself).

Refused in one line, before any expert episode is played where it can be known then: no local checkpoint at the
path; a tokenizer with more ids than the model has embedding rows; no end-of-turn token at all; and, once the
episodes are tokenized, an episode or prompt plus the RL response budget longer than the model's context.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from agents.control_tokens import template_end_of_turn_id
from agents.models import load_model_and_tokenizer, resolve_local
from trainer.config.errors import ConfigError
from trainer.config.train_config import TrainConfig


def base_checkpoint_dir(cfg: TrainConfig) -> Path:
    """The local directory of `model.path`; a `ConfigError` naming the key when there is none (cheap: no weights
    are read, so `--dry-run` refuses the same paths a real run would)."""
    try:
        return resolve_local(cfg.model.path)
    except FileNotFoundError as exc:
        raise ConfigError(f"model.path={cfg.model.path}: `alprl sft` fine-tunes a local checkpoint there, but {exc}; "
                          f"or leave model.path empty to build the tiny model") from None


def base_identity(cfg: TrainConfig) -> dict[str, str]:
    """What the SFT cache key records of the checkpoint: its directory and a digest of its files' names, sizes and
    modification times (another checkpoint at the same path rebuilds the warm start; hashing the weights would cost
    a full read of a large model on every run)."""
    local = base_checkpoint_dir(cfg).resolve()
    digest = hashlib.sha256()
    for f in sorted(p for p in local.iterdir() if p.is_file()):
        stat = f.stat()
        digest.update(f"{f.name}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return {"path": str(local), "files": digest.hexdigest()[:16]}


def turn_end_id(tokenizer: PreTrainedTokenizerBase, where: str) -> int:
    """The id an expert episode ends with: the chat template's end-of-turn token, else eos (what the policy's
    rollouts stop on, agents/control_tokens.py)."""
    turn_end = template_end_of_turn_id(tokenizer)
    if turn_end is not None:
        return turn_end
    if tokenizer.eos_token_id is None:
        raise ConfigError(f"model.path={where}: its tokenizer declares no eos token and its chat template no "
                          f"end-of-turn token, so an expert turn has nothing to end on; set eos_token in its "
                          f"tokenizer_config.json")
    return int(tokenizer.eos_token_id)


def load_base(cfg: TrainConfig) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The checkpoint in fp32 and its tokenizer, checked to fit each other."""
    local = base_checkpoint_dir(cfg)
    model, tokenizer = load_model_and_tokenizer(local, dtype=torch.float32)
    rows = model.get_input_embeddings().num_embeddings
    if len(tokenizer) > rows:
        raise ConfigError(f"model.path={cfg.model.path}: its tokenizer has {len(tokenizer)} ids but the model only "
                          f"{rows} embedding rows; the tokenizer files do not belong to these weights")
    turn_end_id(tokenizer, cfg.model.path)
    return model, tokenizer


def check_context(model: PreTrainedModel, data: list[tuple[list[int], list[int]]], cfg: TrainConfig) -> None:
    """Refuse expert episodes (or a prompt plus `rollout.max_response_tokens`) longer than the model's context."""
    context = getattr(model.config, "max_position_embeddings", None)
    if context is None:
        return
    longest = max(len(ids) for ids, _ in data)
    prompt = max(mask.index(1) for _, mask in data if 1 in mask)
    need = max(longest, prompt + cfg.rollout.max_response_tokens)
    if need > context:
        raise ConfigError(f"model.path={cfg.model.path}: its context is {context} tokens but the expert's episodes "
                          f"need {need} (longest episode {longest}, longest prompt {prompt} + "
                          f"rollout.max_response_tokens={cfg.rollout.max_response_tokens}); lower "
                          f"rollout.max_response_tokens / env.max_turns or use a model with a longer context")
