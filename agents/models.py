"""The policy's model and tokenizer: the tiny embedded Qwen2 model, Hugging Face save/load, real-model loading.

No model hub is reachable, so the project builds its own tiny causal LM: the Qwen2 architecture (so vLLM and
transformers both serve it), a few million parameters, and the byte-level BPE tokenizer of ``agents.tokenizer``.
Real models (Qwen2.5, Qwen3, ...) load through the same ``load_model_and_tokenizer`` from a local directory or the
local Hugging Face cache; nothing here ever downloads.

Typical use::

    tok = train_tokenizer(corpus, vocab_size=1024)
    model = build_tiny_model(tok, hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1,
                             intermediate_size=128, seed=0)
    save_pretrained(model, tok, "runs/tiny/init")
    model, tok = load_model_and_tokenizer("runs/tiny/init")
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import torch
from huggingface_hub import snapshot_download
from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from agents.tokenizer import EOS_TOKEN, IM_END, train_tokenizer

__all__ = ["build_tiny_model", "load_model_and_tokenizer", "load_tokenizer", "resolve_local", "save_pretrained",
           "train_tokenizer"]

_GENERIC_TOKENIZER_CLASSES = ("TokenizersBackend", "PreTrainedTokenizerFast")
_HEAD_DIMS = (32, 64, 128)  # the head sizes vLLM's attention kernels support on every backend


def _special_ids(tokenizer: PreTrainedTokenizerBase) -> tuple[int, int, int]:
    """(bos, eos, pad) ids of a tokenizer from ``train_tokenizer``: bos = pad = ``<|endoftext|>``, eos = ``<|im_end|>``."""
    vocab = tokenizer.get_vocab()
    missing = [t for t in (EOS_TOKEN, IM_END) if t not in vocab]
    if missing:
        raise ValueError(f"build_tiny_model: tokenizer lacks special tokens {missing}; build it with "
                         f"agents.tokenizer.train_tokenizer")
    return vocab[EOS_TOKEN], vocab[IM_END], vocab[EOS_TOKEN]


def build_tiny_model(
    tokenizer: PreTrainedTokenizerBase,
    *,
    hidden_size: int,
    num_layers: int,
    num_heads: int,
    num_kv_heads: int,
    intermediate_size: int,
    seed: int,
    max_position_embeddings: int = 1024,
    tie_word_embeddings: bool = True,
) -> Qwen2ForCausalLM:
    """A freshly initialized fp32 Qwen2 causal LM sized to ``tokenizer`` (about 3.2M parameters at the run
    config's shape). The shape is the config's `model.*` keys, without defaults here: the config states them once.

    Args:
        tokenizer: from ``train_tokenizer``; ``vocab_size = len(tokenizer)``.
        hidden_size, num_layers, num_heads, num_kv_heads, intermediate_size: the Qwen2 dimensions (D, L, H, H_kv, F);
            ``hidden_size / num_heads`` must be 32, 64 or 128 and ``num_heads`` a multiple of ``num_kv_heads`` (GQA).
        max_position_embeddings: the longest sequence (prompt + response, in tokens) the RoPE tables are sized for.
        seed: initialization seed; the global torch RNG is left untouched.
        tie_word_embeddings: share the input embedding and the LM head (saves vocab × D parameters).
    """
    if hidden_size % num_heads or hidden_size // num_heads not in _HEAD_DIMS:
        raise ValueError(f"build_tiny_model: hidden_size/num_heads = {hidden_size}/{num_heads} must be one of "
                         f"{_HEAD_DIMS} (vLLM attention); change hidden_size or num_heads")
    if num_heads % num_kv_heads:
        raise ValueError(f"build_tiny_model: num_heads={num_heads} is not a multiple of num_kv_heads={num_kv_heads}")
    bos_id, eos_id, pad_id = _special_ids(tokenizer)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=tie_word_embeddings,
        use_sliding_window=False,
        bos_token_id=bos_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        dtype="float32",
    )
    with torch.random.fork_rng(devices=[]):  # seeded init without disturbing the caller's RNG stream
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config).to(torch.float32)
    # One eos id (int, not a list) so every engine stops on the same token the tokenizer calls eos.
    model.generation_config = GenerationConfig(bos_token_id=bos_id, eos_token_id=eos_id, pad_token_id=pad_id)
    return model


def save_pretrained(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, path: str | os.PathLike) -> Path:
    """Write ``model`` (safetensors, config.json, generation_config.json) and ``tokenizer`` to directory ``path``.

    The directory loads with ``AutoModelForCausalLM.from_pretrained(path)`` / ``AutoTokenizer.from_pretrained(path)``
    and with ``load_model_and_tokenizer(path)``. Returns the directory.
    """
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


# A Hugging Face repo id ("name" or "org/name"); anything else (absolute, "./x", "~/x", "a/b/c") is only a path.
_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")


def resolve_local(name_or_path: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> Path:
    """The local directory holding ``name_or_path``: the directory itself, or its snapshot in the Hugging Face cache.

    Never touches the network. Raises ``FileNotFoundError`` with one line saying where it looked and what to do.
    """
    name = os.fspath(name_or_path)
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file() and (path / "adapter_config.json").is_file():
            raise FileNotFoundError(f"{path} holds LoRA adapters only (a checkpoint of a model.lora run): point at its "
                                    f"merged export {path / 'merged'} (written with model.lora.export_merged=true)")
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"model directory {path} has no config.json; point at a directory written by "
                                    f"save_pretrained (config.json + *.safetensors + tokenizer files)")
        return path
    if _REPO_ID.fullmatch(name):
        try:  # a repo id such as "Qwen/Qwen2.5-0.5B": look in the local cache only
            return Path(snapshot_download(name, cache_dir=cache_dir, local_files_only=True))
        except (LocalEntryNotFoundError, HFValidationError, FileNotFoundError):
            pass
    where = f"cache {cache_dir}" if cache_dir else "the Hugging Face cache (HF_HOME / HF_HUB_CACHE)"
    raise FileNotFoundError(
        f"model {name!r} not found: no such directory and not in {where}; pass a local directory holding "
        f"config.json + weights + tokenizer, copy the model into the cache, or build the tiny model with "
        f"agents.models.build_tiny_model and save_pretrained"
    )


def _load_tokenizer(local: Path, trust_remote_code: bool) -> PreTrainedTokenizerBase:
    """The tokenizer the checkpoint declares, loaded offline.

    A checkpoint whose tokenizer_config.json names the generic class (ours) is loaded from tokenizer.json verbatim:
    ``AutoTokenizer`` in transformers 5 would hand any ``qwen2`` checkpoint to ``Qwen2Tokenizer``, whose NFC
    normalizer breaks exact round trips of non-NFC text. Real models (declaring e.g. Qwen2Tokenizer) go through
    ``AutoTokenizer`` as usual.
    """
    config_file = local / "tokenizer_config.json"
    declared = json.loads(config_file.read_text()).get("tokenizer_class") if config_file.is_file() else None
    if declared in _GENERIC_TOKENIZER_CLASSES and (local / "tokenizer.json").is_file():
        return PreTrainedTokenizerFast.from_pretrained(local, local_files_only=True)
    return AutoTokenizer.from_pretrained(local, local_files_only=True, trust_remote_code=trust_remote_code)


def load_tokenizer(name_or_path: str | os.PathLike, *, trust_remote_code: bool = False,
                   cache_dir: str | os.PathLike | None = None) -> PreTrainedTokenizerBase:
    """The tokenizer of a model directory (or cached repo id) alone, offline, as `load_model_and_tokenizer` loads
    it: for callers whose engine loads the weights itself (vLLM), where an fp32 copy in this process would only
    cost memory. A tokenizer without a pad token gets pad = eos."""
    local = resolve_local(name_or_path, cache_dir)
    tokenizer = _load_tokenizer(local, trust_remote_code)
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ValueError(f"tokenizer at {local} has neither a pad nor an eos token; set one in its "
                             f"tokenizer_config.json")
        tokenizer.pad_token = tokenizer.eos_token  # padding is masked out, so any real token id works
    return tokenizer


def load_model_and_tokenizer(
    name_or_path: str | os.PathLike,
    *,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    trust_remote_code: bool = False,
    cache_dir: str | os.PathLike | None = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a causal LM and its tokenizer offline: the tiny model or a real one (Qwen2.5, Qwen3, ...).

    Args:
        name_or_path: a directory (e.g. from ``save_pretrained``) or a hub repo id already in the local cache.
        dtype: parameter dtype after loading (fp32 for the trainer; bf16 for a rollout engine).
        device: where the parameters go.
        trust_remote_code: passed to transformers, for models whose code ships with the checkpoint.
        cache_dir: the Hugging Face hub cache to look in (default: the standard one).
    Returns:
        ``(model, tokenizer)``; the model is in eval mode; a tokenizer without a pad token gets pad = eos.
    """
    local = resolve_local(name_or_path, cache_dir)
    tokenizer = load_tokenizer(local, trust_remote_code=trust_remote_code)
    model = AutoModelForCausalLM.from_pretrained(
        local, dtype=dtype, local_files_only=True, trust_remote_code=trust_remote_code
    ).to(device)
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.eval()
    return model, tokenizer
