"""Thinking-model chat templates on the real Qwen vocabulary, for tests/agents/test_template_check.py and
test_think_history.py. The templates are Jinja files in tests/agents/fixtures/, written for alprl from the documented
behaviour of their families (module docstring of agents/templates/check.py):
- qwen3_style.jinja: an assistant turn shows its `<think>` block only after the last user message (Qwen3);
- strip_all_thinking.jinja: only the last message shows it (QwQ, DeepSeek-R1).
Both parse the thinking out of the message content, as a re-rendering framework stores a reply."""

from __future__ import annotations

import json
from pathlib import Path

from qwen_vocab import IM_END, QWEN3_ADDED, wrap
from tokenizers import AddedToken, Tokenizer
from transformers import PreTrainedTokenizerFast

FIXTURES = Path(__file__).resolve().parent / "fixtures"
TEMPLATES = ("qwen3_style", "strip_all_thinking")


def thinking_tokenizer(backend: Tokenizer, name: str) -> PreTrainedTokenizerFast:
    """Qwen3's tokenizer layout (eos `<|im_end|>`, `<think>` and `<tool_response>` as added tokens) with the fixture
    template `name`."""
    tok = wrap(backend, eos=IM_END, chat_template=(FIXTURES / f"{name}.jinja").read_text())
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in QWEN3_ADDED])
    return tok


def model_dir(tok: PreTrainedTokenizerFast, path: Path) -> Path:
    """A directory `model.path` and `alprl check-template` take: the tokenizer and a config.json (no weights, which
    neither reads)."""
    path.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(path)
    (path / "config.json").write_text(json.dumps({"model_type": "qwen2", "num_hidden_layers": 2,
                                                  "max_position_embeddings": 4096}))
    return path
