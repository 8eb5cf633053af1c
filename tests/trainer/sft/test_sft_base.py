"""`alprl sft model.path=DIR` fine-tunes the checkpoint there (real Qwen2.5 vocabulary and chat template, tiny
random weights) instead of building the tiny model, or refuses in one line where it cannot."""

from __future__ import annotations

import json

import pytest
import torch
from qwen_vocab import IM_END, IM_START
from safetensors.torch import load_file
from transformers import Qwen2Config, Qwen2ForCausalLM

from agents.models import save_pretrained
from app.cli import main
from trainer.config.errors import ConfigError
from trainer.setup.build import build_config
from trainer.sft.base import load_base
from trainer.sft.train import prepare_data, run_sft

SMALL = ["sft.num_examples=4", "sft.epochs=1", "sft.batch_size=2", "sft.save_every=0", "env.max_turns=2",
         "rollout.max_response_tokens=256", "rollout.max_obs_tokens=64", "eval_tasks=0"]


def _weights(directory) -> dict[str, torch.Tensor]:
    return load_file(str(directory / "model.safetensors"))


def test_sft_fine_tunes_the_checkpoint_at_model_path_with_its_own_tokenizer(qwen_base_dir, qwen_tokenizer, tmp_path):
    cfg = build_config(None, SMALL + [f"model.path={qwen_base_dir}", f"sft.output_dir={tmp_path / 'sft'}"])
    out = run_sft(cfg, show_progress=False)

    config = json.loads((out / "config.json").read_text())
    assert config["vocab_size"] == 151_936 and config["hidden_size"] == 64  # the checkpoint, not a tiny model
    assert json.loads((out / "tokenizer.json").read_text())["model"]["vocab"] == \
        json.loads((qwen_base_dir / "tokenizer.json").read_text())["model"]["vocab"]
    before, after = _weights(qwen_base_dir), _weights(out)
    assert before.keys() == after.keys()
    assert any(not torch.equal(before[k], after[k]) for k in before)  # trained, not copied
    meta = json.loads((out / "sft_meta.json").read_text())
    assert meta["base_model"] == str(qwen_base_dir) and meta["context"] == 1024
    assert meta["inputs"]["model"]["base"]["path"] == str(qwen_base_dir.resolve())

    # the episodes were rendered by the checkpoint's chat template and end at its end-of-turn token, not eos
    tokenizer, data, _ = prepare_data(cfg, False, qwen_tokenizer)
    im_start, im_end = qwen_tokenizer.convert_tokens_to_ids([IM_START, IM_END])
    assert all(ids[0] == im_start and ids[-1] == im_end and mask[-1] == 1 for ids, mask in data)

    first = (out / "sft_meta.json").stat().st_mtime_ns
    assert run_sft(cfg, show_progress=False) == out and (out / "sft_meta.json").stat().st_mtime_ns == first  # cached


def test_a_missing_checkpoint_is_refused_in_one_line_dry_run_included(tmp_path, capsys):
    for extra in ([], ["--dry-run"]):
        assert main(["sft", f"model.path={tmp_path / 'nowhere'}", *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "model.path=" in err and "nowhere" in err
    (tmp_path / "empty").mkdir()
    assert main(["sft", f"model.path={tmp_path / 'empty'}", "--dry-run"]) == 2
    assert "no config.json" in capsys.readouterr().err


def test_a_tokenizer_larger_than_the_embedding_is_refused(qwen_tokenizer, tmp_path):
    small = Qwen2ForCausalLM(Qwen2Config(vocab_size=1000, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=1, num_key_value_heads=1))
    directory = save_pretrained(small, qwen_tokenizer, tmp_path / "mismatched")
    with pytest.raises(ConfigError, match=r"151665 ids but the model only 1000 embedding rows"):
        load_base(build_config(None, [f"model.path={directory}"]))


def test_episodes_longer_than_the_checkpoint_context_are_refused(qwen_base_dir, tmp_path):
    cfg = build_config(None, SMALL + [f"model.path={qwen_base_dir}", f"sft.output_dir={tmp_path / 'sft'}",
                                      "rollout.max_response_tokens=5000"])
    with pytest.raises(ConfigError, match=r"its context is 1024 tokens but the expert's episodes need"):
        run_sft(cfg, show_progress=False)
    assert not (tmp_path / "sft" / "model.safetensors").exists()
