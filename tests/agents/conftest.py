"""Engines and models shared by the agents tests: one fp32 and one bf16 vLLM engine per test session (start-up
costs ~20 s each); tests push the weights they expect with `update_weights`, so their order does not matter.

The "tool caller" is the tiny model trained to replay one scripted TIR transcript (code turn, result, boxed
answer), so a real rollout reaches the sandbox, as nanochat tests its tool-use engine with a scripted model.
"""

from __future__ import annotations

import pytest
from engine_settings import vllm_engine_kwargs
from tool_script import OBSERVATION, TURN_1, TURN_2

from agents.formats.tir_agent import TIRAgent
from agents.models import load_model_and_tokenizer
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


@pytest.fixture(scope="session")
def thinking_tool_caller(tiny_model_dir):
    """(model, tokenizer): the tiny model under the drop-thinking ChatML (as QwQ / DeepSeek-R1 drop earlier
    thinking), overfit on one hermes episode of a thinking model as `env.think_history=strip` makes it: trace 1, a
    <think> block and a tool call; trace 2, sampled from the template's rendering (turn 1's thinking dropped, the
    tool's result), a <think> block and the boxed answer (trainer/sft/train.py `episode_sequences`)."""
    import gymnasium as gym

    from agents.experts import ExpertEpisode
    from agents.templates.history import HistoryPolicy
    from agents.tokenizer import DROP_THINKING_CHAT_TEMPLATE
    from envs.tir.expert import with_thinking
    from envs.tir.styles import get_style
    from trainer.sft.train import episode_sequences

    model, tok = load_model_and_tokenizer(tiny_model_dir)
    tok.chat_template = DROP_THINKING_CHAT_TEMPLATE
    agent = TIRAgent(tok, "hermes")
    turns = with_thinking([f"Let me compute it.\n{get_style('hermes').format_tool_call('print(4821 * 937)')}",
                           TURN_2])
    env = gym.make("alprl/TIRMath-v0", style="hermes", max_turns=3)
    env.reset(seed=0, options={"split": "train", "index": 1700})
    observation = env.step(turns[0])[0]  # the tool's result as the env shows it
    env.close()
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    data = [seq for a, b in [(127, 827), (4821, 937), (35, 61), (902, 44), (6, 7358), (51, 203), (77, 9), (3344, 12)]
            for seq in episode_sequences(agent, ExpertEpisode(f"Compute {a} * {b}.", turns, [observation], 1.0), eos,
                                         64, HistoryPolicy(think_history="strip"))]
    assert len(data) == 16  # two traces an episode
    cfg = build_config(None, ["sft.epochs=150", "sft.batch_size=16", "sft.lr=2e-2"])  # 150 full-batch steps
    losses = train_on_sequences(model, data, cfg, tok.pad_token_id, show_progress=False)
    assert losses[-1] < 0.005, f"the thinking tool caller did not memorize its traces (loss {losses[-1]:.3f})"
    return model, tok
