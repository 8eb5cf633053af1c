"""Shared fixtures: one tiny tokenizer + model per test session (real HF objects, built locally)."""

from __future__ import annotations

import pytest
import torch

# The suite's models are tiny: a second intra-op thread only adds synchronization, and on a busy 2-core
# machine it makes them up to 10x slower. One thread per test process.
torch.set_num_threads(1)

TINY_CORPUS = [
    "Compute 4821 * 937.", "What is 7^123 mod 97?", "Solve 3*x + 17 = 62 for x.",
    "Let me compute it.\n```python\nprint(4821 * 937)\n```", "\nCode execution result: 4517277\n",
    "The answer is \\boxed{4517277}.",
] * 20


@pytest.fixture(scope="session")
def tiny_tokenizer():
    from agents.models import train_tokenizer

    return train_tokenizer(TINY_CORPUS, vocab_size=384)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tiny_tokenizer):
    """A saved tiny Qwen2 model (random init) for tests that need weights on disk."""
    from agents.models import build_tiny_model, save_pretrained

    model = build_tiny_model(tiny_tokenizer, hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1,
                             intermediate_size=128, seed=0)
    return save_pretrained(model, tiny_tokenizer, tmp_path_factory.mktemp("tiny") / "model")
