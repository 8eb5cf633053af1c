"""Engines and models shared by the agents tests: one fp32 and one bf16 vLLM engine per test session (start-up
costs ~20 s each); tests push the weights they expect with `update_weights`, so their order does not matter.

The "tool caller" is the tiny model trained to replay one scripted TIR transcript (code turn, result, boxed
answer), so a real rollout reaches the sandbox, as nanochat tests its tool-use engine with a scripted model.
"""

from __future__ import annotations

import pytest
from engine_settings import vllm_engine_kwargs
from tool_script import OBSERVATION, TURN_1, TURN_2

from agents.models import load_model_and_tokenizer
from agents.tir_agent import TIRAgent
from trainer.setup.build import build_config
from trainer.sft.train import train_on_sequences


def _vllm_engine(model_dir, dtype):
    from agents.engines.vllm import VLLMEngine

    return VLLMEngine(model_dir, **vllm_engine_kwargs(dtype=dtype), kv_cache_memory_bytes=64 << 20)


@pytest.fixture(scope="session")
def vllm_fp32(tiny_model_dir):
    engine = _vllm_engine(tiny_model_dir, "float32")
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def vllm_bf16(tiny_model_dir):
    engine = _vllm_engine(tiny_model_dir, "bfloat16")
    yield engine
    engine.close()


@pytest.fixture()
def model_tok(tiny_model_dir):
    return load_model_and_tokenizer(tiny_model_dir)


@pytest.fixture(scope="session")
def tool_caller(tiny_model_dir):
    """(model, tokenizer): the tiny model overfit on TURN_1 + OBSERVATION + TURN_2 + eos after varied prompts."""
    model, tok = load_model_and_tokenizer(tiny_model_dir)
    agent = TIRAgent(tok)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    t1, obs, t2 = (tok.encode(s, add_special_tokens=False) for s in (TURN_1, OBSERVATION, TURN_2))
    data = []
    # Eight prompts: with four, whether it wrote the script after an unseen task's numbers hung on the batch order.
    for a, b in [(127, 827), (4821, 937), (35, 61), (902, 44), (6, 7358), (51, 203), (77, 9), (3344, 12)]:
        prompt = agent.prompt_ids(f"Compute {a} * {b}.", {})
        data.append((prompt + t1 + obs + t2 + [eos], [0] * len(prompt) + [1] * len(t1) + [0] * len(obs)
                     + [1] * (len(t2) + 1)))
    cfg = build_config(None, ["sft.epochs=120", "sft.batch_size=8", "sft.lr=2e-2"])  # 120 full-batch steps
    losses = train_on_sequences(model, data, cfg, tok.pad_token_id, show_progress=False)
    assert losses[-1] < 0.01, f"the tool caller did not memorize its script (loss {losses[-1]:.3f})"
    return model, tok


# ------------------------------------------------------------- the real vocabulary (tests/qwen_vocab.py)


@pytest.fixture(scope="session")
def qwen_vllm(qwen_base_dir):
    """One fp32 vLLM engine on the random base checkpoint of the Qwen2.5 vocabulary; tests push their weights."""
    engine = _vllm_engine(qwen_base_dir, "float32")
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def qwen_tool_caller(qwen_base_dir):
    """(model, tokenizer, scripts): the random base checkpoint memorizing one TIR episode per style
    (tests/agents/qwen_script.py: simpletir and hermes, Unicode, a character sampled byte by byte)."""
    from qwen_script import memorize, script

    model, tok = load_model_and_tokenizer(qwen_base_dir)
    scripts = {style: script(tok, style) for style in ("simpletir", "hermes")}
    loss = memorize(model, [s.sequence for s in scripts.values()])
    assert loss < 0.05, f"the Qwen tool caller did not memorize its scripts (loss {loss:.3f})"
    return model, tok, scripts
