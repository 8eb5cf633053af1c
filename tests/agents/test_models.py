"""Tokenizer training, the tiny Qwen2 model, and Hugging Face save/load (real files in tmp_path, no hub)."""

from __future__ import annotations

import inspect
import json
import shutil
import subprocess
import sys
import textwrap
import unicodedata

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from agents.models import build_tiny_model, load_model_and_tokenizer, save_pretrained
from agents.tokenizer import EOS_TOKEN, IM_END, IM_START, train_tokenizer
from trainer.config.train_config import ModelConfig

# A deterministic corpus rich enough to fill a 1024-token vocabulary: real Python source plus TIR-like transcripts.
CORPUS = [inspect.getsource(json.encoder), inspect.getsource(textwrap)] + [
    f"Compute {i * 7919 % 100003} mod {i % 97 + 2}.\n```python\nprint({i * 7919 % 100003} % {i % 97 + 2})\n```\n"
    f"Code execution result: {i * 7919 % 100003 % (i % 97 + 2)}\nThe answer is \\boxed{{{i}}}."
    for i in range(200)
]
HARD_TEXTS = [
    "",
    "x=12345",
    "def f(a, b):\n\treturn a ** 2 + b  # squares\r\n\n\n    ",
    "héllo wörld — ünïcödé 世界 こんにちは 🙂🚀 ½ x² ２３",
    unicodedata.normalize("NFD", "café naïve"),  # decomposed accents: round trip needs no NFC normalizer
    "```python\nprint(f\"{x!r:>10}\")\n```\nCode execution result: 0.30000000000000004",
    "<|im_start|>user\nliteral specials<|im_end|> and <|endoftext|> in text",
    "\x00\x07 control bytes \ufeff BOM and a lone \u200b zero width",
    "if (a):\n        x = [1,  2]\n    return 3",  # indents and double spaces: where pre-tokenizers differ
]


def _tiny(tok, **changes):
    """The tiny model at the run config's `model.*` shape (and seed 0), `changes` applied."""
    m = ModelConfig()
    shape = {"hidden_size": m.hidden_size, "num_layers": m.num_layers, "num_heads": m.num_heads,
             "num_kv_heads": m.num_kv_heads, "intermediate_size": m.intermediate_size, "seed": 0}
    return build_tiny_model(tok, **(shape | changes))


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer(CORPUS, vocab_size=1024, extra_special_tokens=["<tool_call>"])


@pytest.fixture(scope="module")
def saved(tok, tmp_path_factory):
    """(directory, model) of a saved tiny model; the model is in eval mode."""
    model = _tiny(tok, seed=3).eval()
    return save_pretrained(model, tok, tmp_path_factory.mktemp("tiny") / "ckpt"), model


def ids(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


@pytest.mark.parametrize("text", HARD_TEXTS)
def test_any_text_round_trips_exactly(tok, text):
    assert tok.decode(ids(tok, text), skip_special_tokens=False) == text


def test_digits_are_single_tokens_and_never_merged(tok):
    assert [tok.decode([i]) for i in ids(tok, "12345")] == list("12345")
    assert [tok.decode([i]) for i in ids(tok, "x=12345")][-5:] == list("12345")
    # The corpus is full of multi-digit numbers, so a merge spanning digits would show up if it were possible.
    assert [t for t in tok.get_vocab() if any(c in "0123456789" for c in t) and len(t) > 1] == []


def test_special_tokens_are_single_ids(tok):
    for token in (EOS_TOKEN, IM_START, IM_END, "<tool_call>"):
        assert len(ids(tok, token)) == 1, token
    assert [tok.convert_tokens_to_ids(t) for t in (EOS_TOKEN, IM_START, IM_END, "<tool_call>")] == [0, 1, 2, 3]
    assert (tok.eos_token, tok.pad_token, tok.bos_token) == (IM_END, EOS_TOKEN, None)
    assert tok.encode("hi") == ids(tok, "hi")  # add_special_tokens adds no bos/eos


def test_vocab_size_and_its_lower_bound(tok):
    assert len(tok) == 1024
    with pytest.raises(ValueError, match="vocab_size=100"):
        train_tokenizer(["abc"], vocab_size=100)


TOOL_CHAT = [
    {"role": "system", "content": "Use python."},
    {"role": "user", "content": "What is 2+3?"},
    {"role": "assistant", "content": "```python\nprint(2+3)\n```"},
    {"role": "tool", "content": "5"},
    {"role": "assistant", "content": "\\boxed{5}"},
    {"role": "user", "content": "And 4+4?"},
]
EXPECTED_CHATML = (
    "<|im_start|>system\nUse python.<|im_end|>\n"
    "<|im_start|>user\nWhat is 2+3?<|im_end|>\n"
    "<|im_start|>assistant\n```python\nprint(2+3)\n```<|im_end|>\n"
    "<|im_start|>tool\n5<|im_end|>\n"
    "<|im_start|>assistant\n\\boxed{5}<|im_end|>\n"
    "<|im_start|>user\nAnd 4+4?<|im_end|>\n"
)


def test_chat_template_renders_chatml_with_tool_turns(tok):
    assert tok.apply_chat_template(TOOL_CHAT, tokenize=False) == EXPECTED_CHATML
    prompt = tok.apply_chat_template(TOOL_CHAT, tokenize=False, add_generation_prompt=True)
    assert prompt == EXPECTED_CHATML + "<|im_start|>assistant\n"
    # After a tool turn the generation prompt opens the next assistant turn.
    after_tool = tok.apply_chat_template(TOOL_CHAT[:4], tokenize=False, add_generation_prompt=True)
    assert after_tool.endswith("<|im_start|>tool\n5<|im_end|>\n<|im_start|>assistant\n")
    encoded = tok.apply_chat_template(TOOL_CHAT, tokenize=True, add_generation_prompt=True, return_dict=True)
    assert list(encoded["input_ids"]) == ids(tok, prompt)


def test_chat_template_marks_assistant_tokens_and_rejects_bad_roles(tok):
    out = tok.apply_chat_template(TOOL_CHAT[:3], return_dict=True, return_assistant_tokens_mask=True)
    marked = [i for i, m in zip(out["input_ids"], out["assistant_masks"], strict=True) if m]
    assert tok.decode(marked) == "```python\nprint(2+3)\n```<|im_end|>"
    with pytest.raises(Exception, match="unknown role narrator"):
        tok.apply_chat_template([{"role": "narrator", "content": "x"}], tokenize=False)


def test_training_is_deterministic_across_processes(tok, tmp_path):
    again = train_tokenizer(CORPUS, vocab_size=1024, extra_special_tokens=["<tool_call>"])
    assert again.backend_tokenizer.to_str() == tok.backend_tokenizer.to_str()
    # A fresh interpreter (new hash seeds in Rust and Python) must produce the same vocabulary and merges.
    (tmp_path / "corpus.json").write_text(json.dumps(CORPUS))
    script = (
        "import json, sys; from agents.tokenizer import train_tokenizer; "
        "corpus = json.load(open(sys.argv[1])); "
        "sys.stdout.write(train_tokenizer(corpus, 1024, ['<tool_call>']).backend_tokenizer.to_str())"
    )
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path / "corpus.json")],
                         capture_output=True, text=True, check=True)
    assert out.stdout == tok.backend_tokenizer.to_str()
    other = train_tokenizer(CORPUS[2:], vocab_size=1024)
    assert other.get_vocab() != tok.get_vocab()  # the check can fail: the corpus does shape the vocabulary


def test_tiny_model_config_size_and_seeding(tok):
    rng_before = torch.get_rng_state()
    model = _tiny(tok)
    assert torch.equal(torch.get_rng_state(), rng_before)  # seeded init leaves the caller's RNG alone
    n_params = sum(p.numel() for p in model.parameters())
    assert 2_000_000 < n_params < 6_000_000, n_params
    cfg = model.config
    assert (cfg.model_type, cfg.vocab_size, cfg.hidden_size // cfg.num_attention_heads) == ("qwen2", len(tok), 64)
    assert (cfg.bos_token_id, cfg.eos_token_id, cfg.pad_token_id) == (0, 2, 0)
    gen = model.generation_config
    assert (gen.eos_token_id, gen.pad_token_id) == (tok.eos_token_id, tok.pad_token_id) == (2, 0)
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()  # tied
    same, other = _tiny(tok), _tiny(tok, seed=1)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), same.parameters(), strict=True))
    assert not torch.equal(model.model.embed_tokens.weight, other.model.embed_tokens.weight)


def test_tiny_model_rejects_head_dims_vllm_cannot_serve(tok):
    with pytest.raises(ValueError, match="must be one of"):
        _tiny(tok, hidden_size=240, num_heads=4)  # head_dim 60
    with pytest.raises(ValueError, match="multiple of num_kv_heads"):
        _tiny(tok, num_heads=4, num_kv_heads=3)


def _batch(tok):
    """Two prompts right-padded into (B=2, T) input_ids and attention_mask."""
    return tok(["Compute 12*34.", "print(1)\nCode execution result: 1"], padding=True, return_tensors="pt")


def test_save_then_load_gives_identical_logits_and_tokens(tok, saved):
    path, model = saved
    assert {"model.safetensors", "config.json", "generation_config.json", "tokenizer.json"} <= {
        p.name for p in path.iterdir()
    }
    batch = _batch(tok)
    with torch.no_grad():
        want = model(**batch).logits  # (B, T, V)
        loaded, loaded_tok = load_model_and_tokenizer(path)
        auto = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
        assert torch.equal(loaded(**batch).logits, want) and torch.equal(auto(**batch).logits, want)
    assert loaded.dtype == torch.float32 and not loaded.training
    assert loaded.generation_config.eos_token_id == 2 and loaded.generation_config.pad_token_id == 0
    auto_tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    for text in HARD_TEXTS[:4] + HARD_TEXTS[5:]:  # NFC text: every loader gives the trained ids
        assert ids(loaded_tok, text) == ids(auto_tok, text) == ids(tok, text), text
    assert loaded_tok.decode(ids(loaded_tok, HARD_TEXTS[4])) == HARD_TEXTS[4]
    assert loaded_tok.apply_chat_template(TOOL_CHAT, tokenize=False) == EXPECTED_CHATML
    assert (loaded_tok.eos_token, loaded_tok.pad_token) == (IM_END, EOS_TOKEN)


def test_load_casts_dtype(saved):
    model, _ = load_model_and_tokenizer(saved[0], dtype=torch.bfloat16)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}


def test_load_from_local_hf_cache(saved, tmp_path):
    # The hub cache layout (models--org--name/{refs/main, snapshots/<commit>/}), as huggingface_hub writes it.
    commit = "0" * 40
    repo = tmp_path / "hub" / "models--someorg--tiny"
    shutil.copytree(saved[0], repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    model, tokenizer = load_model_and_tokenizer("someorg/tiny", cache_dir=tmp_path / "hub")
    assert model.config.vocab_size == len(tokenizer) == 1024


def test_tokenizer_without_pad_gets_eos(saved, tmp_path):
    path = shutil.copytree(saved[0], tmp_path / "nopad")
    config = json.loads((path / "tokenizer_config.json").read_text())
    del config["pad_token"]
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    _, tokenizer = load_model_and_tokenizer(path)
    assert tokenizer.pad_token == tokenizer.eos_token == IM_END


@pytest.mark.parametrize("name", ["missing_dir", "someorg/not-cached"])
def test_missing_model_is_one_clear_error_without_download(tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError) as err:
        load_model_and_tokenizer(name, cache_dir=tmp_path / "empty_cache")
    message = str(err.value)
    assert f"model {name!r} not found" in message and "save_pretrained" in message and "\n" not in message
    with pytest.raises(FileNotFoundError, match="has no config.json"):
        load_model_and_tokenizer(tmp_path)  # a directory that is not a checkpoint
