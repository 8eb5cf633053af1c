"""The shape of the model a run starts from, and its parameter count, without loading any weights.

`model_shape(cfg)` reads, in this order: the start model's `config.json` (model.path as a local directory or a hub
id already in the local Hugging Face cache, through `config_json`; never the network); the tiny model `alprl sft`
builds when model.path is empty (its model.* settings); a small table of well-known hub ids (`KNOWN_SHAPES`), so that
a recipe can be planned on a machine that has not downloaded its model. Anything else is a `ConfigError` naming what
is needed. `trainer/runtime/memory_plan.py` is the consumer, and config validation (trainer/setup/file_checks.py)
reads `config_json` too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agents.models import resolve_local
from trainer.config.errors import ConfigError


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer (Qwen2 / Llama layout): D hidden, L layers, H heads, H_kv kv heads, F MLP width."""

    name: str
    hidden: int  # D
    layers: int  # L
    heads: int  # H
    kv_heads: int  # H_kv (grouped-query attention)
    intermediate: int  # F
    vocab: int  # V
    tied: bool  # the LM head shares the input embedding
    qkv_bias: bool = True  # Qwen2 has biases on q/k/v (not on o); Llama has none
    source: str = ""  # where the shape was read from

    @property
    def kv_dim(self) -> int:
        """Width of K (and of V): H_kv heads of D / H each."""
        return self.kv_heads * (self.hidden // self.heads)

    def layer_params(self) -> int:
        """Parameters of one decoder layer (Qwen2DecoderLayer)."""
        d, kv, f = self.hidden, self.kv_dim, self.intermediate
        attn = d * d + 2 * d * kv + d * d  # q, k, v, o projections
        bias = (d + 2 * kv) if self.qkv_bias else 0  # q/k/v biases
        mlp = 3 * d * f  # gate, up, down (SwiGLU)
        norms = 2 * d  # input and post-attention RMSNorm weights
        return attn + bias + mlp + norms

    def root_params(self) -> int:
        """Parameters outside the decoder layers: embeddings, final norm, an untied LM head."""
        embed = self.vocab * self.hidden
        return embed + self.hidden + (0 if self.tied else embed)

    def params(self) -> int:
        return self.layers * self.layer_params() + self.root_params()

    def linear_dims(self) -> dict[str, tuple[int, int]]:
        """(in, out) features of each linear layer of a decoder layer, by its module name (Qwen2 / Llama)."""
        d, kv, f = self.hidden, self.kv_dim, self.intermediate
        return {"q_proj": (d, d), "k_proj": (d, kv), "v_proj": (d, kv), "o_proj": (d, d),
                "gate_proj": (d, f), "up_proj": (d, f), "down_proj": (f, d)}

    def lora_layer_params(self, rank: int, targets: list[str]) -> int:
        """LoRA parameters of one decoder layer: r·(in + out) per targeted linear layer (A and B)."""
        dims = self.linear_dims()
        return sum(rank * sum(dims[t]) for t in dict.fromkeys(targets) if t in dims)


# Published shapes (the config.json of each hub repository), for planning without the files. Qwen2.5-1.5B has the
# same dimensions as Qwen2.5-Math-1.5B.
_QWEN25_7B = dict(hidden=3584, layers=28, heads=28, kv_heads=4, intermediate=18944, vocab=152064, tied=False)
_QWEN25_15B = dict(hidden=1536, layers=28, heads=12, kv_heads=2, intermediate=8960, vocab=151936, tied=True)
KNOWN_SHAPES: dict[str, dict[str, Any]] = {
    "Qwen/Qwen2.5-7B": _QWEN25_7B,
    "Qwen/Qwen2.5-7B-Instruct": _QWEN25_7B,
    "Qwen/Qwen2.5-Math-1.5B": _QWEN25_15B,
    "Qwen/Qwen2.5-Math-1.5B-Instruct": _QWEN25_15B,
    "Qwen/Qwen2.5-1.5B": _QWEN25_15B,
    "Qwen/Qwen2.5-1.5B-Instruct": _QWEN25_15B,
}

_KEYS = {"hidden": "hidden_size", "layers": "num_hidden_layers", "heads": "num_attention_heads",
         "intermediate": "intermediate_size", "vocab": "vocab_size"}


def shape_from_config_json(name: str, config: dict, where: str) -> ModelShape:
    """A `ModelShape` from a transformers config.json (its text part); a missing dimension is a `ConfigError`."""
    missing = [key for key in _KEYS.values() if key not in config]
    if missing:
        raise ConfigError(f"memory plan: {where}/config.json has no {', '.join(missing)}; the plan needs the model's "
                          "dimensions")
    dims = {field: int(config[key]) for field, key in _KEYS.items()}
    qwen = config.get("model_type", "qwen2") == "qwen2"
    return ModelShape(name=name, kv_heads=int(config.get("num_key_value_heads") or dims["heads"]),
                      tied=bool(config.get("tie_word_embeddings", False)),  # Qwen2Config's default is untied
                      qkv_bias=bool(config.get("attention_bias", qwen)), source=f"{where}/config.json", **dims)


def config_json(path: str) -> tuple[dict, str] | None:
    """(config.json, its directory) of a model directory or a hub id in the local cache (never the network); None
    where neither holds it."""
    try:
        local = resolve_local(path)
    except FileNotFoundError:
        return None  # loading the model reports that, before anything starts
    config = json.loads((local / "config.json").read_text())
    return config.get("text_config", config), str(local)  # multimodal configs nest the language model's


def model_shape(cfg: Any) -> ModelShape:
    """The start model's shape: its config.json, else the tiny model's model.* settings, else `KNOWN_SHAPES`."""
    m = cfg.model
    if not m.path:  # the tiny model `alprl sft` builds (agents/models.py build_tiny_model: Qwen2, tied embeddings)
        return ModelShape(name="tiny model (model.*)", hidden=m.hidden_size, layers=m.num_layers, heads=m.num_heads,
                          kv_heads=m.num_kv_heads, intermediate=m.intermediate_size, vocab=m.vocab_size,
                          tied=True, source="model.* settings")
    found = config_json(m.path)
    if found is not None:
        return shape_from_config_json(m.path, *found)
    if m.path in KNOWN_SHAPES:
        return ModelShape(name=m.path, source="built-in table of published shapes", **KNOWN_SHAPES[m.path])
    raise ConfigError(f"memory plan: model.path={m.path!r} is neither a local directory with a config.json nor in "
                      f"the local Hugging Face cache, and its shape is not built in ({', '.join(KNOWN_SHAPES)}); "
                      "point model.path at a local model directory")
