"""Both engines on the real Qwen2.5 vocabulary (tests/qwen_vocab.py), a base checkpoint (eos `<|endoftext|>`):

- a policy that writes `<|im_end|>` ends its turn there, in the transformers engine and in vLLM alike;
  before, both sampled on past it with loss mask 1 (vLLM stops on the tokenizer's and generation config's eos
  only, the transformers engine on the tokenizer's alone);
- TIR episodes in the simpletir and hermes styles roll out through vLLM-CPU with exact token ids
  (a multi-byte character sampled byte by byte stays so), masks, and log-probs the trainer reproduces;
- vLLM serves the checkpoint with the same tokenizer and chat template.
"""

from __future__ import annotations

import pytest
import torch
from engine_settings import HF_FP32, make_engine_kwargs
from qwen_script import OBSERVATIONS, TASK
from qwen_vocab import FIRST_ADDED_ID, always_emit, tiny_qwen_model
from test_ended_turns import SPEC, CountingRunner
from tool_script import needs_vllm  # noqa: F401  (fixtures: conftest.py)

from agents.control_tokens import end_of_turn_ids
from agents.engines import make_engine
from agents.engines.base import GenerationRequest
from agents.engines.hf import HFEngine
from agents.formats.tir_agent import TIRAgent
from agents.models import load_model_and_tokenizer
from agents.rollout import RolloutLimits, run_episodes
from envs.tir.env import TIRMathEnv
from trainer.objective.logprobs import compute_logprobs
from trainer.objective.types import collate

IM_END = 151645
LIMITS = RolloutLimits(max_new_tokens=16, max_response_tokens=64, max_obs_tokens=16, mask_void_turns=False)


@pytest.fixture(scope="module")
def im_end_writer(qwen_base_dir):
    """The base checkpoint made to write `<|im_end|>` after anything (qwen_vocab.always_emit)."""
    model, tok = load_model_and_tokenizer(qwen_base_dir)
    return always_emit(model, IM_END), tok


def play_one(engine, tok, limits=LIMITS, style="simpletir", greedy=False):
    env = TIRMathEnv(style=style, max_turns=3, runner=(runner := CountingRunner()))
    try:
        return run_episodes(engine, TIRAgent(tok, style), [env], [SPEC], limits, greedy=greedy, seed=0)[0], runner
    finally:
        env.close()


# --------------------------------------------------------------------- (1) a base checkpoint's turn ends


def test_transformers_engine_ends_a_base_checkpoints_turn_at_im_end(im_end_writer):
    model, tok = im_end_writer
    engine = make_engine("hf", model, tok, **make_engine_kwargs(dtype="float32"))
    request = GenerationRequest(TIRAgent(tok).prompt_ids(TASK.question, {}), 8)
    assert engine.generate([request])[0].token_ids == [IM_END] * 8  # eos alone: the turn never ends
    traj, _ = play_one(engine, tok)
    assert traj.response_ids == [IM_END] and traj.loss_mask == [1] and traj.info["message_closed"]


def test_transformers_engine_stops_on_the_generation_configs_eos_list_as_vllm_does(qwen_tokenizer):
    instruct_config = tiny_qwen_model(eos_ids=[IM_END, FIRST_ADDED_ID], hidden_size=32)
    engine = HFEngine(instruct_config, qwen_tokenizer, **HF_FP32)
    assert engine.eos_token_ids == [FIRST_ADDED_ID, IM_END]


def test_a_configured_stop_token_reaches_every_request(im_end_writer):
    """`rollout.stop_token_ids` -> RolloutLimits -> each request's stop ids, after the derived ones."""
    from trainer.setup.build import build_config
    from trainer.tasks import rollout_limits

    model, tok = im_end_writer
    limits = rollout_limits(build_config(None, ["rollout.stop_token_ids=[151664]"]))
    assert limits.stop_token_ids == [151664]
    seen = []

    class Recording(HFEngine):
        def generate(self, requests, **kwargs):
            seen.extend(r.stop_token_ids for r in requests)
            return super().generate(requests, **kwargs)

    play_one(Recording(model, tok, **HF_FP32), tok, limits=limits)
    assert seen == [end_of_turn_ids(tok) + [151664]] == [[FIRST_ADDED_ID, IM_END, 151664]]


@pytest.mark.slow
@needs_vllm
def test_vllm_ends_a_base_checkpoints_turn_at_im_end_as_the_transformers_engine(qwen_vllm, im_end_writer):
    model, tok = im_end_writer
    qwen_vllm.update_weights(model.named_parameters())
    request = GenerationRequest(TIRAgent(tok).prompt_ids(TASK.question, {}), 8)
    assert qwen_vllm.generate([request])[0].token_ids == [IM_END] * 8  # vLLM's own eos set: the turn never ends
    traj, _ = play_one(qwen_vllm, tok)
    assert traj.response_ids == [IM_END] and traj.loss_mask == [1] and traj.info["message_closed"]
    hf, _ = play_one(make_engine("hf", model, tok, **make_engine_kwargs(dtype="float32")), tok)
    assert (hf.response_ids, hf.loss_mask) == (traj.response_ids, traj.loss_mask)


# ------------------------------------------------------------------- (a) TIR episodes through vLLM-CPU


@pytest.mark.slow
@needs_vllm
@pytest.mark.parametrize("style", ["simpletir", "hermes"])
def test_tir_episode_through_vllm_keeps_sampled_ids_masks_and_log_probs(qwen_vllm, qwen_tool_caller, style):
    model, tok, scripts = qwen_tool_caller
    expected = scripts[style]
    qwen_vllm.update_weights(model.named_parameters())
    limits = RolloutLimits(64, 300, 64, mask_void_turns=False)
    traj, runner = play_one(qwen_vllm, tok, limits, style=style, greedy=True)
    assert traj.prompt_ids == expected.prompt
    assert traj.response_ids == expected.turn_1 + expected.observation + expected.turn_2  # nothing re-tokenized
    assert traj.loss_mask == expected.sequence[1][len(expected.prompt):]
    assert "print('分数', 8448 * 4126)" in runner.programs[0] and traj.reward == 1.0  # the env read the characters
    assert tok.decode(expected.observation) == OBSERVATIONS[style]  # the tool's Unicode as printed
    batch = collate([traj], tok.pad_token_id)
    with torch.no_grad():
        trainer_logp, _ = compute_logprobs(model, batch, temperature=1.0)
    sampled = batch.loss_mask > 0
    assert (batch.rollout_logp[~sampled] == 0).all()
    assert (trainer_logp - batch.rollout_logp).abs()[sampled].max().item() < 1e-4  # fp32 sampler and trainer


# ---------------------------------------------------------------- (c) vLLM serves the same tokenizer


@pytest.mark.slow
@needs_vllm
def test_vllm_loads_the_checkpoint_with_the_same_tokenizer_and_template(qwen_vllm, qwen_tokenizer):
    served = qwen_vllm.llm.get_tokenizer()
    text = "Hello world! Écrivez la réponse — 分数で <tool_call>2024</tool_call><|im_end|>"
    assert served.encode(text, add_special_tokens=False) == qwen_tokenizer.encode(text, add_special_tokens=False)
    assert served.chat_template == qwen_tokenizer.chat_template
    assert (served.eos_token_id, len(served)) == (FIRST_ADDED_ID, len(qwen_tokenizer))
    ids = qwen_tokenizer.encode(text)
    assert served.decode(ids, skip_special_tokens=False) == text
