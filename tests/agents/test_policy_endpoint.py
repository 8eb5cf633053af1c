"""The policy endpoint, through real uvicorn on loopback and the real `openai` client: an agent written against the
OpenAI API plays the TIR task and its trajectories are the native rollout's (ids, masks, log-probs) for the same
sampled tokens; tool calls come back as OpenAI `tool_calls`; a harness that edits its history splits its episode
at a prefix break; bad requests answer OpenAI's errors and mark their episode, which is still returned.

The sampled-model test uses the "tool caller" (tests/agents/conftest.py: the tiny model memorizing one simpletir
episode) on the transformers engine in fp32; the others script the engine's turns (`ScriptEngine`), as
tests/agents/test_ended_turns.py does, so a case is exact and costs no model.
"""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import Future

import openai
import pytest
from engine_settings import HF_FP32
from tool_script import needs_vllm

from agents.endpoint.harness import HarnessSource, HarnessTask
from agents.endpoint.recorder import Recorder
from agents.endpoint.sampler import Sampler
from agents.endpoint.server import EndpointServer
from agents.endpoint.service import EndpointSettings, PolicyService
from agents.engines.base import GenerationResult
from agents.engines.hf import HFEngine
from agents.formats.tir_agent import TIRAgent
from agents.harnesses import tir_harness
from agents.rollout import EpisodeSpec, RolloutLimits, run_episodes
from envs.tir.env import TIRMathEnv
from envs.tir.styles import get_style
from sandbox.execution.in_process import LocalExecutor

SPECS = [EpisodeSpec(seed=i, options={"split": "train", "index": 2000 + i // 2}, group_id=i // 2) for i in range(4)]
HERMES = get_style("hermes")


@pytest.fixture(scope="module")
def runner():
    executor = LocalExecutor()
    yield executor
    executor.close()


def envs_for(runner, style: str, n: int = len(SPECS), max_turns: int = 3) -> list[TIRMathEnv]:
    return [TIRMathEnv(style=style, max_turns=max_turns, runner=runner) for _ in range(n)]


def same_stream(native, harness) -> None:
    """The harness's trajectory is the native one: ids, masks, turns, reward; log-probs up to batch numerics."""
    assert harness.prompt_ids == native.prompt_ids
    assert harness.response_ids == native.response_ids
    assert harness.loss_mask == native.loss_mask
    assert harness.turn_spans == native.turn_spans
    assert harness.rollout_logprobs == pytest.approx(native.rollout_logprobs, abs=1e-4)
    assert harness.reward == native.reward and harness.group_id == native.group_id


def source(engine, agent, tok, envs, harness, limits, style, **kw) -> HarnessSource:
    settings = EndpointSettings(limits.max_new_tokens, limits.max_response_tokens, tool_format=style,
                                temperature=1.0, top_p=1.0, top_k=0)
    return HarnessSource(engine, agent, tok, envs, harness, settings, **kw)


# ------------------------------------------------------------------ a sampled model, token for token


@pytest.mark.parametrize("policy", ["tool_caller", "model_tok"])
def test_an_openai_client_agent_samples_the_native_tir_rollout_token_for_token(request, runner, policy):
    """The tool caller runs code (a multi-turn stream, observations masked in between); the random tiny model
    samples near-uniform tokens, which only the per-call seeds can make equal to the native rollout's."""
    model, tok = request.getfixturevalue(policy)
    engine = HFEngine(model, tok, **HF_FP32)
    agent, limits = TIRAgent(tok, "simpletir"), RolloutLimits(48, 160, 64, mask_void_turns=False)
    native = run_episodes(engine, agent, envs_for(runner, "simpletir"), SPECS, limits, seed=123)
    played = source(engine, agent, tok, envs_for(runner, "simpletir"), tir_harness.play, limits, "simpletir")
    trajs = played.run(SPECS, 123)
    assert len(trajs) == len(native) and played.metrics(trajs)["rollout/prefix_breaks"] == 0
    assert all(not t.earlier for t in trajs)
    for n, h in zip(native, trajs, strict=True):
        same_stream(n, h)
        assert h.info["num_tool_calls"] == n.info["num_tool_calls"] and h.info["won"] == n.info["won"]
    if policy == "tool_caller":
        # code, its result (masked), more: the overfit model writes the script for most tasks, not every one (on
        # some machines' numerics it answers an unseen task's numbers at once); the streams above match either way
        ran = [t for t in trajs if t.info["num_tool_calls"] > 0]
        assert ran and all(t.info["turns"] >= 2 and 0 in t.loss_mask for t in ran)
    else:
        assert len({tuple(t.response_ids) for t in trajs}) == len(trajs)  # every episode its own sample
        other = source(engine, agent, tok, envs_for(runner, "simpletir"), tir_harness.play, limits, "simpletir")
        assert other.run(SPECS[:1], 124)[0].response_ids != trajs[0].response_ids  # the seed decides the tokens


@pytest.mark.slow
@needs_vllm
def test_on_vllm_the_endpoints_concurrent_calls_sample_the_native_rollouts_tokens(vllm_fp32, tool_caller, runner):
    """vLLM takes the endpoint's calls as they come (no dispatcher): the same seeds give the same streams."""
    model, tok = tool_caller
    vllm_fp32.update_weights(model.named_parameters())
    agent, limits = TIRAgent(tok, "simpletir"), RolloutLimits(48, 160, 64, mask_void_turns=False)
    native = run_episodes(vllm_fp32, agent, envs_for(runner, "simpletir"), SPECS, limits, seed=11)
    played = source(vllm_fp32, agent, tok, envs_for(runner, "simpletir"), tir_harness.play, limits, "simpletir")
    trajs = played.run(SPECS, 11)
    assert played.metrics(trajs)["rollout/prefix_breaks"] == 0 and any(t.info["turns"] >= 2 for t in trajs)  # a tool call ran
    for n, h in zip(native, trajs, strict=True):
        same_stream(n, h)


# ------------------------------------------------------------------ scripted turns


class ScriptEngine:
    """Answers each request with the turn its prompt is at: `script(prompt_text) -> (text, finish, closing id)`."""

    concurrent_callers = False
    overlap_episodes = False

    def __init__(self, tok, script, max_model_len: int = 100_000):
        self.tok, self.script, self.max_model_len, self.requests = tok, script, max_model_len, []

    def submit(self, requests, *, greedy=False, seed=None):
        futures = []
        for request in requests:
            self.requests.append(request)
            text, finish, end = self.script(self.tok.decode(request.prompt_ids, skip_special_tokens=False))
            ids = self.tok.encode(text, add_special_tokens=False) + ([end] if end is not None else [])
            future: Future = Future()
            future.set_result(GenerationResult(ids, [-0.25] * len(ids), finish))
            futures.append(future)
        return futures


def hermes_script(tok):
    end = tok.convert_tokens_to_ids("<|im_end|>")
    call = "I will compute.\n" + HERMES.format_tool_call("print(6 * 7)")

    def script(prompt: str):
        turn = prompt.count("<|im_start|>assistant") - 1
        return (call, "eos", end) if turn == 0 else ("So \\boxed{42}.", "eos", end)

    return script


def test_hermes_tool_calls_come_back_as_openai_tool_calls_and_stitch_as_the_native_tool_turns(tiny_tokenizer, runner):
    tok = tiny_tokenizer
    agent, limits = TIRAgent(tok, "hermes"), RolloutLimits(64, 400, 64, mask_void_turns=False)
    assert agent.tool_turn is not None and agent.stop_strings(0) == []  # the tiny template renders tool turns
    native = run_episodes(ScriptEngine(tok, hermes_script(tok)), agent, envs_for(runner, "hermes"), SPECS, limits)
    seen = []

    async def harness(task: HarnessTask, base_url: str, api_key: str):
        async with openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client:
            r = await client.chat.completions.create(model=task.model, messages=task.messages, tools=task.tools,
                                                     logprobs=True, extra_body={"return_token_ids": True})
            seen.append((task.index, r))  # episodes run concurrently: keep which one this probe was
        return await tir_harness.play(task, base_url, api_key)

    played = source(ScriptEngine(tok, hermes_script(tok)), agent, tok, envs_for(runner, "hermes"), harness,
                    limits, "hermes")
    trajs = played.run(SPECS, 7)
    # each episode's first call was the probe above, whose reply the agent dropped: its own first call repeats the
    # prompt, which does not extend the probe's tokens, so the agent's calls are the episode's second trace
    index, r = min(seen, key=lambda probe: probe[0])
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content == "I will compute."
    (call,) = choice.message.tool_calls
    assert call.function.name == "code_interpreter" and json.loads(call.function.arguments) == {"code": "print(6 * 7)"}
    assert [e.logprob for e in choice.logprobs.content] == [-0.25] * r.usage.completion_tokens
    assert choice.model_extra["token_ids"][-1] == tok.convert_tokens_to_ids("<|im_end|>")
    assert r.model_extra["prompt_token_ids"] == native[index].prompt_ids
    assert played.metrics(trajs)["rollout/prefix_breaks"] == len(SPECS)
    assert all(len(t.traces) == 2 and t.info["trace_starts"] == {"prefix_break": 1} for t in trajs)
    for n, h in zip(native, trajs, strict=True):  # the episode's last trace: the agent's own calls
        same_stream(n, h)
        assert h.info["num_tool_calls"] == 1 and n.info["num_tool_calls"] == 1


def test_a_harness_that_edits_its_history_makes_a_prefix_break_and_an_episode_of_two_traces(tiny_tokenizer, runner):
    tok = tiny_tokenizer
    agent, limits = TIRAgent(tok, "hermes"), RolloutLimits(64, 400, 64, mask_void_turns=False)

    async def editing(task: HarnessTask, base_url: str, api_key: str):
        async with openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client:
            first = await client.chat.completions.create(model=task.model, messages=task.messages, tools=task.tools)
            call = first.choices[0].message.tool_calls[0]
            history = [*task.messages, {"role": "assistant", "content": "I will compute it differently.",
                                        "tool_calls": [call.model_dump()]},  # not what the policy wrote
                       {"role": "tool", "tool_call_id": call.id, "content": "42"}]
            await client.chat.completions.create(model=task.model, messages=history, tools=task.tools)
        return 1.0, {"won": True}

    played = source(ScriptEngine(tok, hermes_script(tok)), agent, tok, envs_for(runner, "hermes", 2), editing,
                    limits, "hermes")
    episodes = played.run(SPECS[:2], 0)
    assert played.metrics(episodes)["rollout/prefix_breaks"] == 2
    assert len(episodes) == 2 and all(len(e.traces) == 2 for e in episodes)
    first, second = episodes[0].traces
    assert second is episodes[0] and second.info["trace"] == 1 and second.info["trace_start"] == "prefix_break"
    assert (first.reward, second.reward, first.group_id, second.group_id) == (1.0, 1.0, 0, 0)
    assert second.info["won"] and second.info["prefix_breaks"] == 1 and second.info["turns"] == 2
    assert second.prompt_ids[: len(first.prompt_ids)] == first.prompt_ids  # the edit comes after the first prompt
    assert second.prompt_ids[: len(first.prompt_ids) + len(first.response_ids)] != first.prompt_ids \
        + first.response_ids
    assert first.loss_mask == [1] * len(first.response_ids) and second.loss_mask == [1] * len(second.response_ids)
    assert tok.decode(second.prompt_ids).count("I will compute it differently.") == 1


# ------------------------------------------------------------------ refusals: OpenAI's errors, episodes marked


def call_with(**overrides):
    async def harness(task: HarnessTask, base_url: str, api_key: str):
        async with openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client:
            request = {"model": task.model, "messages": task.messages, **overrides}
            try:
                await client.chat.completions.create(**request)
            except openai.APIStatusError as err:  # the harness goes on: its episode stays marked
                return 0.5, {"status": err.status_code, "error": err.body}
        return 0.5, {"status": 200}

    return harness


@pytest.mark.parametrize(("overrides", "max_model_len", "status", "code", "param", "reason"), [
    ({"model": "gpt-4o"}, 100_000, 404, "model_not_found", "model", "harness_error"),
    ({}, 8, 400, "context_length_exceeded", "messages", "context_overflow"),
    ({"tools": [{"type": "function", "function": {"description": "no name"}}]}, 100_000, 400, "invalid_tools",
     "tools", "harness_error"),
    ({"temperature": 0.3}, 100_000, 400, "unsupported_parameter", "temperature", "harness_error"),
])
def test_bad_requests_answer_openai_errors_and_their_episode_is_marked_not_lost(
        tiny_tokenizer, runner, overrides, max_model_len, status, code, param, reason):
    tok = tiny_tokenizer
    agent, limits = TIRAgent(tok, "hermes"), RolloutLimits(64, 400, 64, mask_void_turns=False)
    engine = ScriptEngine(tok, hermes_script(tok), max_model_len=max_model_len)
    played = source(engine, agent, tok, envs_for(runner, "hermes", 2), call_with(**overrides), limits, "hermes")
    trajs = played.run(SPECS[:2], 0)
    assert len(trajs) == 2 and not engine.requests
    for t in trajs:
        assert t.info["status"] == status
        error = t.info["error"]  # the openai client's parsed body: OpenAI's error object
        assert set(error) == {"message", "type", "param", "code"}
        assert (error["code"], error["param"], error["type"]) == (code, param, "invalid_request_error")
        assert t.infra_failure == reason and t.reward == 0.0 and t.info["loss_masked"]
        assert t.prompt_ids and not t.response_ids and t.info["endpoint_errors"]  # no call sampled


def test_a_harness_that_raises_times_out_or_returns_no_reward_is_marked(tiny_tokenizer, runner):
    tok = tiny_tokenizer
    agent, limits = TIRAgent(tok, "hermes"), RolloutLimits(64, 400, 64, mask_void_turns=False)

    async def flaky(task: HarnessTask, base_url: str, api_key: str):
        if task.index == 3:
            return 1.0  # without asking the policy: nothing to train on
        await tir_harness.play(task, base_url, api_key)
        if task.index == 0:
            raise RuntimeError("tool server down")
        if task.index == 1:
            await asyncio.sleep(30)
        return float("nan")

    played = source(ScriptEngine(tok, hermes_script(tok)), agent, tok, envs_for(runner, "hermes"), flaky, limits,
                    "hermes", timeout_s=3.0)
    trajs = played.run(SPECS, 0)
    assert [t.infra_failure for t in trajs] == ["harness_error", "episode_timeout", "harness_error", "harness_error"]
    assert "tool server down" in trajs[0].info["harness_error"] and "nan" in trajs[2].info["harness_error"]
    assert trajs[3].info["harness_error"] == "the harness made no model call" and not trajs[3].response_ids
    assert all(t.reward == 0.0 and sum(t.loss_mask) == 0 for t in trajs)
    assert all(t.response_ids for t in trajs[:3])  # what they sampled is recorded, out of the loss


# ------------------------------------------------------------------ the routes on their own


@pytest.fixture()
def standalone(tiny_tokenizer):
    tok = tiny_tokenizer
    end = tok.convert_tokens_to_ids("<|im_end|>")
    engine = ScriptEngine(tok, lambda prompt: ("The answer is 7.\n```\n", "stop", None) if "Q" in prompt
                          else ("fine", "eos", end))
    recorder = Recorder(200, lambda ids: tok.decode(ids), open_episodes=True)
    sampler = Sampler(engine)
    settings = EndpointSettings(32, 200, seed=0, temperature=1.0, top_p=1.0, top_k=0)
    service = PolicyService(tok, sampler, recorder, settings, max_model_len=4096)
    with EndpointServer(service) as server:
        yield server, recorder, tok
    sampler.close()


def test_models_completions_and_a_chat_stream_are_served(standalone):
    server, recorder, tok = standalone
    client = openai.OpenAI(base_url=server.base_url, api_key="EMPTY", max_retries=0)
    assert [m.id for m in client.models.list().data] == ["alprl-policy"]
    first = client.completions.create(model="alprl-policy", prompt="Q: 3 + 4?", user="ep-text", logprobs=0,
                                      stop=["\n```\n"], extra_body={"return_token_ids": True})
    choice = first.choices[0]
    sampled = choice.model_extra["token_ids"]
    assert choice.text == "The answer is 7." and choice.finish_reason == "stop"
    assert choice.model_extra["stop_reason"] == "\n```\n" and choice.logprobs.token_logprobs == [-0.25] * len(sampled)
    assert first.model_extra["prompt_token_ids"] == tok.encode("Q: 3 + 4?")
    # a text prompt that carries on from the earlier prompt + its completion (stop string included) reuses their
    # ids as sampled and encodes only the rest
    client.completions.create(model="alprl-policy", prompt="Q: 3 + 4?" + tok.decode(sampled) + "Check: 7.",
                              user="ep-text", stop=["\n```\n"])
    sample = recorder.episodes["ep-text"].trajectory
    assert not sample.earlier  # one trace: the second prompt extended the first
    tail = tok.encode("Check: 7.", add_special_tokens=False)
    assert sample.response_ids == sampled + tail + sampled
    assert sample.loss_mask == [1] * len(sampled) + [0] * len(tail) + [1] * len(sampled)
    stream = client.chat.completions.create(model="alprl-policy", messages=[{"role": "user", "content": "hi"}],
                                            stream=True, extra_headers={"X-Episode-Id": "ep-chat"})
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "fine"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert recorder.episodes["ep-chat"].trajectory.response_ids[-1] == tok.convert_tokens_to_ids("<|im_end|>")
